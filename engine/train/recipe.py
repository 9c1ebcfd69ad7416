"""The DFlash training recipe (docs/training.md): the frozen target's context features, cached per sequence;
blocks of [anchor, MASK...] at random anchors, batched through one drafter forward under a block mask; the drafter
made from the target (its embedding and head frozen, layers copied), the loss weights and the learning rate."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..models.features import context_features


class Features:
    """The frozen target's context features (hidden states after `layer_ids`, HF hidden_states[l+1], concatenated)
    and what the loss needs of its next-token distribution, computed once per sequence and cached: the final
    normed hidden state, or with `topk` > 0 only its top-k token ids and logits (for the sparse head loss)."""

    def __init__(self, target, layer_ids: list[int], cache_gb: float, topk: int = 0):
        self.target, self.layer_ids, self.topk = target, list(layer_ids), topk
        self.cache: dict[int, tuple[torch.Tensor, ...]] = {}
        self.budget, self.used = int(cache_gb * 2**30), 0

    @torch.no_grad()
    def _compute(self, seqs: list[list[int]]) -> list[tuple[torch.Tensor, ...]]:
        dev = self.target.device
        T = max(map(len, seqs))
        ids = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, s in enumerate(seqs):  # right padding: valid positions never attend to the pads (causal)
            ids[i, :len(s)] = torch.tensor(s)
        feats, final = target_states(self.target, self.layer_ids, input_ids=ids.to(dev))
        if not self.topk:
            return [(feats[i, :len(s)].clone(), final[i, :len(s)].clone()) for i, s in enumerate(seqs)]
        W = self.target.get_output_embeddings().weight
        out = []
        for i, s in enumerate(seqs):
            top = torch.topk((final[i, :len(s)].to(W.dtype) @ W.T).float(), self.topk, dim=-1)  # sorted
            out.append((feats[i, :len(s)].clone(), top.indices.to(torch.int32), top.values))
        return out

    def compute(self, seq: list[int]) -> tuple[torch.Tensor, ...]:
        """One sequence's rows, not cached: (T, F*H) features, then as `get` returns them (unpadded)."""
        return self._compute([seq])[0]

    def get(self, keys: list[int], seqs: list[list[int]], T: int) -> tuple[torch.Tensor, ...]:
        """For the sequences `seqs` (cache keys `keys`): padded (b, T, F*H) features, then (b, T, H) final hidden
        states, or with `topk` the (b, T, k) top token ids and their logits."""
        miss = [j for j, k in enumerate(keys) if k not in self.cache]
        fresh = dict(zip(miss, self._compute([seqs[j] for j in miss]))) if miss else {}
        rows = []
        for j, k in enumerate(keys):
            if k in self.cache:
                rows.append(self.cache[k])
                continue
            row = fresh[j]
            size = sum(t.numel() * t.element_size() for t in row)
            if self.used + size <= self.budget:
                self.cache[k], self.used = row, self.used + size
            rows.append(row)
        padded = tuple(t.new_zeros((len(keys), T, *t.shape[1:])) for t in rows[0])
        for i, row in enumerate(rows):
            for dst, t in zip(padded, row):
                dst[i, :len(t)] = t
        return padded


@torch.no_grad()
def target_states(target, layer_ids: list[int], **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """One target forward (`inputs`: input_ids and optionally position_ids and a 4D attention_mask): the drafter's
    context features (engine/models/features.py, as decoding reads them) and the final normed hidden states."""
    with context_features(target, layer_ids) as features:
        final = target.model(**inputs, use_cache=False).last_hidden_state
    return features(final), final


def block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int) -> torch.Tensor:
    """(b, 1, n*B, ctx_len + n*B) bool, True = may attend. Keys are [context features, block 0, ..., block n-1];
    the queries of block a (anchor p_a) see context positions < p_a and their own block (bidirectional) only.
    A padding block (anchor 0) sees only itself, so no row is fully masked."""
    b, n = anchors.shape
    q_anchor = anchors.repeat_interleave(block_size, dim=1)                                  # (b, nB)
    ctx = torch.arange(ctx_len, device=anchors.device)[None, None, :] < q_anchor[:, :, None]  # (b, nB, T)
    blk = torch.arange(n * block_size, device=anchors.device) // block_size
    own = (blk[:, None] == blk[None, :]).expand(b, -1, -1)                                   # (b, nB, nB)
    return torch.cat([ctx, own], dim=2)[:, None]


def make_batch(seqs: list[list[int]], anchors: list[list[int]], *, block_size: int, mask_id: int,
               gamma: float, pad_to: int = 16, depth: int = 0) -> dict:
    """CPU tensors for one drafter forward over all blocks of a batch of sequences.

    rows = every (anchor, k >= 1) whose label x_{p+k} exists: `drow` indexes the flattened drafter output
    (b * n * B), `trow` the flattened target states (b * T) at p+k-1, whose next-token distribution is x_{p+k}'s.
    `depth` > 0 keeps only k <= depth (the block is still drafted whole; the head runs on fewer rows)."""
    B, b = block_size, len(seqs)
    n = max(1, max(map(len, anchors)))
    T = -(-max(map(len, seqs)) // pad_to) * pad_to  # aligned key length suits the fused attention kernels
    anc = torch.zeros((b, n), dtype=torch.long)
    block = torch.full((b, n * B), mask_id, dtype=torch.long)
    drow, trow, label, kk, slot = [], [], [], [], []
    k = torch.arange(1, min(B, depth + 1) if depth > 0 else B)
    for i, (s, a) in enumerate(zip(seqs, anchors)):
        if not a:
            continue
        ids, A = torch.tensor(s), torch.tensor(a)
        anc[i, :len(a)] = A
        block[i, torch.arange(len(a)) * B] = ids[A]
        P = A[:, None] + k                                   # (m, B-1) label positions
        ok = P < len(s)
        sl = torch.arange(len(a))[:, None].expand_as(P)
        drow.append((i * n * B + sl * B + k)[ok])
        trow.append((i * T + P - 1)[ok])
        label.append(ids[P.clamp(max=len(s) - 1)][ok])
        kk.append(k.expand_as(P)[ok])
        slot.append(sl[ok])
    cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0, dtype=torch.long)
    kk = cat(kk)
    w = torch.exp(-(kk - 1).float() / gamma)
    pos = torch.cat([torch.arange(T).expand(b, T), (anc[:, :, None] + torch.arange(B)).reshape(b, n * B)], dim=1)
    return {"anchors": anc, "block_ids": block, "position_ids": pos, "T": T, "drow": cat(drow), "trow": cat(trow),
            "labels": cat(label), "k": kk, "slot": cat(slot), "weights": w / w.sum().clamp_min(1e-9)}


def draft_forward(drafter, embed_w: torch.Tensor, feats: torch.Tensor, batch: dict, dtype: torch.dtype) -> torch.Tensor:
    """Drafter hidden states (b, n*B, H) for every block of the batch, in one forward (batch["mask"], when there is
    one, replaces block_mask: blocks that see context features of their own, as ReAnchor's shifted blocks do)."""
    dev = feats.device
    noise = F.embedding(batch["block_ids"].to(dev, non_blocking=True), embed_w).to(dtype)
    mask = batch["mask"].to(dev) if "mask" in batch else block_mask(batch["anchors"].to(dev, non_blocking=True),
                                                                    batch["T"], drafter.block_size)
    return drafter(position_ids=batch["position_ids"].to(dev, non_blocking=True), attention_mask=mask,
                   noise_embedding=noise, target_hidden=feats.to(dtype))


def make_drafter(target, *, num_layers: int, block_size: int, mask_id: int, target_layer_ids: list[int] | None):
    from dflash import DFlashDraftModel

    from ..models import drafter_config

    cfg = drafter_config(target.config, num_layers=num_layers, block_size=block_size, mask_token_id=mask_id,
                         target_layer_ids=target_layer_ids)
    return DFlashDraftModel(cfg)


@torch.no_grad()
def init_from_target(drafter, target, layers: bool = True) -> list[str]:
    """The drafter's final norm takes the target's (both feed the same frozen head, so logits start at the
    target's scale). With `layers`, also start from the target's own top decoder layers (same shapes for a
    Llama/Qwen target; q_norm/k_norm stay at 1, Llama has none) and let fc pass the deepest context layer
    through unchanged. Returns what was copied."""
    drafter.norm.weight.copy_(target.model.norm.weight.float())
    if not layers:
        return ["norm"]
    names = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"]
    t_layers = target.model.layers
    copied = []
    for j, d in enumerate(drafter.layers):
        src = len(t_layers) - len(drafter.layers) + j
        for name in names:
            dw, tw = d.get_submodule(name).weight, t_layers[src].get_submodule(name).weight
            if dw.shape == tw.shape:
                dw.copy_(tw.float())
                copied.append(f"layers.{j}.{name}<-{src}")
    H = drafter.config.hidden_size
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, -H:] = torch.eye(H)  # the last target_layer_id is the deepest
    return copied + ["norm"]


def default_gamma(block_size: int) -> float:
    """The loss weight's decay exp(-(k-1)/gamma) over depth k when --gamma is not given: DFlash's 7 for blocks of
    16 and 4 for 8, else B/2.3."""
    return {16: 7.0, 8: 4.0}.get(block_size, block_size / 2.3)


def lr_at(progress: float, base: float, warmup: float) -> float:
    """Linear warmup over the first `warmup` fraction, then cosine to zero."""
    if progress < warmup:
        return base * max(progress, 1e-3) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (progress - warmup) / (1 - warmup))))

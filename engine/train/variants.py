"""Training the paper's drafter variants for the target (`python -m engine train --variant ...`).

Size: about 700 lines in one module because Domino and DSpark share HeadTrainer whole and Draft-OPD's trainer reuses
its head-rows cache and its sparse head loss: split by variant, each module would import the others' pieces.

domino, dspark   only a new sequential head (engine/models/variants.py) on the frozen --init-from DFlash
                 backbone. The backbone never changes, so its block states are computed once per
                 (sequence, anchor) and cached (HeadRows, under --data/head-rows/, a file per 64 sequences named by
                 the backbone's weights and the sequences: other heads on that backbone and data added later
                 reuse them); a step runs the head alone,
                 teacher-forced on the response tokens:
                   rows     anchor p, block position k = 1..D (--head-depth), label x_{p+k}
                   logits   base_k + W2 u_k at the target's top-K tokens of row p+k-1 (--head-topk) and M shared
                            negatives (--negatives): the 49152-wide head is never formed; the base logits at
                            the top-K are cached with the states, those at the negatives are z_k W[neg]^T
                   loss     soft cross-entropy to the target's top-K distribution, weight exp(-(k-1)/gamma),
                            times --head-policy-floor past the head's own first miss (on-policy, as Draft-OPD);
                            DSpark adds its confidence head: BCE(sigmoid(s_k), 1[the corrected argmax is the
                            target's]) x --conf-weight (greedy acceptance; the paper's label is 1 - TV at T=1)
                 W2 starts at zero, so step 0 drafts exactly as the backbone alone. --backbone-from moves a trained
                 head (--init-from) onto another DFlash backbone of the same shape (a Draft-OPD one), frozen there.
opd              Draft-OPD (Lei et al. 2026): on-policy post-training of the whole --init-from DFlash drafter.
                 At T=0 a rollout (greedy speculative decoding with the current drafter) commits the target's own
                 greedy response (losslessness), so it is replayed on those responses. Per block at anchor p whose
                 greedy drafts are accepted a deep (drafts 1..a are the response's tokens, draft a+1 is not):
                   response stream  KL(p_T || q) at offsets 1..a+1 (the accepted drafts and the correction)
                   rejected stream  the k3 reverse-KL estimate r - log r - 1, r = p_T(x) / q(x), at the first
                                    rejected draft x (offset a+1), and with --opd-suffix N at the next N drafts
                                    too; weight gamma^(o-1) at offset o (--opd-gamma)
                   L = (sum_R KL + w_X sum_X gamma^(o-1) k3) / (N_R + w_X sum_X gamma^(o-1)),  w_X = --opd-reject-weight
                 Offsets past a+1 are never verified in a round, so they get no loss but the suffix's: the head
                 runs only on the ~1 + a (+ N) rows per block that the two streams score, and a's greedy drafts are
                 computed depth by depth, only for the blocks still accepted (opd_accepted).
                 --opd-anchors picks the blocks. rollout: the rollout's own blocks (main.rollout), which costs a
                 draft at every anchor of a sequence before each step (~2.5 s a sequence on one CPU thread).
                 random (default): random anchors of the response, as DFlash training samples them, with a found
                 in the training forward itself, so a step costs about a DFlash step. A T=0 rollout anchors at
                 1 of every tau positions; random anchors weigh every position alike, the scoring is the same.
                 Draft-OPD scores single tokens (a Bernoulli forward KL); with the target's whole distribution at
                 hand the response stream uses the full KL. The first rejected draft's prefix is the target's, so
                 its p_T is in the cached target pass (the default, as Draft-OPD's `rejected_draft_first_token_only`).
                 A later one's prefix holds the drafter's own rejected drafts: --opd-suffix appends those chains to
                 the sequence in one more target forward per sequence (suffix_logp, a verification mask).
                 --opd-reanchor W adds our ReAnchor replay stream (not in Draft-OPD): the drafter trained for the
                 blocks ReAnchor drafts from a rejection's states. Of REANCHOR_CHAINS random blocks per sequence,
                 the rejected suffix (the first rejected greedy draft at q = p+a+1 and the next drafts, at most
                 --opd-reanchor-offsets) goes through the target behind a chain mask (chain_states), as the verify
                 pass saw it; its states are R and its argmaxes a_d. The shifted block g(d) = [a_d, MASK..] at
                 q+d.. sees F[<q] ++ R[0..d-1], as the engine drafts it (replay_batch), and attaches where the
                 round's baseline would hold a_d were it the response itself: the earliest t with x[q+t] = a_d
                 (reanchor_sites). There its position j predicts x[q+t+j]:
                   replay stream   KL(p_T(. | x[<q+t+j]) || q(g(d)[j])), j = 1..--opd-reanchor-depth, weight
                                   exp(-(j-1)/gamma) (DFlash's), normalised apart; L += W x that
                 A plain DFlash drafter is never trained on a context that ends in a wrong token's states, which is
                 every shifted block's; one more target pass per sequence and step.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..models.variants import draft_value, variant_config, variant_name
from ..paths import DRAFTERS
from .checkpoint import folder_state, lineage_of
from .data import log
from .evaluation import draft_matches, eval_tau, frozen_head, rollout
from .flags import model_id
from .loss import head_loss, negatives
from .main import Trainer
from .recipe import draft_forward, make_batch, target_states

DEFAULT_TOPK = 16
SEQS_PER_FILE = 64   # training sequences per head-rows cache file
REANCHOR_CHAINS = 16  # blocks per sequence whose rejected suffix --opd-reanchor re-anchors (a target pass each)


# ------------------------------------------------------------------------------------- head feature cache
@dataclass
class HeadRows:
    """The frozen backbone's block states and what the head's loss needs, per anchor (N anchors, D positions)."""
    z: torch.Tensor      # [N, D, H] bf16: the states predicting p+1 .. p+D
    tok: torch.Tensor    # [N, D+1] long: x_p (the anchor) .. x_{p+D}; -1 past the sequence's end
    tids: torch.Tensor   # [N, D, K] int32: the target's top-K tokens at p+k-1 (sorted: column 0 is its argmax)
    tlg: torch.Tensor    # [N, D, K] float16: their target logits
    blg: torch.Tensor    # [N, D, K] float16: the backbone's logits for those tokens

    def __len__(self) -> int:
        return len(self.tok)


@torch.no_grad()
def head_rows_of(drafter, feats, s: list[int], P: int, anchors: list[int], *, D: int, W: torch.Tensor,
                 embed_w: torch.Tensor, dtype: torch.dtype, autocast, per_forward: int = 64) -> HeadRows:
    """HeadRows of one sequence (`feats`: main.Features with topk; its target pass runs once per sequence)."""
    B, mask_id, n_tok = drafter.block_size, int(drafter.mask_token_id), len(s)
    f, ids, lg = (t[None] for t in feats.compute(s))
    out = []
    for c in range(0, len(anchors), per_forward):
        part = torch.tensor(anchors[c:c + per_forward])
        batch = make_batch([s], [part.tolist()], block_size=B, mask_id=mask_id, gamma=1.0)
        pad = batch["T"] - f.shape[1]
        with autocast():
            h = draft_forward(drafter, embed_w, F.pad(f, (0, 0, 0, pad)), batch, dtype)
        z = h.reshape(len(part), B, -1)[:, 1:D + 1].float()
        pos = part[:, None] + torch.arange(D + 1)                         # x_p .. x_{p+D}
        tok = torch.tensor(s)[pos.clamp(max=n_tok - 1)].masked_fill(pos >= n_tok, -1)
        trow = (part[:, None] + torch.arange(D)).clamp(max=n_tok - 1)      # the target rows p+k-1
        tids = ids[0, trow].long()
        blg = torch.einsum("ndh,ndkh->ndk", z.to(W.dtype), W[tids]).float()
        out.append(HeadRows(z.to(torch.bfloat16), tok, tids.int(), lg[0, trow].half(), blg.half()))
    return _cat(out)


def head_loss_rows(drafter, rows: HeadRows, W: torch.Tensor, *, gamma: float, n_neg: int,
                   conf_weight: float, gen: torch.Generator | None = None, policy_floor: float = 1.0):
    """(loss, hit per valid row, k per valid row) of the head on a batch of cached rows (module docstring)."""
    z, tok = rows.z.float(), rows.tok
    tids, tlg, blg = rows.tids.long(), rows.tlg.float(), rows.blg.float()
    n, D, K = tids.shape
    valid = tok[:, 1:] >= 0
    neg = negatives(tids, W.shape[0], n_neg, gen)
    u, W2 = drafter.teacher_forced(z, tok[:, :D].clamp(min=0))
    W2 = W2.float()
    u = u.float()
    lk = blg + torch.einsum("ndr,ndkr->ndk", u, W2[tids])                  # at the target's top-K
    ln = z @ W[neg].float().T + u @ W2[neg].T                               # at the shared negatives
    slot = torch.full((W.shape[0],), len(neg), dtype=torch.long, device=tids.device)
    slot[neg] = torch.arange(len(neg), device=tids.device)
    dup = torch.zeros(n, D, len(neg) + 1, dtype=torch.bool).scatter_(-1, slot[tids], True)[..., :-1]
    logp = torch.log_softmax(torch.cat([lk, ln.masked_fill(dup, float("-inf"))], -1), -1)
    q = torch.softmax(tlg, -1)
    k = torch.arange(1, D + 1).expand(n, D)
    w = torch.exp(-(k - 1).float() / gamma) * valid
    corrected = (k > getattr(drafter, "pure_prefix", 0)).float()           # Domino's pure prefix has no head
    hit = logp.argmax(-1) == 0
    if policy_floor < 1:
        # on policy (Draft-OPD's accepted stream): a greedy round reaches position k only if the head's drafts
        # 1..k-1 all hit, so positions past the first miss weigh policy_floor; the miss itself keeps full weight
        reached = torch.cat([torch.ones_like(hit[:, :1]), hit[:, :-1]], 1).cumprod(1).float()
        w = w * (policy_floor + (1 - policy_floor) * reached)
    w = w * corrected / (w * corrected).sum().clamp_min(1e-9)
    loss = (-(q * logp[..., :K]).sum(-1) * w).sum()
    if getattr(drafter, "confidence_head", None) is not None and conf_weight > 0:
        s = drafter.confidence_logit(z, u)
        loss = loss + conf_weight * (F.binary_cross_entropy_with_logits(s, hit.float(), reduction="none")
                                     * w).sum()
    return loss, hit[valid], k[valid]


def backbone_digest(drafter) -> str:
    """A hash of the backbone's weights (all but the head's): the cached rows depend on nothing else of the drafter."""
    head, h = {id(p) for p in drafter.head_parameters()}, hashlib.sha1()
    for name, p in drafter.named_parameters():
        if id(p) not in head:
            h.update(name.encode())
            h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


def _cat(parts: list[HeadRows]) -> HeadRows:
    return HeadRows(*(torch.cat([getattr(r, k) for r in parts]) for k in HeadRows.__dataclass_fields__))


class RowStore:
    """The cache files' HeadRows, memory-mapped and gathered per step, never concatenated: the pages are the OS's,
    shared by every trainer reading the same files (two heads on one 1 M-row cache) and dropped under pressure,
    where each run's in-memory copy took 10 GB per 500 k rows and twice that while it was being joined."""

    def __init__(self, files: list[Path]):
        for f in files:   # read once in order, into the page cache: random page faults would slow the first steps
            with open(f, "rb") as h:
                while h.read(1 << 24):
                    pass
        self.parts = [HeadRows(**torch.load(f, weights_only=True, mmap=True)) for f in files]
        self.starts = torch.tensor([0] + [len(p) for p in self.parts]).cumsum(0)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def take(self, idx: torch.Tensor) -> HeadRows:
        """The rows `idx` (global, in that order)."""
        f = torch.searchsorted(self.starts, idx, right=True) - 1
        local, fields = idx - self.starts[f], HeadRows.__dataclass_fields__
        out = {k: getattr(self.parts[0], k).new_empty((len(idx), *getattr(self.parts[0], k).shape[1:])) for k in fields}
        for file in f.unique().tolist():
            at = (f == file).nonzero()[:, 0]
            for k in fields:
                out[k][at] = getattr(self.parts[file], k)[local[at]]
        return HeadRows(**out)


# ---------------------------------------------------------------------------------------------- trainers
class VariantTrainer(Trainer):
    """What the variants share: the export folder and train state named after the variant, tau_sim per eval set,
    the earlier runs of the --init-from drafter, a model card."""

    def __init__(self, args):
        super().__init__(args)
        if not args.out:
            self.out = DRAFTERS / f"smollm2-135m-{args.variant}-b{self.B}"
        self.set_evals: dict[str, float] = {}

    def evaluate(self) -> dict:
        """tau_sim per eval set and pooled over all of them (rounds-weighted, as the benchmark pools)."""
        t, per = time.time(), {}
        for name in dict.fromkeys(self.eval_set_of[:len(self.eval_seqs)]):
            idx = [i for i, n in enumerate(self.eval_set_of[:len(self.eval_seqs)]) if n == name]
            per[name] = eval_tau(self.drafter, self.feats, [self.eval_seqs[i] for i in idx], W=self.W,
                                 embed_w=self.embed_w, dtype=self.run_dtype(), autocast=self.autocast, chunk=self.chunk,
                                 keys=[-1 - i for i in idx])
        rounds = sum(r["rounds"] for r in per.values())
        r = {"tau_sim": round(sum(r["tau_sim"] * r["rounds"] for r in per.values()) / max(rounds, 1), 4),
             "rounds": rounds, "prompts": sum(r["prompts"] for r in per.values()),
             "by_set": {n: r["tau_sim"] for n, r in per.items()},
             "accept_rate_by_depth": [round(sum(r["accept_rate_by_depth"][k] * r["rounds"] for r in per.values())
                                            / max(rounds, 1), 4) for k in range(self.B - 1)],
             "step": self.step, "seconds": round(time.time() - t, 1)}
        self.evals.append(r)
        log(f"eval step {self.step}: tau_sim {r['tau_sim']} " + " ".join(f"{n} {v}" for n, v in r["by_set"].items())
            + f" ({r['rounds']} rounds, {r['seconds']}s)")
        return r

    def eval_only(self) -> None:
        self.evaluate()

    def card(self, hw: str, final: bool) -> str:
        return variant_card(self, hw, final)


class HeadTrainer(VariantTrainer):
    """--variant domino|dspark: a head on the frozen backbone, trained on cached backbone states."""

    def build_drafter(self) -> None:
        from transformers import AutoConfig

        from ..models import drafter_class

        a, folder = self.args, Path(self.args.init_from)
        cfg = AutoConfig.from_pretrained(folder)
        kind = variant_name(cfg)
        if kind == "dflash":
            cfg = variant_config(cfg, a.variant, rank=a.head_rank, gru_hidden=a.gru_hidden,
                                 pure_prefix=a.pure_prefix, shift_label=False)
        elif kind != a.variant:
            raise InputError("init_from", f"{folder} is a {kind} drafter: give a DFlash backbone or a {a.variant} drafter")
        if int(cfg.block_size) != self.B:
            raise InputError("block_size", f"{self.B} is not the backbone's block size {cfg.block_size}")
        torch.manual_seed(a.seed)
        self.drafter = drafter_class(cfg)(cfg)
        if self.drafter.shift_label:
            raise InputError("init_from", f"{folder} is a shift-label drafter: this trainer trains DFlash-aligned heads")
        self._load(folder, fresh_head=kind == "dflash")
        self.lineage = lineage_of(folder)
        if a.backbone_from:
            self._load_backbone(Path(a.backbone_from), cfg)
        self.drafter.to(self.dev).train().requires_grad_(False)
        for p in self.drafter.head_parameters():
            p.requires_grad_(True)
        self.W = self.target.get_output_embeddings().weight.detach()
        self.embed_w = self.target.get_input_embeddings().weight.detach()
        self.drafter.use_target_embeddings(self.embed_w)

    @torch.no_grad()
    def _load(self, folder: Path, fresh_head: bool, backbone_only: bool = False, field: str = "init_from") -> None:
        """The folder's weights: every backbone weight must be there, and the head's unless it is new (or only the
        backbone is taken from it). A new head's W2 starts at zero, so that step 0 drafts exactly as the backbone alone."""
        state = folder_state(folder)
        head = {id(p) for p in self.drafter.head_parameters()}
        need = [k for k, p in self.drafter.named_parameters() if not ((fresh_head or backbone_only) and id(p) in head)]
        missing = [k for k in need if k not in state]
        if missing:
            raise InputError(field, f"{folder} lacks the weight {missing[0]!r}")
        own = self.drafter.state_dict()
        keep = need if backbone_only else [k for k in state if k in own]
        self.drafter.load_state_dict({k: state[k].float() for k in keep}, strict=False)
        if fresh_head:
            self.drafter.correction_weight().zero_()

    @torch.no_grad()
    def _load_backbone(self, folder: Path, cfg) -> None:
        """--backbone-from: every backbone weight from a DFlash drafter of the same shape, the head kept. The head-rows
        cache is named by the backbone's weights, so the new backbone's states are computed afresh. The lineage stays
        the head's; train_log.json's args name the backbone."""
        from transformers import AutoConfig

        other = AutoConfig.from_pretrained(folder)
        if variant_name(other) != "dflash":
            raise InputError("backbone_from", f"{folder} is a {variant_name(other)} drafter: give a DFlash one")
        for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "block_size"):
            if getattr(other, k, None) != getattr(cfg, k, None):
                raise InputError("backbone_from", f"{folder} has {k} {getattr(other, k, None)}, the head's backbone "
                                 f"{getattr(cfg, k, None)}")
        if draft_value(other, "target_layer_ids") != draft_value(cfg, "target_layer_ids"):
            raise InputError("backbone_from", f"{folder} reads target layers {draft_value(other, 'target_layer_ids')}, "
                             f"the head's backbone {draft_value(cfg, 'target_layer_ids')}")
        self._load(folder, fresh_head=False, backbone_only=True, field="backbone_from")

    def setup(self) -> None:
        a = self.args
        a.head_topk = min(a.head_topk or DEFAULT_TOPK, self.W.shape[0])
        a.gamma = a.gamma or 4.0
        super().setup()
        self.opt = torch.optim.AdamW(self.drafter.head_parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.row_gen = torch.Generator().manual_seed(a.seed)
        self.rows = None if a.eval_only else self.head_rows()

    def generators(self) -> dict[str, torch.Generator]:
        return {"row_gen": self.row_gen}   # seeded in setup; a resumed run restores it (load_state)

    def head_rows(self) -> RowStore:
        """The cached rows of every training sequence, SEQS_PER_FILE sequences per file under --data/head-rows/,
        each file named by what it depends on (the backbone's weights, the settings, its sequences): a run on the
        same backbone (another variant, or this head trained on) reads them back, and data added to --data costs
        only the new sequences' rows."""
        a = self.args
        base = dict(backbone=backbone_digest(self.drafter), D=a.head_depth, K=a.head_topk, anchors=a.head_anchors,
                    seed=a.seed, target=model_id(a.target))   # the rows hold the target's top-K and logits
        folder = self.data / "head-rows"
        folder.mkdir(exist_ok=True)
        t0, files, made = time.time(), [], 0
        for c in range(0, len(self.seqs), SEQS_PER_FILE):
            seqs, plens = self.seqs[c:c + SEQS_PER_FILE], self.plens[c:c + SEQS_PER_FILE]
            key = hashlib.sha1(json.dumps({**base, "seqs": seqs, "plens": plens}).encode()).hexdigest()[:16]
            path = folder / f"{key}.pt"
            files.append(path)
            if path.exists():
                continue
            rng, rows = torch.Generator().manual_seed(a.seed * 1_000_003 + int(key[:8], 16)), []
            for s, P in zip(seqs, plens):
                anchors = list(range(P, len(s) - 1))
                if a.head_anchors and len(anchors) > a.head_anchors:
                    anchors = sorted(torch.randperm(len(anchors), generator=rng)[:a.head_anchors].add(P).tolist())
                rows.append(head_rows_of(self.drafter, self.feats, s, P, anchors, D=a.head_depth, W=self.W,
                                         embed_w=self.embed_w, dtype=self.run_dtype(), autocast=self.autocast))
            part = _cat(rows)
            tmp = path.with_suffix(".tmp")
            torch.save({k: getattr(part, k) for k in HeadRows.__dataclass_fields__}, tmp)
            tmp.replace(path)   # a killed run leaves no half-written file behind
            made += 1
            log(f"head rows: {c + len(seqs)}/{len(self.seqs)} sequences, {time.time() - t0:.0f}s")
        rows = RowStore(files)
        self.timings["head_rows_s"] = round(time.time() - t0, 1)
        log(f"head rows: {len(rows)} anchors, {made} of {len(files)} files computed ({len(files) - made} cached) "
            f"in {self.timings['head_rows_s']}s")
        return rows

    def train_step(self):
        a = self.args
        idx = torch.randint(len(self.rows), (a.batch * self.n_anchors,), generator=self.row_gen)
        loss, hit, k = head_loss_rows(self.drafter, self.rows.take(idx), self.W, gamma=self.gamma, n_neg=a.negatives,
                                      conf_weight=a.conf_weight if a.variant == "dspark" else 0.0, gen=self.row_gen,
                                      policy_floor=a.head_policy_floor)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.drafter.head_parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        return {"k": k}, loss, hit


@torch.no_grad()
def opd_accepted(hd: torch.Tensor, labels: torch.Tensor, block: torch.Tensor, k: torch.Tensor, W: torch.Tensor,
                 chunk: int) -> torch.Tensor:
    """Per row, how deep its block's greedy drafts are accepted: a such that the drafts at offsets 1..a equal the
    labels and the one at a+1 does not (a = the block's rows when all match). Depth by depth: only blocks still
    accepted at offset d pay for the head's argmax there (~1.6 rows a block at tau 1.5, not B-1)."""
    acc = torch.zeros(int(block.max()) + 1 if len(block) else 0, dtype=torch.long, device=hd.device)
    alive = torch.ones_like(acc, dtype=torch.bool)
    for d in range(1, int(k.max()) + 1 if len(k) else 1):
        r = ((k == d) & alive[block]).nonzero()[:, 0]
        if not len(r):
            break
        x = torch.cat([(hd[r[s:s + chunk]].to(W.dtype) @ W.T).argmax(-1) for s in range(0, len(r), chunk)])
        hit = x == labels[r]
        acc[block[r[hit]]] += 1
        alive[block[r[~hit]]] = False
    return acc[block]


class OPDTrainer(VariantTrainer):
    """--variant opd: Draft-OPD on the greedy responses (module docstring)."""

    def setup(self) -> None:
        super().setup()
        self.head = frozen_head(self.W, self.chunk)
        self.reanchor_stats = torch.zeros(2, self.args.opd_reanchor_depth, dtype=torch.long)  # rows, hits by depth j

    def evaluate(self) -> dict:
        """tau_sim; with --opd-reanchor also the replay stream's accuracy by block position j since the last eval
        (its drafts equal to the target's argmax where the block attaches)."""
        r = super().evaluate()
        if self.args.opd_reanchor > 0 and self.reanchor_stats[0].sum() > 0:
            rows, hits = self.reanchor_stats.tolist()
            r["reanchor_replay_acc_by_depth"] = [round(x / max(m, 1), 4) for m, x in zip(rows, hits)]
            log(f"reanchor replay since the last eval: {rows[0]} shifted blocks, accuracy at j = 1.."
                f"{len(rows)}: {r['reanchor_replay_acc_by_depth']}")
            self.reanchor_stats.zero_()
        return r

    def load_data(self) -> bool:
        if not super().load_data():
            return False
        keep = [i for i, g in enumerate(self.greedy) if g]  # a T=0 rollout commits the target's greedy response
        self.seqs, self.plens = [self.seqs[i] for i in keep], [self.plens[i] for i in keep]
        self.data_info["opd_sequences"] = len(keep)
        self.data_info["opd_anchors"] = self.args.opd_anchors
        return bool(keep)

    def next_batch(self):
        """random: DFlash's batch (random anchors). rollout: --batch greedy sequences and, per sequence, at most
        --anchors of the current drafter's rollout blocks."""
        if self.args.opd_anchors == "random":
            idx, seqs, batch = super().next_batch()
            return idx, seqs, {**batch, "seqs": seqs}   # the suffix's target pass runs on them
        a, idx = self.args, self.next_indices()
        seqs, blocks = [self.seqs[i] for i in idx], []
        for i, s in zip(idx, seqs):
            match = draft_matches(self.drafter, self.feats, i, s, self.plens[i], head=self.head,
                                  embed_w=self.embed_w, dtype=self.run_dtype(), autocast=self.autocast)
            rounds = rollout(match.long().cumprod(dim=1).sum(dim=1).tolist(), self.plens[i], len(s))
            blocks.append(sorted(p for p, _ in self.rng.sample(rounds, min(len(rounds), self.n_anchors))))
        batch = make_batch(seqs, blocks, block_size=self.B, mask_id=a.mask_id, gamma=1.0)
        for key in ("anchors", "block_ids", "position_ids", "drow", "trow", "labels", "k"):
            batch[key] = self._to_dev(batch[key])
        return idx, seqs, {**batch, "seqs": seqs}

    def loss(self, f, tgt, batch):
        with self.autocast():
            h = draft_forward(self.drafter, self.embed_w, f, batch, self.run_dtype())
        H, n = h.shape[-1], batch["anchors"].shape[1]

        def wrong_prefix(blocks, acc, drafts):   # block = sequence * n + slot (make_batch's drow // B)
            out = torch.zeros(drafts.shape, device=drafts.device)
            for i in blocks.div(n, rounding_mode="floor").unique().tolist():
                sel = (blocks // n == i).nonzero()[:, 0]
                starts = (batch["anchors"][i, blocks[sel] % n] + acc[sel] + 1).tolist()
                out[sel] = suffix_logp(self.target, batch["seqs"][i], starts, drafts[sel], self.W).to(out.device)
            return out

        loss, hit = opd_loss(h.reshape(-1, H)[batch["drow"]], tgt[0].reshape(-1, H)[batch["trow"]], batch["labels"],
                             batch["drow"] // self.B, batch["k"], self.W, gamma=self.args.opd_gamma,
                             reject_weight=self.args.opd_reject_weight, chunk=self.chunk, suffix=self.args.opd_suffix,
                             suffix_logp=wrong_prefix)
        if self.args.opd_reanchor > 0:
            loss = loss + self.args.opd_reanchor * self.reanchor_loss(h.detach(), f, tgt[0], batch)
        return loss, hit

    def reanchor_loss(self, h: torch.Tensor, f: torch.Tensor, ht: torch.Tensor, batch: dict) -> torch.Tensor:
        """The ReAnchor replay stream (module docstring) on REANCHOR_CHAINS random blocks per sequence of the batch:
        h, the drafter's states over the batch's blocks (their greedy drafts give the rejected suffixes); f and ht,
        the target's context features and final states of the sequences (the labels' distributions)."""
        a, B, n = self.args, self.B, batch["anchors"].shape[1]
        suffixes = []
        for i, seq in enumerate(batch["seqs"]):
            slots = [j for j in range(n) if batch["anchors"][i, j] > 0]
            slots = self.rng.sample(slots, min(REANCHOR_CHAINS, len(slots)))
            rows = torch.tensor(slots, dtype=torch.long)[:, None] * B + torch.arange(1, B)
            drafts = self.head(h[i, rows.to(h.device)]).argmax(-1).tolist() if slots else []
            suffixes.append(rejected_suffixes(seq, [int(batch["anchors"][i, j]) for j in slots], drafts,
                                              a.opd_reanchor_offsets))
        rb = replay_batch(self.target, self.head, self.drafter.target_layer_ids, f, batch["seqs"], suffixes,
                          T=batch["T"], block_size=B, mask_id=a.mask_id, depth=a.opd_reanchor_depth)
        if rb is None:
            return torch.zeros((), device=h.device)
        with self.autocast():
            hs = draft_forward(self.drafter, self.embed_w, rb["ctx"], rb, self.run_dtype())
        drow, trow, labels, k = (rb[x].to(h.device) for x in ("drow", "trow", "labels", "k"))
        w = torch.exp(-(k - 1).float() / self.gamma)
        loss, hit = head_loss(hs.reshape(-1, hs.shape[-1])[drow], ht.reshape(-1, ht.shape[-1])[trow], labels,
                              w / w.sum(), self.W, 1.0, self.chunk)
        self.reanchor_stats += torch.stack([torch.bincount(k - 1, minlength=a.opd_reanchor_depth),
                                            torch.bincount(k - 1, hit.float(), minlength=a.opd_reanchor_depth).long()
                                            ]).cpu()
        return loss


def opd_loss(hd: torch.Tensor, ht: torch.Tensor, labels: torch.Tensor, block: torch.Tensor, k: torch.Tensor,
             W: torch.Tensor, *, gamma: float, reject_weight: float, chunk: int, suffix: int = 0,
             suffix_logp=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft-OPD's loss on a batch's rows (module docstring): the response stream's KL and the rejected stream's
    k3 estimate; and per row whether the greedy round accepts its draft (k <= a: what record counts per offset,
    the on-policy acceptance). Rows: drafter states hd, target states ht, labels, their block and offset k.
    suffix > 0 also scores that many drafts after the first rejected one: suffix_logp(blocks, a, drafts) gives,
    per block, the target's log-prob of drafts[:, j] after the prefix ending in drafts[:, :j] (j >= 1; -1 = none)."""
    acc = opd_accepted(hd, labels, block, k, W, chunk)
    resp = (k <= acc + 1).nonzero()[:, 0]                       # accepted drafts + the correction
    rej = ((k > acc) & (k <= acc + 1 + suffix)).nonzero()[:, 0]  # the first rejected draft, then the suffix
    logq = torch.log_softmax((hd[rej].to(W.dtype) @ W.T).float(), -1)
    x = logq.detach().argmax(-1)                # the drafter's greedy token there (not the label, by a's rule)
    j = k[rej] - acc[rej] - 1                   # 0: the first rejected draft, whose prefix is the target's
    gw = gamma ** (k[rej] - 1).float() * reject_weight   # gamma^(o-1) at offset o: gamma^a at the first rejected
    Z = (len(resp) + gw.sum()).clamp_min(1e-9)
    # the first rejected draft's row is also the response stream's correction: p_T(x) there comes from the target
    # logits head_loss computes for it anyway (not a second pass through the head)
    first = (j == 0).nonzero()[:, 0]
    at = torch.full_like(k, -1)
    at[rej[first]] = x[first]
    loss_r, _, lp_resp = head_loss(hd[resp], ht[resp], labels[resp], torch.ones(len(resp), device=hd.device) / Z,
                                   W, 1.0, chunk, at=at[resp])
    with torch.no_grad():
        logp = torch.zeros(len(rej), device=hd.device)
        lp = torch.zeros(len(k), device=hd.device)
        lp[resp] = lp_resp
        logp[first] = lp[rej[first]]
        if suffix:
            blocks, inv = block[rej].unique(return_inverse=True)
            drafts = torch.full((len(blocks), suffix + 1), -1, dtype=torch.long, device=hd.device)
            drafts[inv, j] = x
            a_of = torch.zeros_like(blocks)
            a_of[inv] = acc[rej]
            later = (j > 0).nonzero()[:, 0]
            logp[later] = suffix_logp(blocks, a_of, drafts).to(logp.device)[inv[later], j[later]]
    log_r = (logp - logq.gather(-1, x[:, None])[:, 0]).clamp(-20, 20)
    return loss_r + ((log_r.exp() - log_r - 1).clamp(max=10) * gw).sum() / Z, k <= acc


@torch.no_grad()
def chain_states(target, seq: list[int], starts: list[int], chains: list[list[int]],
                 layer_ids: list[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """The target over token chains appended after one sequence, in one forward: chain b's token i sits at position
    starts[b] + i and sees seq[:starts[b]] and its own chain up to itself (the verification mask of a chain), as a
    round's verify pass sees a rejected path. Returns, for the chains' tokens in order, the drafter's context
    features (hidden states after `layer_ids`, concatenated) and the final normed hidden states."""
    dev = next(target.parameters()).device
    n = max(starts)                               # no chain sees the sequence past its start: cut it there
    pos = torch.tensor([q + i for q, ch in zip(starts, chains) for i in range(len(ch))], device=dev)
    blk = torch.tensor([b for b, ch in enumerate(chains) for _ in ch], device=dev)
    m = len(pos)
    start_t = torch.tensor(starts, device=dev)[blk]
    visible = torch.zeros(n + m, n + m, dtype=torch.bool, device=dev)
    visible[:n, :n] = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
    visible[n:, :n] = torch.arange(n, device=dev)[None, :] < start_t[:, None]
    visible[n:, n:] = (blk[:, None] == blk[None, :]) & (pos[None, :] <= pos[:, None])
    dt = next(target.parameters()).dtype
    mask = torch.zeros(1, 1, n + m, n + m, dtype=dt, device=dev).masked_fill_(~visible[None, None], torch.finfo(dt).min)
    ids = torch.tensor([seq[:n] + [t for ch in chains for t in ch]], device=dev)
    feats, final = target_states(target, list(layer_ids), input_ids=ids, attention_mask=mask,
                                 position_ids=torch.cat([torch.arange(n, device=dev), pos])[None])
    return feats[0, n:], final[0, n:]


@torch.no_grad()
def suffix_logp(target, seq: list[int], starts: list[int], drafts: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The target's log-prob of each block's later rejected drafts under the drafter's own prefix, for one sequence
    (one forward): block b's first rejected draft drafts[b, 0] sits at position starts[b] (its prefix seq[:starts[b]]
    is the target's), and drafts[b, j] (j >= 1, -1 = none) is scored after seq[:starts[b]] ++ drafts[b, :j].
    The drafts but the last become a chain after the sequence (chain_states). Returns drafts' shape in float,
    column 0 and missing entries 0."""
    dev = W.device
    out = torch.zeros(drafts.shape, device=dev)
    rows = [row[:next((i for i, t in enumerate(row) if t < 0), len(row))] for row in drafts.tolist()]
    chains = [row[:-1] for row in rows]           # the last draft is only scored, never input
    keep = [b for b, ch in enumerate(chains) if ch]
    if not keep:
        return out
    _, h = chain_states(target, seq, [starts[b] for b in keep], [chains[b] for b in keep])
    blk = torch.tensor([b for b in keep for _ in chains[b]], device=dev)
    col = torch.tensor([i + 1 for b in keep for i in range(len(chains[b]))], device=dev)
    logp = torch.log_softmax((h.to(W.dtype) @ W.T).float(), -1)
    out[blk, col] = logp.gather(-1, drafts.to(dev)[blk, col, None])[:, 0]
    return out


def reanchor_sites(seq: list[int], start: int, anchors: list[int], block_size: int) -> list[tuple[int, int]]:
    """Where ReAnchor would attach the shifted blocks of a rejected suffix starting at `start`, were the round's
    baseline block the target's own tokens seq[start:start+B]: (d, t) for g(d) with anchor anchors[d-1] = a_d, t
    its earliest match (the paper's rule) among those that leave a token to predict after it."""
    out = []
    for d, a_d in enumerate(anchors, 1):
        t = next((t for t in range(block_size) if start + t < len(seq) - 1 and seq[start + t] == a_d), None)
        if t is not None:
            out.append((d, t))
    return out


def rejected_suffixes(seq: list[int], anchors: list[int], drafts: list[list[int]], offsets: int
                      ) -> list[tuple[int, list[int]]]:
    """The rejected suffixes a greedy round would retain: for each block (anchor p, greedy drafts at offsets 1..B-1)
    whose drafts miss the response inside it, (start, chain): the first rejected draft sits at start = p + a + 1
    (a drafts accepted), and the chain holds it and the drafts after it, at most `offsets` (ReAnchor's g(1..offsets)
    anchor on them). A block accepted whole, or whose miss leaves no response token after it, retains nothing."""
    out = []
    for p, g in zip(anchors, drafts):
        a = next((k for k in range(len(g)) if p + k + 1 >= len(seq) or g[k] != seq[p + k + 1]), len(g))
        if a < len(g) and p + a + 1 < len(seq) - 1:
            out.append((p + a + 1, g[a:a + offsets]))
    return out


def replay_batch(target, head, layer_ids: list[int], f: torch.Tensor, seqs: list[list[int]],
                 suffixes: list[list[tuple[int, list[int]]]], *, T: int, block_size: int, mask_id: int,
                 depth: int) -> dict | None:
    """One drafter batch of the shifted blocks ReAnchor drafts from the rejected suffixes (rejected_suffixes, per
    sequence), and their rows; None when no block attaches. Per sequence, one target pass over its chains
    (chain_states) gives their context features and a_d = the target's token after chain[:d]; g(d) = [a_d, MASK..]
    at positions start+d.. sees the sequence's features before `start` (f, padded to T) and its chain's first d
    features, as the engine drafts it (docs/algorithm.md, step 1). It attaches at reanchor_sites' t, where its block
    position j predicts x[start+t+j] (j <= depth): drow indexes the drafter's output, trow the target's rows (b * T)
    whose distribution is that token's. Keys are [f, the chains' features (M per sequence), the blocks]."""
    B, per = block_size, []
    for seq, suf in zip(seqs, suffixes):
        if not suf:
            per.append(None)
            continue
        starts, chains = [q for q, _ in suf], [c for _, c in suf]
        cf, ch = chain_states(target, seq, starts, chains, layer_ids)
        a_d, blocks, at = head(ch).argmax(-1).tolist(), [], 0
        for c, (q, chain) in enumerate(suf):
            anchors = a_d[at:at + len(chain)]
            blocks += [(c, d, anchors[d - 1], t) for d, t in reanchor_sites(seq, q, anchors, B)]
            at += len(chain)
        per.append((starts, chains, cf, blocks) if blocks else None)
    live = [x for x in per if x]
    if not live:
        return None
    NS, M, b = max(len(x[3]) for x in live), max(len(x[2]) for x in live), len(per)
    ctx = torch.cat([f, f.new_zeros(b, M, f.shape[-1])], 1)
    block = torch.full((b, NS * B), mask_id, dtype=torch.long)
    pos = torch.cat([torch.arange(T).expand(b, T), torch.zeros(b, M + NS * B, dtype=torch.long)], 1)
    own = torch.arange(NS * B) // B
    mask = torch.zeros(b, NS * B, T + M + NS * B, dtype=torch.bool)
    mask[:, :, T + M:] = own[:, None] == own[None, :]            # each block sees itself (a padding one: only itself)
    drow, trow, labels, k = [], [], [], []
    for i, x in enumerate(per):
        if not x:
            continue
        starts, chains, cf, blocks = x
        cid = torch.tensor([c for c, chain in enumerate(chains) for _ in chain])
        cix = torch.tensor([j for chain in chains for j in range(len(chain))])
        ctx[i, T:T + len(cid)] = cf.to(ctx.dtype)
        pos[i, T:T + len(cid)] = torch.tensor(starts)[cid] + cix
        for slot, (c, d, tok, t) in enumerate(blocks):
            q, rows = starts[c], slice(slot * B, slot * B + B)
            block[i, slot * B] = tok
            pos[i, T + M + slot * B:T + M + slot * B + B] = q + d + torch.arange(B)
            mask[i, rows, :q] = True                                       # the target's own context, < start
            mask[i, rows, T:T + len(cid)] = (cid == c) & (cix < d)        # its chain's first d states
            for j in range(1, min(depth, len(seqs[i]) - 1 - q - t) + 1):
                drow.append(i * NS * B + slot * B + j)
                trow.append(i * T + q + t + j - 1)
                labels.append(seqs[i][q + t + j])
                k.append(j)
    return {"ctx": ctx, "block_ids": block, "position_ids": pos, "mask": mask[:, None], "T": T,
            "drow": torch.tensor(drow), "trow": torch.tensor(trow), "labels": torch.tensor(labels), "k": torch.tensor(k),
            "blocks": [x[3] if x else [] for x in per]}


def variant_card(t: VariantTrainer, hw: str, final: bool) -> str:
    """The model card (README.md) of a variant's export as it stands."""
    a, di = t.args, t.data_info
    ev = t.evals[-1] if t.evals else {}
    first = t.evals[0] if t.evals else {}
    cfg = t.drafter.config   # the head as built: a head trained on keeps its own shape, not the flags' defaults
    what = {"domino": lambda: f"Domino head (GRU state {draft_value(cfg, 'gru_hidden_dim')}, rank "
                              f"{draft_value(cfg, 'emb_dim')}, pure prefix {draft_value(cfg, 'pure_draft_prefix_len')}) "
                              "on the frozen backbone",
            "dspark": lambda: f"DSpark head (Markov rank {draft_value(cfg, 'markov_rank')}, confidence head) on the "
                              "frozen backbone",
            "opd": lambda: f"the whole DFlash drafter, post-trained on policy (Draft-OPD, {a.opd_anchors} anchors, gamma "
                           f"{a.opd_gamma}, rejected-stream weight {a.opd_reject_weight}, post-rejection suffix "
                           f"{a.opd_suffix}" + (f"; ReAnchor replay weight {a.opd_reanchor}, offsets "
                                                f"{a.opd_reanchor_offsets}, depth {a.opd_reanchor_depth}"
                                                if a.opd_reanchor else "") + ")"}[a.variant]()
    rows = {"target": "SmolLM2-135M-Instruct (embedded GGUF, dequantised)", "trained": what,
            "backbone / start": a.init_from + (f" (head; backbone: {a.backbone_from})" if a.backbone_from else ""),
            "hardware": hw, "steps": t.step,
            "train wall time": f"{t.train_s / 60:.1f} min", "total wall time": f"{(time.time() - t.t_start) / 60:.1f} min",
            "data": f"{di['sequences']} target responses ({di['greedy']} greedy, {di['sampled']} sampled T={a.temperature}), "
                    f"{di['response_tokens']} tokens, {di['prompt_set']}",
            "batch": f"{a.batch} x {t.n_anchors} anchors", "optimizer": f"AdamW lr {a.lr}, {a.warmup:.0%} warmup, cosine",
            "final": str(final)}
    rows.update({f"timing {k}": v for k, v in t.timings.items()})
    table = "\n".join(f"| {k} | {v} |" for k, v in rows.items())
    sets = ev.get("by_set", {})
    per_set = "\n".join(f"| {n} | {first.get('by_set', {}).get(n, '–')} | {v} |" for n, v in sets.items())
    return f"""# smollm2-135m-{a.variant}-b{t.B}

A {dict(domino="Domino", dspark="DSpark", opd="Draft-OPD")[a.variant]} drafter for SmolLM2-135M-Instruct (the embedded target of ReAnchor Explorer): {what}.
Trained by `python -m engine train --variant {a.variant}` (engine/train/variants.py, whose docstring states the
recipe). Load it like any drafter: `--drafter {t.out}` (the engine picks the class from config.json).

| | |
|---|---|
{table}

**tau_sim {first.get('tau_sim', '–')} -> {ev.get('tau_sim', '–')}** (start -> end; greedy, block {t.B}, {ev.get('prompts', 0)}
held-out prompts, the trainer's proxy for the engine's dflash-mode tau):

| eval set | start | end |
|---|---|---|
{per_set}

Share of anchors accepted to depth k = 1..{t.B - 1}: {ev.get('accept_rate_by_depth', [])}.
"""

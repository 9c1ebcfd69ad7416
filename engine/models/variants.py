"""The paper's drafter variants: DFlash backbones with a sequential correction head over the block.

Both keep `dflash.DFlashDraftModel` as the backbone (one forward per block, every position at once)
and correct its logits position by position, conditioned on the tokens drafted so far:

    Domino (Huang et al. 2026)   h_0 = 0, h <- GRU(E[x_i], h) over the anchor and each drafted token
                                 logits_j = base_j + W2 SiLU(W1 [z_j ; h_j])     (j >= p, the "pure prefix")
    DSpark (Cheng et al. 2026)   logits_j = base_j + W_M E_M[x_{j-1}]             (a low-rank bigram)
                                 c_j = sigmoid(w [z_j ; E_M[x_{j-1}]] + b): P(draft j accepted | drafts < j were)

where z_j is the backbone's (normed) hidden state that predicts position j, base_j = head(z_j) the
target's LM head on it, E the target's input embeddings (Domino) and E_M the head's own (DSpark).
x_0 is the anchor; x_j the token drafted at j (argmax, or a sample at temperature T of the corrected
logits). Each class reads its released checkpoint's format (config fields and weight names as in
jianuo-huang/Domino and deepseek-ai/DeepSpec); `load.drafter_class` picks the class from the config.

Alignment ("shift_label"): a DFlash backbone's block slot k predicts its own position k (slot 0, the
anchor, predicts nothing), so a block of B inputs drafts B-1 tokens; a shift-label backbone's slot k
predicts position k+1, so B inputs draft B tokens. `block_offset` says which: the engine takes the
hidden states that predict positions 1, 2, ... and hands them to `propose_blocks` either way.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from dflash import DFlashDraftModel
from torch import nn

from ..errors import InputError

DOMINO_PROJECTORS = ("domino", "causal_v5")   # causal_v5: an older internal alias (SGLang's patch)


@dataclass
class Proposal:
    """A drafter's token choice for every row of a batched call (positions 1..L-1 of each block)."""
    tokens: torch.Tensor                    # [rows, L-1]
    logits: torch.Tensor                    # [rows, L-1, V] float, after any correction
    probs: torch.Tensor | None = None       # [rows, L-1, V]: the law each token was drawn from; None: argmax
    confidence: torch.Tensor | None = None  # [rows, L-1]: P(draft j accepted | drafts < j accepted)
    backbone: torch.Tensor | None = None    # [rows, L-1]: the backbone's own argmax (sequential heads)
    argmax: bool = False                    # every token is its logits' argmax (its rank is 0)


def tempered(logits: torch.Tensor, T: float) -> torch.Tensor:
    """softmax(logits / T) for T > 0, the maximum taken out first: at a tiny T, logits / T would
    overflow to inf - inf = nan, while this tends to the argmax's point mass."""
    x = logits.float()
    return torch.softmax((x - x.amax(-1, keepdim=True)) / T, -1)


def draw(logits: torch.Tensor, T: float, gen: torch.Generator | None, argmax: bool
         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """argmax at T=0 (or when asked), else one sample of softmax(logits / T) per row: (tokens, law or None)."""
    if T > 0 and not argmax:
        probs = tempered(logits, T)
        toks = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen).view(probs.shape[:-1])
        return toks, probs
    return logits.argmax(-1), None


def draft_value(config, name: str, default=None):
    """A drafter setting: dflash_config first, then the top level (DSpark keeps its fields there)."""
    return (getattr(config, "dflash_config", None) or {}).get(name, getattr(config, name, default))


def draft_logits(drafter, hidden: torch.Tensor, head: Callable) -> torch.Tensor:
    """drafter.compute_logits(hidden, head): without its multiply by 1 and its two config look-ups where the
    drafter neither scales nor caps its logits (decided once per drafter). On a small model those cost a round
    twice what the head itself does."""
    plain = drafter.__dict__.get("_plain_logits")
    if plain is None:
        cap = draft_value(drafter.config, "final_logit_softcapping")
        plain = drafter.__dict__["_plain_logits"] = (
            type(drafter).compute_logits is DFlashDraftModel.compute_logits
            and float(draft_value(drafter.config, "output_multiplier", 1.0)) == 1.0
            and not (cap is not None and float(cap) > 0))
    return head(hidden) if plain else drafter.compute_logits(hidden, head)


def required(config, name: str, kind: str, where: str = "dflash_config"):
    value = draft_value(config, name)
    if value is None:
        raise InputError("drafter", f"config.json has no {where}.{name} (a {kind} drafter needs it)")
    return value


class SequentialDrafter(DFlashDraftModel):
    """A DFlash backbone plus a head that picks the block's tokens one position at a time."""

    shift_label = False
    head_modules: tuple[str, ...] = ()     # the head's submodules (what `--variant` training trains)
    released_architecture = ""             # config.json's "architectures" in the released checkpoints

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As transformers saves, with the released checkpoints' architecture name in config.json."""
        super().save_pretrained(save_directory, *args, **kwargs)
        path = Path(save_directory) / "config.json"
        cfg = self.released_config(json.loads(path.read_text()))
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    def released_config(self, cfg: dict) -> dict:
        """config.json (as transformers wrote it) in the released checkpoints' form: their architecture name."""
        cfg["architectures"] = [self.released_architecture]
        return cfg

    def head_parameters(self) -> list[nn.Parameter]:
        return [p for name in self.head_modules if getattr(self, name, None) is not None
                for p in getattr(self, name).parameters()]

    def teacher_forced(self, z: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: the head at every position at once, fed the true tokens prev [n, m] (x_0 .. x_{m-1}):
        (u [n, m, R], W2 [V, R]) with correction_j = W2 u_j, as propose_blocks computes it drafting those tokens."""
        raise NotImplementedError

    def correction_weight(self) -> torch.Tensor:
        """W2 [V, R], the head's output projection (zero: the head changes nothing)."""
        raise NotImplementedError

    @property
    def block_offset(self) -> int:
        """Inputs per drafted token: 1 for a DFlash backbone (slot 0 drafts nothing), 0 for shift-label."""
        return 0 if self.shift_label else 1

    def use_target_embeddings(self, weight: torch.Tensor) -> None:
        """The target's input embedding table (Domino's GRU reads it; it is not a weight of the drafter)."""
        self.__dict__["target_embed"] = weight  # not a submodule or buffer: never saved with the drafter

    def propose_blocks(self, hidden: torch.Tensor, anchors: torch.Tensor, output_head: Callable, T: float,
                       gen: torch.Generator | None, argmax: bool) -> Proposal:
        """hidden [rows, L-1, H] (the states predicting positions 1..L-1), anchors [rows] -> Proposal.
        The backbone's logits come from one head call; only the correction runs position by position."""
        base = draft_logits(self, hidden, output_head).float()
        state = self.head_start(hidden, anchors)
        toks, logits, probs, conf = [], [], [], []
        for j in range(hidden.shape[1]):
            lg, c = self.head_step(state, j)
            lg = base[:, j] + lg
            tok, p = draw(lg, T, gen, argmax)
            toks.append(tok), logits.append(lg), probs.append(p), conf.append(c)
            self.head_advance(state, j, tok)
        return Proposal(torch.stack(toks, 1), torch.stack(logits, 1),
                        None if probs[0] is None else torch.stack(probs, 1),
                        None if conf[0] is None else torch.stack(conf, 1), base.argmax(-1))

    # a head: its state before position 1, the correction at j (and a confidence or None), the update
    def head_start(self, hidden: torch.Tensor, anchors: torch.Tensor) -> dict:
        raise NotImplementedError

    def head_step(self, state: dict, j: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def head_advance(self, state: dict, j: int, tok: torch.Tensor) -> None:
        raise NotImplementedError


class DominoDraftModel(SequentialDrafter):
    """Domino: a GRU over the embeddings of the anchor and the drafted tokens, and a low-rank head
    W2 SiLU(W1 [z; h]) that adds a full-vocabulary correction to the backbone's logits.

    Checkpoint (jianuo-huang/Domino, SpecForge): the backbone's keys plus prefix_gru.weight_ih_l0
    [3G, H], prefix_gru.weight_hh_l0 [3G, G] (no biases; gate rows r|z|n), embed_proj.0.weight [R, H+G],
    embed_proj.2.weight [V, R]; dflash_config: projector_type "domino" (or "causal_v5"), gru_hidden_dim G,
    emb_dim R (SGLang reads it at the top level: either place is read), pure_draft_prefix_len p,
    shift_label (the released b16 checkpoints: p = 1, shift-label). Early checkpoints nest the head
    under `logit_head.`."""

    head_modules = ("prefix_gru", "embed_proj")
    released_architecture = "DFlashDraftModel"

    def __init__(self, config) -> None:
        super().__init__(config)
        G = int(required(config, "gru_hidden_dim", "Domino"))
        R = int(required(config, "emb_dim", "Domino"))
        for flag in ("use_bias_gate", "use_bias_norm"):   # head variants Domino's SGLang loader refuses too
            if draft_value(config, flag, False):
                raise InputError("drafter", f"config.json dflash_config.{flag} is true: that Domino head variant "
                                            "is not supported (only the plain GRU + W2 SiLU(W1 [z; h]) head is)")
        self.shift_label = bool(draft_value(config, "shift_label", False))
        self.pure_prefix = int(draft_value(config, "pure_draft_prefix_len", 0) or 0)
        H = config.hidden_size
        self.prefix_gru = nn.GRU(H, G, num_layers=1, batch_first=True, bias=False)
        self.embed_proj = nn.Sequential(nn.Linear(H + G, R, bias=False), nn.SiLU(),
                                        nn.Linear(R, config.vocab_size, bias=False))
        self.post_init()

    def released_config(self, cfg: dict) -> dict:
        """Also emb_dim at the top level, where SGLang's Domino loader reads it (dflash_config keeps it too)."""
        cfg = super().released_config(cfg)
        cfg["emb_dim"] = self.embed_proj[0].out_features
        return cfg

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        kwargs.setdefault("key_mapping", {r"^logit_head\.": "", r"^model\.": ""})
        return super().from_pretrained(*args, **kwargs)

    def _embed(self, tok: torch.Tensor) -> torch.Tensor:
        w = self.__dict__.get("target_embed")
        if w is None:
            raise RuntimeError("Domino reads the target's embeddings: call use_target_embeddings(weight) first")
        return nn.functional.embedding(tok, w).to(self.prefix_gru.weight_ih_l0.dtype)

    def gru_step(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One GRU step (PyTorch's gates, rows r|z|n, no biases):
        r = s(W_ir x + W_hr h), u = s(W_iz x + W_hz h), n = tanh(W_in x + r * W_hn h), h' = (1-u) n + u h."""
        gi = x @ self.prefix_gru.weight_ih_l0.T
        gh = h @ self.prefix_gru.weight_hh_l0.T
        ir, iz, i_n = gi.chunk(3, -1)
        hr, hz, hn = gh.chunk(3, -1)
        r, u = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        return torch.lerp(torch.tanh(i_n + r * hn), h, u)

    def correction(self, z_proj: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """W2 SiLU(W1 [z; h]) with W1 = [W_z | W_h]: `z_proj` = W_z z, computed for all positions at once."""
        W1 = self.embed_proj[0].weight
        u = nn.functional.silu(z_proj + h @ W1[:, -h.shape[-1]:].T)
        return self.embed_proj[2](u).float()

    def teacher_forced(self, z, prev):
        h, _ = self.prefix_gru(self._embed(prev))                     # h_j: the state after x_0 .. x_j
        u = nn.functional.silu(torch.cat([z.to(h.dtype), h], -1) @ self.embed_proj[0].weight.T)
        keep = (torch.arange(u.shape[1], device=u.device) >= self.pure_prefix).to(u.dtype)
        return u * keep[:, None], self.correction_weight()

    def correction_weight(self):
        return self.embed_proj[2].weight

    def head_start(self, hidden, anchors):
        W1 = self.embed_proj[0].weight
        z_proj = hidden.to(W1.dtype) @ W1[:, :hidden.shape[-1]].T    # [rows, L-1, R]
        h = self.gru_step(self._embed(anchors), z_proj.new_zeros(len(anchors), self.prefix_gru.hidden_size))
        return {"z_proj": z_proj, "h": h}

    def head_step(self, state, j):
        if j < self.pure_prefix:          # the first p drafts are the backbone's own
            return torch.zeros((), device=state["h"].device), None
        return self.correction(state["z_proj"][:, j], state["h"]), None

    def head_advance(self, state, j, tok):
        state["h"] = self.gru_step(self._embed(tok), state["h"])   # h after x_0..x_{j+1}


class DSparkDraftModel(SequentialDrafter):
    """DSpark: a low-rank Markov correction W_M E_M[previous token] and a confidence head.

    Checkpoint (deepseek-ai/DeepSpec deepspec/modeling/dspark): the backbone's keys plus
    markov_head.markov_w1.weight [V, r] (E_M), markov_head.markov_w2.weight [V, r] (W_M: r -> V),
    confidence_head.proj.{weight [1, H(+r)], bias [1]}; top-level config fields markov_rank (0: no
    Markov head, the backbone's logits as they are), markov_head_type "vanilla" (any case; the
    "gated" and "rnn" heads are refused), enable_confidence_head, confidence_head_with_markov. The
    released checkpoints also hold frozen copies of the target's embed_tokens and lm_head: ignored, the
    target's own are used. DSpark backbones are shift-label; `shift_label: false` (our extension)
    marks a head trained on a DFlash backbone."""

    _keys_to_ignore_on_load_unexpected = [r"^embed_tokens\.", r"^lm_head\."]
    head_modules = ("markov_head", "confidence_head")
    released_architecture = "Qwen3DSparkModel"

    def __init__(self, config) -> None:
        super().__init__(config)
        r = int(required(config, "markov_rank", "DSpark", where="config"))
        if r < 0:
            raise InputError("drafter", f"config.json markov_rank {r} is negative")
        kind = str(draft_value(config, "markov_head_type", "vanilla")).lower()   # DeepSpec lower-cases it
        if r > 0 and kind != "vanilla":
            raise InputError("drafter", f"config.json markov_head_type {kind!r} is not supported (only 'vanilla')")
        self.shift_label = bool(draft_value(config, "shift_label", True))
        V, H = config.vocab_size, config.hidden_size
        self.markov_rank = r
        if r > 0:
            self.markov_head = nn.Module()
            self.markov_head.markov_w1 = nn.Embedding(V, r)
            self.markov_head.markov_w2 = nn.Linear(r, V, bias=False)
        else:   # DeepSpec's markov_rank 0: no Markov head (build_markov_head returns None)
            self.markov_head = None
        self.conf_with_markov = bool(draft_value(config, "confidence_head_with_markov", r > 0))
        if draft_value(config, "enable_confidence_head", False):
            if self.conf_with_markov and r == 0:
                raise InputError("drafter", "config.json confidence_head_with_markov is true but markov_rank is 0 "
                                            "(the confidence head reads the Markov head's embedding)")
            self.confidence_head = nn.Module()
            self.confidence_head.proj = nn.Linear(H + (r if self.conf_with_markov else 0), 1, bias=True)
        else:
            self.confidence_head = None
        self.post_init()

    def markov(self, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(E_M[prev], the correction W_M E_M[prev]) for previous tokens `prev` (rank 0: empty, zero)."""
        if self.markov_head is None:
            return self.fc.weight.new_zeros(*prev.shape, 0), torch.zeros((), device=prev.device)
        e = self.markov_head.markov_w1(prev)
        return e, self.markov_head.markov_w2(e).float()

    def confidence_logit(self, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """s_j = w [z_j ; E_M[x_{j-1}]] + b (sigmoid(s_j): the conditional acceptance estimate)."""
        f = torch.cat([z, e.to(z.dtype)], -1) if self.conf_with_markov else z
        return self.confidence_head.proj(f.to(self.confidence_head.proj.weight.dtype))[..., 0].float()

    def teacher_forced(self, z, prev):
        return self.markov(prev)[0], self.correction_weight()

    def correction_weight(self):
        if self.markov_head is None:
            return self.fc.weight.new_zeros(self.config.vocab_size, 0)
        return self.markov_head.markov_w2.weight

    def head_start(self, hidden, anchors):
        return {"hidden": hidden, "prev": anchors}

    def head_step(self, state, j):
        e, corr = self.markov(state["prev"])
        conf = None
        if self.confidence_head is not None:
            conf = torch.sigmoid(self.confidence_logit(state["hidden"][:, j], e))
        return corr, conf

    def head_advance(self, state, j, tok):
        state["prev"] = tok


def variant_config(config, variant: str, *, rank: int = 64, gru_hidden: int = 128, pure_prefix: int = 1,
                   shift_label: bool = False, confidence: bool = True):
    """A Domino or DSpark config in its released format around a DFlash drafter's `config` (a copy):
    Domino's fields go into dflash_config; DSpark's sit at the top level (no dflash_config)."""
    cfg = copy.deepcopy(config)
    dc = dict(getattr(cfg, "dflash_config", None) or {})
    if variant == "domino":
        cfg.architectures = ["DFlashDraftModel"]
        cfg.dflash_config = dc | {"projector_type": "domino", "gru_hidden_dim": gru_hidden, "emb_dim": rank,
                                  "pure_draft_prefix_len": pure_prefix, "shift_label": shift_label}
    elif variant == "dspark":
        cfg.architectures = ["Qwen3DSparkModel"]
        for k in ("mask_token_id", "target_layer_ids"):
            setattr(cfg, k, dc.get(k, getattr(cfg, k, None)))
        if hasattr(cfg, "dflash_config"):
            del cfg.dflash_config
        cfg.markov_rank, cfg.markov_head_type, cfg.shift_label = rank, "vanilla", shift_label
        cfg.enable_confidence_head, cfg.confidence_head_with_markov = confidence, True
    else:
        raise ValueError(f"variant: {variant!r} is not domino or dspark")
    return cfg


def variant_name(config) -> str:
    """Which drafter a config describes: dflash, dflash2, domino or dspark. A config naming a head or
    backbone this engine does not implement is refused (InputError), rather than loaded as a plain DFlash
    drafter without its head or as a Qwen3 backbone it is not: the released loaders refuse these too."""
    archs = getattr(config, "architectures", None) or []
    projector = draft_value(config, "projector_type")
    if projector is not None and projector not in DOMINO_PROJECTORS:
        raise InputError("drafter", f"config.json dflash_config.projector_type {projector!r} is not supported "
                                    f"(Domino's are {' or '.join(map(repr, DOMINO_PROJECTORS))})")
    other = [a for a in archs if str(a).endswith("DSparkModel") and a != "Qwen3DSparkModel"]
    if other:
        raise InputError("drafter", f"config.json architectures {other[0]!r} is not supported (DSpark on a "
                                    "Qwen3 backbone, Qwen3DSparkModel, is)")
    if projector in DOMINO_PROJECTORS or "DominoDraftModel" in archs:
        return "domino"
    if "Qwen3DSparkModel" in archs or draft_value(config, "markov_rank") is not None:
        return "dspark"
    if draft_value(config, "conv_kernel_size") is not None:
        return "dflash2"
    return "dflash"

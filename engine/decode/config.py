"""What a run is asked to do (DecodeConfig) and its check; the words come from engine.options."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import InputError
from ..options import (ACCEPTANCE, CALIBRATIONS, DEFAULT_ACCEPTANCE, DEFAULT_CALIBRATION, DEFAULT_MAX_NEW_TOKENS,
                       DEFAULT_MODE, DEFAULT_RULE, DEFAULT_TREE_RANK, MAX_BLOCK_SIZE, MAX_NEW_TOKENS, MODES, RULES,
                       TREE_RANKS, UNSHIFTED_MODES, parse_max_shifted, parse_max_trie_nodes, parse_seed, to_int)

GREEDY_BELOW = 1e-5   # a temperature under this decodes greedily (as vLLM does): logits / T would overflow


@dataclass
class DecodeConfig:
    mode: str = DEFAULT_MODE
    rule: str = DEFAULT_RULE
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_shifted: int | str | None = None   # cap on shifted blocks per round; "auto": the cost budget
    max_trie_nodes: int | str | None = None  # verified nodes per round (anchor included); "auto": the budget
    argmax_drafts: bool = False            # at T>0 draft by argmax instead of sampling
    acceptance: str = DEFAULT_ACCEPTANCE   # at T>0: engine.options.ACCEPTANCE
    ignore_eos: bool = False               # run to max_new_tokens (fixed-length benchmarks)
    block_size: int | None = None          # default: the drafter's trained block size
    calibration: str = DEFAULT_CALIBRATION  # the auto budget's costs: engine.options.CALIBRATIONS
    tree_rank: str = DEFAULT_TREE_RANK     # tree modes: engine.options.TREE_RANKS


def validate(cfg: DecodeConfig, drafter_block_size: int | None) -> DecodeConfig:
    """Check every field; return a normalised copy or raise InputError naming the first bad one.
    `drafter_block_size`: the loaded drafter's (None: no drafter)."""
    if cfg.mode not in MODES:
        raise InputError("mode", f"unknown mode {cfg.mode!r} (one of {', '.join(MODES)})")
    if cfg.rule not in RULES:
        raise InputError("rule", f"unknown rule {cfg.rule!r} (one of {', '.join(RULES)})")
    if cfg.calibration not in CALIBRATIONS:
        raise InputError("calibration", f"unknown calibration {cfg.calibration!r} (one of {', '.join(CALIBRATIONS)})")
    if cfg.acceptance not in ACCEPTANCE:
        raise InputError("acceptance", f"unknown acceptance {cfg.acceptance!r} (one of {', '.join(ACCEPTANCE)})")
    if cfg.tree_rank not in TREE_RANKS:
        raise InputError("tree_rank", f"unknown tree ranking {cfg.tree_rank!r} (one of {', '.join(TREE_RANKS)})")
    try:
        t = float(cfg.temperature)
    except (TypeError, ValueError):
        raise InputError("temperature", f"{cfg.temperature!r} is not a number") from None
    if not t >= 0 or t == float("inf"):
        raise InputError("temperature", f"must be a finite number >= 0, got {cfg.temperature!r}")
    t = 0.0 if t < GREEDY_BELOW else t
    seed = parse_seed(cfg.seed)
    n = to_int(cfg.max_new_tokens, "max_new_tokens", lo=1)
    if n > MAX_NEW_TOKENS:
        raise InputError("max_new_tokens", f"{n} is absurd (at most {MAX_NEW_TOKENS})")
    k = parse_max_shifted(cfg.max_shifted)
    nodes = parse_max_trie_nodes(cfg.max_trie_nodes)
    B = cfg.block_size
    if cfg.mode != "ar":
        if drafter_block_size is None:
            raise InputError("drafter", f"mode {cfg.mode!r} needs a drafter")
        if B is None and drafter_block_size > MAX_BLOCK_SIZE:
            raise InputError("drafter", f"its block size {drafter_block_size} is over the bound of {MAX_BLOCK_SIZE} "
                             "(engine.options.MAX_BLOCK_SIZE); pass a smaller block_size")
        B = to_int(B if B is not None else drafter_block_size, "block_size", lo=2, hi=MAX_BLOCK_SIZE)
    return DecodeConfig(**{**asdict(cfg), "temperature": t, "seed": seed, "max_new_tokens": n,
                           "max_shifted": k, "max_trie_nodes": nodes, "block_size": B})


def auto_fields(cfg: DecodeConfig) -> tuple[bool, bool]:
    """(shifted blocks chosen by the cost budget, trie nodes chosen by it): "auto" where it means
    something (shifted blocks only in modes that draft them; nodes in every speculative mode)."""
    return (cfg.max_shifted == "auto" and cfg.mode not in UNSHIFTED_MODES,
            cfg.max_trie_nodes == "auto" and cfg.mode != "ar")

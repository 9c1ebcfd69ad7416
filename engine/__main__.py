"""python -m engine {generate,bench,train,check-trace,explain}: bad input exits 2 with one line naming the field."""
from __future__ import annotations

import json
import sys

from .errors import InputError, Parser, run_command
from .models.args import add_model_args, models_from_args
from .options import (ACCEPTANCE, DEFAULT_ACCEPTANCE, DEFAULT_MAX_NEW_TOKENS, DEFAULT_MODE, DEFAULT_RULE,
                      DEFAULT_TREE_NODES, parse_max_shifted, parse_max_trie_nodes)

# What --help says of the subcommands whose modules load torch (or the trainer's recipe): their flags are added
# only when the command line names them, so --help, check-trace and explain import neither (tests/test_layout.py).
BENCH_HELP = "tau and speed of every mode on prompt sets, with the paper's analyses"
TRAIN_HELP = "generate data with the target and train a DFlash drafter or a variant"
MODEL_COMMANDS = ("generate", "bench", "train")   # the ones that load models: Ctrl-C is caught at every layer


def add_bench_command(sub) -> None:
    from .bench.main import add_bench_args
    from .bench.sweep import add_sweep_args

    add_sweep_args(add_bench_args(sub, BENCH_HELP))


def add_train_command(sub) -> None:
    from .train.cli import add_train_args

    add_train_args(sub, TRAIN_HELP)


def add_generate_args(sub) -> None:
    p = sub.add_parser("generate", help="decode one prompt and print the text (or JSON)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--mode", default=DEFAULT_MODE)
    p.add_argument("--rule", default=DEFAULT_RULE)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--acceptance", default=DEFAULT_ACCEPTANCE,
                   help="at T>0: " + " or ".join(ACCEPTANCE) + " (engine/options.py)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    p.add_argument("--max-shifted", default=None, help="shifted blocks per round: all (default), auto or K")
    p.add_argument("--max-trie-nodes", default=None,
                   help=f"verified nodes per round, anchor included: all (default; tree modes: {DEFAULT_TREE_NODES}), "
                        "auto or N")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--ignore-eos", action="store_true")
    add_model_args(p)
    p.add_argument("--trace", default=None, help="write the run's trace (JSON) here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=generate_main)


def generate_main(a) -> int:
    from .decode import DecodeConfig, Engine
    from .decode.config import validate
    from .decode.cost import budget_for
    from .trace import save_trace, unicode_problem

    if not a.prompt.strip():  # fail before loading models
        raise InputError("prompt", "is empty")
    problem = unicode_problem(a.prompt)  # a byte that is not UTF-8 reaches argv as a lone surrogate
    if problem:
        raise InputError("prompt", problem.replace("lone surrogate", "byte that is not UTF-8, as the surrogate"))
    if a.trace:  # before the run: a trace that cannot be written would lose it
        trace_out(a.trace)
    cfg = DecodeConfig(mode=a.mode, rule=a.rule, temperature=a.temperature, seed=a.seed, acceptance=a.acceptance,
                       max_new_tokens=a.max_new_tokens, max_shifted=parse_max_shifted(a.max_shifted),
                       max_trie_nodes=parse_max_trie_nodes(a.max_trie_nodes), block_size=a.block_size,
                       ignore_eos=a.ignore_eos)
    validate(cfg, 2)  # every field that needs no model, before loading them (the block size: the drafter's, later)
    eng = Engine(models_from_args(a, "none" if a.mode == "ar" and a.drafter is None else None))
    trace = eng.generate(a.prompt, cfg, budget_for(eng, cfg))
    if a.trace:
        save_trace(a.trace, trace)
    if a.json:
        s = trace["stats"]
        print(json.dumps({"output_ids": trace["output_ids"], "text": trace["text"], "tau": s["tau"],
                          "rounds": s["rounds"], "tokens_per_s": s["tokens_per_s"], "stats": s,
                          "config": trace["config"]}, ensure_ascii=False))
    else:
        print(trace["text"])
    return 0


def trace_out(path: str) -> None:
    """--trace PATH will be written (engine.paths.check_output_file) and replaces no file but a trace."""
    from .paths import check_output_file
    from .trace import WRITE, load_trace

    p = check_output_file(path, "trace")
    if p.exists():
        try:
            load_trace(p, limits=WRITE)
        except (ValueError, OSError):
            raise InputError("trace", f"{p} exists and is not a reanchor trace: not replaced (remove it or give "
                                      "another name)") from None


def add_check_args(sub) -> None:
    p = sub.add_parser("check-trace", help="validate trace files as the app loads them (exit 2 naming the first "
                                           "bad field)")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=check_main)


def check_main(a) -> int:
    from .trace import TraceError, load_trace

    for f in a.files:
        try:
            t = load_trace(f)
        except TraceError as e:
            raise TraceError(f"{f}: {e.field}", e.message) from None
        print(f"{f}: valid, {len(t['rounds'])} rounds, {len(t['output_ids'])} tokens")
    return 0


def add_explain_args(sub) -> None:
    p = sub.add_parser("explain", help="why each shifted block of one round attached where it did and what each "
                                       "rule would have accepted, or the rounds where the rules differ (from the "
                                       "trace alone, no model; T>0 traces too)")
    p.add_argument("trace")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--round", type=int, help="one round: its attachment table (tree modes: what the shifted "
                                                 "blocks added over g(0)'s tree alone)")
    which.add_argument("--rounds", choices=["all"], help="all: the rounds where the rules would accept different "
                                                         "numbers of drafts (tree modes: where the shifted blocks "
                                                         "changed the accepted length)")
    p.add_argument("--json", action="store_true", help="print the analysis (engine.analyses) as JSON")
    p.set_defaults(func=explain_main)


def explain_main(a) -> int:
    """Reads the trace and engine.analyses only: no model, no torch (the command runs where no GPU stack is)."""
    from .analyses import (attachment_table, attachment_text, disagreements, disagreements_text, tree_round,
                           tree_rounds, tree_rounds_text, tree_text)
    from .options import TREE_MODES
    from .trace import load_trace

    t = load_trace(a.trace)
    texts = t.get("token_texts") or {}
    show = lambda i: repr(texts.get(str(i), i))  # noqa: E731
    tree = (t.get("config") or {}).get("mode") in TREE_MODES
    if a.rounds == "all":
        found = tree_rounds(t) if tree else disagreements(t)
        text = tree_rounds_text(found) if tree else disagreements_text(found, show)
    else:
        found = tree_round(t, a.round) if tree else attachment_table(t, a.round)
        text = tree_text(found) if tree else attachment_text(found, show)
    print(json.dumps(found, ensure_ascii=False) if a.json else text)
    return 0


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    named = next((w for w in words if not w.startswith("-")), None)   # the subcommand (the parser has no options)
    parser = Parser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_generate_args(sub)
    for name, add, help_ in (("bench", add_bench_command, BENCH_HELP), ("train", add_train_command, TRAIN_HELP)):
        if name == named:
            add(sub)
        else:
            sub.add_parser(name, help=help_)
    add_check_args(sub)
    add_explain_args(sub)
    a = parser.parse_args(argv)
    if argv is None and a.command in MODEL_COMMANDS:  # the command line's own process (not a caller's main([...]))
        from .decode.interrupt import catch_ctrl_c
        catch_ctrl_c()
    return run_command(a)


if __name__ == "__main__":
    sys.exit(main())

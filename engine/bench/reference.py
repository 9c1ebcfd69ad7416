"""The authors' own loops beside the engine, on the same models and prompts: speed and, for trees, fidelity.

    python -m engine.bench.reference --target DIR --drafter DIR --modes dflash,ddtree --ddtree PATH/TO/ddtree

`dflash` mode runs beside `dflash_generate` of the `dflash` package (a dependency); `ddtree` mode beside
DDTree's `ddtree_generate` (github.com/liranringel/ddtree, `ddtree.py`), which this project does not ship:
pass the folder of a checkout with --ddtree (or have `ddtree` importable). Both loops draft in the target's
dtype with its own LM head, so the engine runs with fp32 drafts here (Engine(draft_head_dtype=None)).

Per prompt and repeat, the engine and the reference run one after the other (interleaved, so drifts of a
loaded machine hit both; which goes first alternates by repeat), greedy, to max_new_tokens without stopping at EOS; each call is timed whole
(prefill included, the same target call for both) and divided by its rounds. The report gives the median
per-round time of each and their ratio, and checks, round by round at the same anchor position, that the
tokens agree and (ddtree) that both verified the same tree: the same set of root-to-node token paths. Only
rounds that draft a full block count for trees: the engine's last rounds shrink the block to what
max_new_tokens leaves, the reference drafts a full block and cuts the output afterwards (docs/performance.md).

A shared machine's clock can move more than the difference it is asked about. `--one engine` (or `reference`)
runs one side alone, a warm-up pass and then one counted pass, for an instruction counter that does not move:

    valgrind --tool=callgrind --instr-atstart=no python -m engine.bench.reference --one engine --modes ddtree ...

counts only the second pass (the module switches callgrind on and off around it); it prints the pass's rounds,
by which to divide callgrind's "Collected" total.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..options import DEFAULT_TREE_NODES

MODES = ("dflash", "ddtree")


def load_ddtree(path: str | None = None):
    """DDTree's `ddtree` module from the checkout at `path`, or the importable one; None if there is none.

    Its folder holds a `dflash.py` and a `model/` package of its own, whose names clash with the `dflash`
    package the engine imports: they are imported with the folder first on sys.path and then taken off
    sys.modules again, so each side keeps its own (the loaded module holds its references)."""
    if path is None:
        spec = importlib.util.find_spec("ddtree")
        if spec is None or spec.origin is None:
            return None
        path = str(Path(spec.origin).parent)
    folder = Path(path).expanduser()
    if not (folder / "ddtree.py").is_file():
        raise FileNotFoundError(f"--ddtree: no ddtree.py in {folder}")
    clash = ("dflash", "model", "ddtree")
    owned = lambda k: k.split(".")[0] in clash  # noqa: E731
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if owned(k)}
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("ddtree")
    finally:
        sys.path.remove(str(folder))
        for k in [k for k in sys.modules if owned(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    return module


@contextlib.contextmanager
def _cpu_clocks(device, ddtree):
    """The reference loops' stage clocks call torch.cuda.synchronize; off CUDA a plain clock does their job."""
    if device.type == "cuda":
        yield
        return
    import dflash.model as pkg
    patched = [(pkg, "_cuda_time")] + ([(ddtree, "cuda_time")] if ddtree is not None else [])
    old = [getattr(m, n) for m, n in patched]
    for m, n in patched:
        setattr(m, n, time.perf_counter)
    try:
        yield
    finally:
        for (m, n), f in zip(patched, old):
            setattr(m, n, f)


def _clock(device) -> float:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def reference_run(mode: str, models, ids: list[int], max_new_tokens: int, ddtree=None,
                  nodes: int = DEFAULT_TREE_NODES) -> dict:
    """One call of the authors' loop: output ids (prompt excluded), each round's anchor position, accepted
    drafts and (ddtree) tree, and the call's wall time."""
    import torch
    dev = models.device
    x = torch.tensor([ids], device=dev)
    from ..decode.interrupt import unchecked
    from ..models.features import untapped
    from ..models.onednn import linears
    from ..models.rotary import untabled
    # the models as the authors' code finds them: without the engine's stop checks, feature hooks and rotary tables;
    # with the engine's matmul kernels (onednn.py), so that both sides round alike and their trees can be compared
    with _cpu_clocks(dev, ddtree), torch.inference_mode(), unchecked(models.target, models.drafter), \
            untapped(models.target), untabled(models.target, models.drafter), linears():
        t0 = _clock(dev)
        if mode == "dflash":
            from dflash.model import dflash_generate
            out = dflash_generate(models.drafter, models.target, x, max_new_tokens, None, return_stats=True)
            lengths, trees = list(out.acceptance_lengths), None
        else:
            out = ddtree.ddtree_generate(models.drafter, models.target, x, int(models.drafter.mask_token_id),
                                         max_new_tokens, int(models.drafter.block_size), None,
                                         tree_budget=nodes - 1, save_tree_traces=True)  # theirs: no anchor
            lengths = list(out.acceptance_lengths)
            trees = [_paths(r["tree"]["node_token_ids"], [p - 1 for p in r["tree"]["parents"][1:]])
                     for r in out.round_trees]
        wall = _clock(dev) - t0
    # an acceptance length counts the bonus (dflash_generate) or the anchor (ddtree_generate): drafts + 1
    accepted = [n - 1 for n in lengths]
    starts = [len(ids) + sum(a + 1 for a in accepted[:i]) for i in range(len(accepted))]
    return {"output_ids": out.output_ids[0, len(ids):].tolist()[:max_new_tokens], "anchor_pos": starts,
            "accepted": accepted, "trees": trees, "wall_s": wall, "rounds": len(accepted)}


def engine_run(eng, ids: list[int], mode: str, max_new_tokens: int, nodes: int = DEFAULT_TREE_NODES) -> dict:
    """The engine's run of `mode`, as reference_run reports it, plus the rounds' own stage times."""
    from ..decode import DecodeConfig
    cfg = DecodeConfig(mode=mode, max_new_tokens=max_new_tokens, ignore_eos=True,
                       max_trie_nodes=nodes if mode == "ddtree" else None)
    dev = eng.models.device
    t0 = _clock(dev)
    run = eng.run(ids, cfg)
    run.finish()
    wall = _clock(dev) - t0
    rounds = run.rounds
    return {"output_ids": run.result["output_ids"], "anchor_pos": [r["anchor_pos"] for r in rounds],
            "accepted": [r["accepted"] for r in rounds], "block_size": [r["block_size"] for r in rounds],
            "trees": [_paths(r["trie"]["tokens"][1:], [p - 1 for p in r["trie"]["parents"][1:]]) for r in rounds]
            if mode == "ddtree" else None, "wall_s": wall, "rounds": len(rounds),
            "stages": _stage_sums(rounds)}


def _paths(tokens: list[int], parents: list[int]) -> frozenset:
    """A tree as the set of its root-to-node token paths (the anchor left out); parents index `tokens`, -1
    for a child of the anchor, and precede their children."""
    from ..analyses import token_paths
    return frozenset(token_paths([int(t) for t in tokens], parents))


def stage_means(traces: list[dict]) -> dict[str, float]:
    """Milliseconds per round of each stage (trace.STAGES) over these traces' rounds ({} for traces
    without stage times)."""
    rounds = [r for t in traces for r in t["rounds"] if "stages_ms" in r]
    return {k: round(v / len(rounds), 3) for k, v in _stage_sums(rounds).items()} if rounds else {}


def stages_markdown(runs: list[dict]) -> list[str]:
    """The bench report's stage table: per set and label, ms per round in each stage and its share."""
    rows = [r for r in runs if r.get("stages_ms")]
    if not rows:
        return []
    names = list(dict.fromkeys(k for r in rows for k in r["stages_ms"]))
    out = ["\n## Where a round's time goes\n", "Milliseconds per round in each stage (the traces' `stages_ms`: "
           "draft; build = attach and merge, or grow the tree; verify; accept = accept, commit and retain; record "
           "= the round's trace record), and the stages' share of their sum.\n",
           "| set | label | " + " | ".join(names) + " | own work share |", "|---|---|" + "---|" * (len(names) + 1)]
    for r in rows:
        st = r["stages_ms"]
        total = sum(st.values()) or 1.0
        own = (total - st.get("draft", 0.0) - st.get("verify", 0.0)) / total
        out.append(f"| {r['set']} | {r['label']} | " + " | ".join(f"{st.get(k, 0.0):.2f}" for k in names)
                   + f" | {own:.1%} |")
    return out


def bench_section(first, sets: dict[str, list[dict]], args) -> dict:
    """`python -m engine bench --reference dflash,ddtree [--ddtree PATH]`: this section on the bench's own
    prompts and models, with fp32 drafts (what the reference loops draft)."""
    from ..decode import Engine
    from ..options import parse_csv
    modes = parse_csv(args.reference, MODES, "reference")
    eng = Engine(first.models, draft_head_dtype=None)
    prompts = [(f"{s}/{p['id']}", eng.encode_prompt(p["prompt"])) for s, ps in sets.items() for p in ps]
    ddtree = load_ddtree(args.ddtree) if "ddtree" in modes else None
    return reference_section(eng, prompts, modes, args.max_new_tokens, args.reference_repeats, ddtree,
                             log=lambda s: print(s, file=sys.stderr))


def report_lines(results: dict) -> list[str]:
    """What report.md adds from this module: the stage table, and the reference section when it ran."""
    lines = stages_markdown(results.get("runs", []))
    if results.get("reference"):
        lines += ["", section_markdown(results["reference"])]
    return lines


def _stage_sums(rounds: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rounds:
        for k, v in (r.get("stages_ms") or {}).items():
            out[k] = out.get(k, 0.0) + v
    return out


def compare(mine: dict, ref: dict, block_size: int, mask_id: int | None = None) -> dict:
    """Round by round at the same anchor position: tokens, accepted drafts and (trees) the tree itself.
    `mask_id`: ddtree_generate drops every occurrence of the drafter's mask token from its output (it
    marks unwritten slots with it), so the tokens are compared without it."""
    drop = (lambda ids: [t for t in ids if t != mask_id]) if mask_id is not None else list  # noqa: E731
    by_pos = dict(zip(ref["anchor_pos"], range(ref["rounds"])))
    out = {"same_tokens": drop(mine["output_ids"]) == drop(ref["output_ids"]), "rounds": mine["rounds"],
           "ref_rounds": ref["rounds"], "aligned": 0, "same_accepted": 0, "full_rounds": 0, "same_tree": 0,
           "shrunk_rounds": 0, "shrunk_same_tree": 0, "differ": []}
    for i, s in enumerate(mine["anchor_pos"]):
        j = by_pos.get(s)
        if j is None:
            continue
        out["aligned"] += 1
        out["same_accepted"] += mine["accepted"][i] == ref["accepted"][j]
        if mine["trees"] is None:
            continue
        same = mine["trees"][i] == ref["trees"][j]
        if mine["block_size"][i] == block_size:
            out["full_rounds"] += 1
            out["same_tree"] += same
            if not same:
                out["differ"].append(i)
        else:
            out["shrunk_rounds"] += 1
            out["shrunk_same_tree"] += same
    return out


def reference_section(eng, prompts: list[tuple[str, list[int]]], modes: list[str], max_new_tokens: int,
                      repeats: int = 3, ddtree=None, log=print) -> dict:
    """Engine and reference per mode, prompt and repeat, interleaved; per mode the median seconds per round
    of each and their ratio, and the fidelity of each prompt's (first) pair of runs."""
    out: dict[str, dict] = {}
    todo = [m for m in modes if m == "dflash" or ddtree is not None]
    for m in modes:
        if m not in todo:
            out[m] = {"skipped": "DDTree's ddtree.py is not importable (pass --ddtree PATH)"}
    mine_t: dict[str, list[float]] = {m: [] for m in todo}
    ref_t: dict[str, list[float]] = {m: [] for m in todo}
    stages: dict[str, dict[str, float]] = {m: {} for m in todo}
    fidelity: dict[str, list[dict]] = {m: [] for m in todo}
    rounds: dict[str, int] = {m: 0 for m in todo}
    for m in todo:  # warm-up: first calls pay for lazy initialisation
        engine_run(eng, prompts[0][1], m, 8)
        reference_run(m, eng.models, prompts[0][1], 8, ddtree)
    for rep in range(repeats):
        for pid, ids in prompts:
            for m in todo:  # who goes first alternates: the second call of a pair finds the caches warm
                if rep % 2 == 0:
                    a = engine_run(eng, ids, m, max_new_tokens)
                    b = reference_run(m, eng.models, ids, max_new_tokens, ddtree)
                else:
                    b = reference_run(m, eng.models, ids, max_new_tokens, ddtree)
                    a = engine_run(eng, ids, m, max_new_tokens)
                mine_t[m].append(a["wall_s"] / max(a["rounds"], 1))
                ref_t[m].append(b["wall_s"] / max(b["rounds"], 1))
                rounds[m] += a["rounds"]
                for k, v in a["stages"].items():
                    stages[m][k] = stages[m].get(k, 0.0) + v
                if rep == 0:
                    mask = int(eng.models.drafter.mask_token_id) if m == "ddtree" else None
                    fidelity[m].append({"prompt": pid, **compare(a, b, eng.block_size, mask)})
                log(f"reference {m} {pid} rep {rep}: engine {mine_t[m][-1] * 1e3:.2f} ms/round, "
                    f"reference {ref_t[m][-1] * 1e3:.2f} ms/round")
    for m in todo:
        e, r = statistics.median(mine_t[m]), statistics.median(ref_t[m])
        total = sum(stages[m].values()) or 1.0
        # each pair ran back to back: its ratio cancels the drift of a shared machine's clock between pairs
        pairs = list(zip(mine_t[m], ref_t[m]))
        out[m] = {"engine_ms_per_round": round(e * 1e3, 3), "reference_ms_per_round": round(r * 1e3, 3),
                  "ratio": round(e / r, 3), "pair_ratio": round(statistics.median(a / b for a, b in pairs), 3),
                  "pairs_ms": [[round(a * 1e3, 4), round(b * 1e3, 4)] for a, b in pairs],
                  "runs": len(mine_t[m]),
                  "stage_share": {k: round(v / total, 4) for k, v in stages[m].items()},
                  "stage_ms_per_round": {k: round(v / max(rounds[m], 1), 3) for k, v in stages[m].items()},
                  "fidelity": fidelity[m]}
    return out


def one_pass(side: str, eng, prompts: list[tuple[str, list[int]]], mode: str, max_new_tokens: int,
             ddtree=None) -> int:
    """`--one`: a warm-up pass of one side over the prompts, then one pass with callgrind's counting switched on
    (a no-op outside callgrind); the counted pass's rounds."""
    def go() -> int:
        run = (lambda ids: engine_run(eng, ids, mode, max_new_tokens)) if side == "engine" else \
            (lambda ids: reference_run(mode, eng.models, ids, max_new_tokens, ddtree))
        return sum(run(ids)["rounds"] for _, ids in prompts)

    def counting(state: str) -> None:
        if shutil.which("callgrind_control"):
            subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True)

    go()
    counting("on")
    rounds = go()
    counting("off")
    return rounds


def section_markdown(sec: dict) -> str:
    """The report's section: per mode the engine's time per round against the authors' loop, and fidelity."""
    lines = ["## The engine beside the reference loops", "",
             "Same models and prompts, greedy, interleaved; time per round = a whole call (prefill included) "
             "over its rounds, median over prompts and repeats; ratio = the medians' ratio, pair ratio = the median "
             "of each back-to-back pair's ratio (the steadier on a machine whose clock drifts). Reference: "
             "`dflash_generate` (dflash package) for dflash, DDTree's `ddtree_generate` for ddtree.", "",
             "| mode | engine ms/round | reference ms/round | ratio | pair ratio | tokens equal | same accepted | "
             "same tree (full-block rounds) | same tree (shrunk last rounds) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, r in sec.items():
        if "skipped" in r:
            lines.append(f"| {m} | - | - | - | - | {r['skipped']} | | | |")
            continue
        f = r["fidelity"]
        eq = sum(x["same_tokens"] for x in f)
        acc = sum(x["same_accepted"] for x in f), sum(x["aligned"] for x in f)
        tree = (f"{sum(x['same_tree'] for x in f)}/{sum(x['full_rounds'] for x in f)}" if m == "ddtree" else "-")
        shr = (f"{sum(x['shrunk_same_tree'] for x in f)}/{sum(x['shrunk_rounds'] for x in f)}"
               if m == "ddtree" else "-")
        lines.append(f"| {m} | {r['engine_ms_per_round']:.2f} | {r['reference_ms_per_round']:.2f} | "
                     f"{r['ratio']:.3f} | {r['pair_ratio']:.3f} | {eq}/{len(f)} prompts | {acc[0]}/{acc[1]} rounds | {tree} | {shr} |")
    stage_rows = [(m, r["stage_ms_per_round"]) for m, r in sec.items() if r.get("stage_ms_per_round")]
    if stage_rows:
        names = list(dict.fromkeys(k for _, s in stage_rows for k in s))
        lines += ["", "Engine stage times, ms per round (trace `stages_ms`):", "",
                  "| mode | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines += [f"| {m} | " + " | ".join(f"{s.get(k, 0.0):.3f}" for k in names) + " |" for m, s in stage_rows]
    return "\n".join(lines) + "\n"


# -- acceptance at T=1: dflash mode against dflash_generate (tests/test_sampling_t1.py, engine/gpu/gpu_check.py) --

def per_run_acceptance(runs: list[list[int]]) -> tuple[float, float]:
    """Mean and standard error over runs of each run's mean tokens per round."""
    xs = [statistics.mean(r) for r in runs]
    return statistics.mean(xs), statistics.stdev(xs) / len(xs) ** 0.5


def z(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How many standard errors mean a lies above mean b ((mean, standard error) pairs)."""
    return (a[0] - b[0]) / (a[1] ** 2 + b[1] ** 2) ** 0.5


def engine_runs(eng, prompts: list[list[int]], seeds, n: int, **kw) -> list[list[int]]:
    """Tokens per round of each run at T=1, one run per prompt and seed (`kw`: DecodeConfig fields)."""
    from ..decode import DecodeConfig

    return [[len(r["new_tokens"]) for r in eng.run(ids, DecodeConfig(temperature=1.0, seed=s, max_new_tokens=n,
                                                                      ignore_eos=True, **kw))]
            for ids in prompts for s in seeds]


def dflash_vs_reference(m, seeds, n: int = 24) -> dict:
    """(mean, standard error) of per-run mean acceptance at T=1 on the same prompts: the dflash
    package's dflash_generate, dflash mode, and dflash mode with sample-and-match."""
    import torch
    from dflash.model import dflash_generate

    from ..decode import Engine

    eng = Engine(m, draft_head_dtype=None)  # the reference projects the vocabulary in fp32 too
    prompts = [eng.encode_prompt(p) for p in ("ab c ba", "c")]
    ref = []
    for ids in prompts:
        for s in seeds:  # dflash_generate samples with the global RNG; other seeds than the engine's
            torch.manual_seed(10_000 + s)
            ref.append(dflash_generate(m.drafter, m.target, torch.tensor([ids], device=m.device), n, None,
                                       temperature=1.0, return_stats=True).acceptance_lengths)
    return {"reference": per_run_acceptance(ref),
            "speculative": per_run_acceptance(engine_runs(eng, prompts, seeds, n, mode="dflash")),
            "match": per_run_acceptance(engine_runs(eng, prompts, seeds, n, mode="dflash", acceptance="match"))}


def main(argv: list[str] | None = None) -> int:
    from ..decode import Engine
    from ..models.args import add_model_args, models_from_args
    from ..options import parse_csv
    from ..sets import SETS, load_set

    p = argparse.ArgumentParser(prog="python -m engine.bench.reference", description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--modes", default="dflash,ddtree")
    p.add_argument("--ddtree", default=None, help="folder of a DDTree checkout (holds ddtree.py)")
    p.add_argument("--sets", default="humaneval,math", help=f"prompt sets ({', '.join(SETS)})")
    p.add_argument("--n", type=int, default=2, help="prompts per set")
    p.add_argument("--prompt", action="append", default=[], help="a prompt text (repeatable; replaces --sets)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--one", choices=("engine", "reference"), default=None,
                   help="one side alone, one counted pass (for callgrind; one mode)")
    a = p.parse_args(argv)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    modes = parse_csv(a.modes, MODES, "modes")
    if a.one and len(modes) != 1:   # a count per round of two modes would mix them
        p.error("--one: name one mode (--modes dflash or --modes ddtree)")
    ddtree = load_ddtree(a.ddtree) if "ddtree" in modes else None
    eng = Engine(models_from_args(a), draft_head_dtype=None)  # fp32 drafts, as the references draft
    if a.prompt:
        prompts = [(f"p{i}", eng.encode_prompt(t)) for i, t in enumerate(a.prompt)]
    else:
        prompts = [(f"{s}/{r['id']}", eng.encode_prompt(r["prompt"]))
                   for s in parse_csv(a.sets, tuple(SETS), "sets") for r in load_set(s)[: a.n]]
    if a.one:
        if modes[0] == "ddtree" and ddtree is None:
            p.error("--one: ddtree needs DDTree's checkout (--ddtree PATH)")
        print(f"rounds {one_pass(a.one, eng, prompts, modes[0], a.max_new_tokens, ddtree)}")
        return 0
    sec = reference_section(eng, prompts, modes, a.max_new_tokens, a.repeats, ddtree,
                            log=lambda s: print(s, file=sys.stderr))
    print(section_markdown(sec))
    if a.json:
        import json
        Path(a.json).write_text(json.dumps(sec, indent=1, default=list))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: tau and speed of every decoding mode on prompt sets, plus the paper's analyses.

Size: over 500 lines because planning, running and aggregating one benchmark read the same Variant and results
shapes; the report (report.py), the Ray sweep (sweep.py) and the authors' loops (reference.py) live apart.

    python -m engine bench --sets humaneval,math --n 10 --max-new-tokens 128 --traces --out runs/b1

Every mode runs on the same prompts in the same process, interleaved prompt by prompt (for each
prompt: each mode), after a warm-up, so slow drifts of the machine hit all modes alike. Times are
the engine's own (`stats.wall_s`: prefill + rounds, synchronised on CUDA; model loading and
tokenisation excluded). Ctrl-C stops after writing the results of the prompts every mode finished.
Writes DIR/results.json, DIR/report.md (tables shaped like the paper's), DIR/fig2_acceptance.html
and, with --traces, DIR/traces/<set>/<label>/<prompt id>.json (with several --drafters:
DIR/drafters/<drafter>/traces/...); results.json's "trace_files" lists them. Traces an earlier run left
in DIR are not this run's: they move to DIR/earlier-runs/<time>/ (with that run's results.json,
report.md and figures), before the first prompt.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import analyses as A
from ..errors import InputError
from ..options import MODES as ENGINE_MODES
from ..options import (ACCEPTANCE, CALIBRATIONS, DEFAULT_ACCEPTANCE, DEFAULT_CALIBRATION, DEFAULT_MAX_NEW_TOKENS,
                       DEFAULT_RULE, DEFAULT_TREE_NODES, DEFAULT_TREE_RANK, MAX_BLOCK_SIZE, MAX_TRIE_NODES, RULES,
                       TREE_MODES, UNSHIFTED_MODES, mode_rule, parse_csv, parse_max_shifted, parse_max_trie_nodes,
                       parse_seed, run_label, to_int)
from ..models.args import add_model_args, models_from_args
from ..paths import check_writable_dir
from ..sets import PER_SET, SETS, load_set, read_jsonl, sample_prompts
from .reference import stage_means
from .report import FIGURES, write_report

CAL_MODES = tuple(run_label(m, tree_rank="calibrated") for m in TREE_MODES)   # MODE-cal: tree_rank "calibrated" (cost.TreeRanker)
AUTO_MODES = tuple(run_label(m, auto=True) for m in ENGINE_MODES if m != "ar") + tuple(
    run_label(m, auto=True, tree_rank="calibrated") for m in TREE_MODES)   # the cost budget picks k and nodes
RULE_MODES = tuple(run_label("reanchor", r) for r in RULES if r != DEFAULT_RULE)  # --modes reanchor-all etc.
DEFAULT_MODES = ENGINE_MODES + ("reanchor-auto",)
WARMUP_TOKENS = 16


# -- what to run -------------------------------------------------------------------------------

@dataclass
class Variant:
    label: str                 # results and trace folder name: options.run_label of the fields below
    mode: str
    rule: str
    max_shifted: int | str | None
    max_trie_nodes: int | str | None = None   # the node budget
    acceptance: str = DEFAULT_ACCEPTANCE
    auto: bool = False         # MODE-auto: the cost budget picks the shifted blocks and nodes
    sweep_nodes: int | None = None   # a point N of the --tree-nodes sweep (MODE@N)
    tree_rank: str = DEFAULT_TREE_RANK   # tree modes: options.TREE_RANKS (MODE-cal: "calibrated")


def _one(mode: str, rule: str, max_shifted, max_trie_nodes, sweep_nodes: int | None = None) -> Variant:
    """A plain mode: ar and dflash take no caps (they are the references); the others take the flags'.
    MODE-cal: a tree mode ranked by calibrated acceptance."""
    rank = "calibrated" if mode in CAL_MODES else DEFAULT_TREE_RANK
    mode = mode.removesuffix("-cal")
    plain = mode in ("ar", "dflash")
    rule = mode_rule(mode, rule)
    return Variant(run_label(mode, rule, sweep_nodes=sweep_nodes, tree_rank=rank), mode, rule,
                   None if mode in UNSHIFTED_MODES else max_shifted, None if plain else max_trie_nodes,
                   sweep_nodes=sweep_nodes, tree_rank=rank)


def variants(modes: list[str], rules: list[str], max_shifted, max_trie_nodes=None,
             tree_nodes: list[int] = (), acceptances=(DEFAULT_ACCEPTANCE,)) -> list[Variant]:
    """What to run, in column order; each acceptance rule after the other per variant (`ar` drafts nothing,
    so it has one)."""
    out = []
    for v in _variants(modes, rules, max_shifted, max_trie_nodes, tree_nodes):
        out += [v] if v.mode == "ar" else [replace(v, acceptance=a, label=run_label(v.mode, v.rule, a, v.auto,
                                                                                      v.sweep_nodes, v.tree_rank))
                                           for a in acceptances]
    return out


def _variants(modes: list[str], rules: list[str], max_shifted, max_trie_nodes, tree_nodes) -> list[Variant]:
    """--modes to variants: MODE (the flags' caps), reanchor once per --rules entry, reanchor-RULE,
    MODE-auto (the cost budget picks shifted blocks and nodes), and MODE@N for each --tree-nodes N
    (tree modes: the budget curve)."""
    out = []
    for mode in modes:
        if mode == "reanchor":
            out += [_one(mode, r, max_shifted, max_trie_nodes) for r in rules]
        elif mode in AUTO_MODES:
            base = mode[: -len("-auto")]
            rank = "calibrated" if base in CAL_MODES else DEFAULT_TREE_RANK
            base = base.removesuffix("-cal")
            out.append(Variant(mode, base, mode_rule(base, DEFAULT_RULE),
                               None if base in UNSHIFTED_MODES else "auto", "auto", auto=True, tree_rank=rank))
        elif mode in RULE_MODES:
            out.append(_one("reanchor", mode.split("-", 1)[1], max_shifted, max_trie_nodes))
        else:
            out.append(_one(mode, DEFAULT_RULE, max_shifted, max_trie_nodes))
    for mode in [m for m in modes if m in TREE_MODES + CAL_MODES]:
        out += [_one(mode, DEFAULT_RULE, max_shifted, n, sweep_nodes=n) for n in tree_nodes]
    return out


# -- running -----------------------------------------------------------------------------------

def _safe(name: str) -> str:
    """A file or folder name from a set name or prompt id: never '.', '..' or hidden (a prompts file named
    '...jsonl' made the set '..', its traces landing outside traces/), and short enough for a file system
    (two ids cut to one name are refused in plan())."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".")[:120] or "_"


def check_drafter_flags(args) -> None:
    """--drafter and --drafters together: one of them would be ignored without a word."""
    if getattr(args, "drafters", None) and args.drafter is not None:
        raise InputError("drafters", f"give --drafter or --drafters, not both (to run {args.drafter} too, "
                                     "name it in --drafters)")


def plan(args) -> tuple[list[Variant], dict[str, list[dict]]]:
    """What to run: the variants (deduplicated by label) and the prompts of each set."""
    check_drafter_flags(args)
    # no --sets: every set, or none beside --prompts (parse_csv reads None as an empty list)
    set_names = parse_csv(args.sets, SETS, "sets") if args.sets is not None else [] if args.prompts else list(SETS)
    modes = parse_csv(args.modes, ENGINE_MODES + CAL_MODES + AUTO_MODES + RULE_MODES, "modes")
    rules = parse_csv(args.rules, RULES, "rules") or [DEFAULT_RULE]
    accs = parse_csv(args.acceptance, ACCEPTANCE, "acceptance") or [DEFAULT_ACCEPTANCE]
    sweep = [to_int(x, "tree_nodes", lo=1, hi=MAX_TRIE_NODES) for x in (args.tree_nodes or "").split(",") if x.strip()]
    parse_seed(args.seed)
    if args.block_size is not None:  # the drafter's own is checked once it loads
        to_int(args.block_size, "block_size", lo=2, hi=MAX_BLOCK_SIZE)
    if sweep and not set(modes) & set(TREE_MODES + CAL_MODES):  # else no MODE@N would run, and no curve, without a word
        raise InputError("tree_nodes", f"needs a tree mode in --modes ({', '.join(TREE_MODES)})")
    if rules != [DEFAULT_RULE] and "reanchor" not in modes:  # only reanchor runs once per rule: say it, not silently
        print(f"warning: --rules {','.join(rules)} applies to reanchor, which is not in --modes: no run per rule "
              "(give reanchor, or reanchor-RULE, in --modes)", file=sys.stderr)
    todo = list({v.label: v for v in variants(modes, rules, parse_max_shifted(args.max_shifted),
                                              parse_max_trie_nodes(args.max_trie_nodes), sweep, accs)}.values())
    if not todo:
        raise InputError("modes", "nothing to run")
    sets = {s: sample_prompts(load_set(s), args.n, args.seed) for s in set_names}
    if args.reference:   # before the models load (bench_section reads them after the whole run)
        from .reference import MODES as REFERENCE_MODES

        parse_csv(args.reference, REFERENCE_MODES, "reference")
        to_int(args.reference_repeats, "reference_repeats", lo=1)
    if args.prompts:
        p = Path(args.prompts)
        if p.exists() and not p.is_file():   # a FIFO's read waited forever; a folder or device is no prompt file
            raise InputError("prompts", f"{p} is not a regular file (a folder, FIFO or device)")
        name = _safe(p.stem)  # the set's name in results: it must not replace a --sets set, nor "all" (pooled)
        if name in sets or name == "all":
            what = "the pooled analyses" if name == "all" else "a set of --sets"
            raise InputError("prompts", f"{p.name} would be the set {name!r}, {what}: rename the file")
        sets[name] = sample_prompts(read_jsonl(p), args.n, args.seed)
    if not sets:
        raise InputError("sets", "no prompt set chosen")
    for name, ps in sets.items():  # ids name the trace files: two ids must not name one file
        files = [_safe(q["id"]) for q in ps]
        if len(set(files)) < len(files):
            same = sorted(q["id"] for q in ps if files.count(_safe(q["id"])) > 1)
            raise InputError("prompts", f"set {name!r}: ids {', '.join(map(repr, same[:4]))} name the same trace file")
    return todo, sets


def decode_config(args, v: Variant, max_new: int):
    from ..decode import DecodeConfig

    return DecodeConfig(mode=v.mode, rule=v.rule, temperature=args.temperature, seed=args.seed,
                        acceptance=v.acceptance, max_new_tokens=max_new, max_shifted=v.max_shifted,
                        max_trie_nodes=v.max_trie_nodes, tree_rank=v.tree_rank,
                        ignore_eos=args.ignore_eos, block_size=args.block_size,
                        calibration=getattr(args, "calibration", DEFAULT_CALIBRATION))


def run_prompt(eng, ids: list[int], todo: list[Variant], args, max_new: int, on_done=None) -> dict[str, dict]:
    """Every variant on one prompt, one after the other on the same engine: {label: trace}."""
    from ..decode.cost import budget_for

    traces = {}
    for v in todo:
        cfg = decode_config(args, v, max_new)
        run = eng.run(ids, cfg, budget_for(eng, cfg))
        run.finish()
        traces[v.label] = run.trace()
        if on_done:
            on_done(v.label)
    return traces


def trace_root(out: Path, drafter: str, n_drafters: int) -> Path:
    """The folder holding one drafter's traces/: DIR, or DIR/drafters/<drafter> when several run."""
    return out if n_drafters == 1 else out / "drafters" / _safe(drafter)


def trace_path(out: Path, set_name: str, label: str, prompt_id: str) -> Path:
    """Where one prompt's trace of one variant goes (the sweep's --resume looks here too)."""
    return out / "traces" / set_name / label / f"{_safe(prompt_id)}.json"


def save_traces(out: Path, set_name: str, prompt_id: str, traces: dict[str, dict]) -> None:
    from ..trace import save_trace

    for label, tr in traces.items():
        path = trace_path(out, set_name, label, prompt_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_trace(path, tr)


def trace_files(out: Path) -> list[Path]:
    """Every file under DIR/traces and DIR/drafters/*/traces (a run's traces, and any an earlier run left)."""
    roots = [out / "traces", *sorted((out / "drafters").glob("*/traces"))]
    return [p for r in roots if r.is_dir() for p in sorted(r.rglob("*")) if p.is_file()]


# What a benchmark writes in --out; a folder holding anything else is not a benchmark's, and is refused (start_out)
OUT_NAMES = ("results.json", "results.json.tmp", "report.md", *FIGURES, "traces", "drafters", "earlier-runs")


def foreign_files(out: Path) -> list[str]:
    """What in `out` no benchmark wrote: names outside OUT_NAMES, or ours without a benchmark's results.json (a
    user's own report.md or figure). Empty: a new or empty folder, or an earlier benchmark's."""
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return []
    other = [n for n in names if n not in OUT_NAMES]
    try:
        res = json.loads((out / "results.json").read_text(encoding="utf-8"))
        ours = isinstance(res, dict) and {"config", "runs"} <= res.keys()
    except (OSError, ValueError):
        ours = False
    return other or ([] if ours else names)


def set_aside_traces(out: Path, keep: set[Path] = frozenset()) -> str | None:
    """Moves what an earlier run left in `out` to out/earlier-runs/<time>/ under the same relative paths: its traces
    (every trace file but `keep`: a sweep's --resume keeps its finished jobs'), its figures, and copies of its
    results.json and report.md (this run replaces them when it ends); deletes nothing, overwrites nothing. Returns
    that folder relative to `out`, or None (nothing to move: a new folder, or a resumed sweep's own)."""
    old = [p for p in trace_files(out) if p not in keep]
    results = [n for n in ("results.json", "report.md", *FIGURES) if (out / n).is_file()]
    if not old and (keep or not results):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, n = out / "earlier-runs" / stamp, 1
    while dest.exists():
        n += 1
        dest = out / "earlier-runs" / f"{stamp}-{n}"
    dest.mkdir(parents=True)
    for p in old:
        to = dest / p.relative_to(out)
        to.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, to)
    for name in ("results.json", "report.md"):
        if (out / name).is_file():
            shutil.copy2(out / name, dest / name)
    for name in FIGURES:   # its report's figures (this run writes its own)
        if (out / name).is_file():
            os.replace(out / name, dest / name)
    for top in (out / "traces", out / "drafters"):   # the folders the move emptied
        for d in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True) + [top]:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    where = dest.relative_to(out)
    print(f"moved {len(old)} trace files an earlier run left in {out} to {out / where} (not this run's)"
          + (f", with its {', '.join(results)}" if results else ""), file=sys.stderr)
    return str(where)


def prepare(eng, todo: list[Variant], sets: dict[str, list[dict]], args) -> None:
    """Before any timed run: bad flags fail, the cost model profiles the hardware (when a variant
    uses it), and every variant warms up on the shortest prompt (kernels, allocator, caches)."""
    from ..decode import validate
    from ..decode.cost import budget_for

    cfgs = [validate(decode_config(args, v, args.max_new_tokens), eng.block_size) for v in todo]
    for cfg in cfgs:  # bad flags failed above, before an hour of decoding; now profile if needed
        budget_for(eng, cfg)
    shortest = min((p["prompt"] for ps in sets.values() for p in ps), key=len)
    run_prompt(eng, eng.encode_prompt(shortest), todo, args, min(WARMUP_TOKENS, args.max_new_tokens))


def run_sets(engines: dict, todo: list[Variant], sets: dict[str, list[dict]], args, out: Path):
    """Interleaved: for each prompt, each drafter, each variant (`ar` with the first drafter only: it drafts
    nothing). (done per set: [(prompt id, {drafter: {label: trace}})], skipped prompts, interrupted)."""
    from tqdm import tqdm

    done: dict[str, list[tuple[str, dict[str, dict[str, dict]]]]] = {s: [] for s in sets}
    skipped: list[dict] = []
    plans = {d: todo if i == 0 else [v for v in todo if v.mode != "ar"] for i, d in enumerate(engines)}
    try:
        for set_name, prompts in sets.items():
            bars = {(d, v.label): tqdm(total=len(prompts), desc=f"{set_name:>9} {_bar_name(d, engines)}{v.label:<16}",
                                       position=i, leave=True, file=sys.stderr, dynamic_ncols=True)
                    for i, (d, v) in enumerate((d, v) for d, vs in plans.items() for v in vs)}
            try:
                for p in prompts:
                    try:
                        traces = {d: run_prompt(eng, eng.encode_prompt(p["prompt"]), plans[d], args,
                                                args.max_new_tokens, lambda label, d=d: bars[d, label].update())
                                  for d, eng in engines.items()}
                    except InputError as e:  # e.g. a prompt too long for the context window
                        skipped.append({"set": set_name, "id": p["id"], "error": str(e)})
                        continue
                    done[set_name].append((p["id"], traces))
                    if args.traces:
                        for d, trs in traces.items():
                            save_traces(trace_root(out, d, len(engines)), set_name, p["id"], trs)
            finally:
                for b in bars.values():
                    b.close()
    except KeyboardInterrupt:
        print("\ninterrupted: writing the results of the prompts every mode finished", file=sys.stderr)
        return done, skipped, True
    return done, skipped, False


def _bar_name(d: str, engines: dict) -> str:
    return f"{d[:24]:<25}" if len(engines) > 1 else ""


def load_engines(args) -> dict:
    """One Engine per drafter of --drafters (default: --drafter), all over one target: {label: engine}, the
    label being a drafter folder's name (or the name given)."""
    from ..decode import Engine
    from ..models import load_drafter

    names = parse_drafters(args.drafters) if args.drafters else [args.drafter]
    first = Engine(models_from_args(args, names[0]))
    engines = {drafter_label(first.models.drafter_name): first}
    m = first.models
    dtype = next(m.drafter.parameters()).dtype if m.drafter is not None else m.dtype
    for name in names[1:]:
        d, dname = load_drafter(name, m.target, m.device, dtype, m.target_name, args.trust_remote_code)
        label = drafter_label(dname)
        while label in engines:
            label += "'"
        engines[label] = Engine(replace(m, drafter=d, drafter_name=dname))
    return engines


def parse_drafters(value: str) -> list[str]:
    """Drafter names, each once: a folder named twice (e.g. relative and absolute) would run twice."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise InputError("drafters", "names no drafter")
    first: dict = {}
    for n in names:
        first.setdefault(Path(n).expanduser().resolve() if Path(n).expanduser().exists() else n, n)
    return list(first.values())


def drafter_label(name: str) -> str:
    """A drafter's short name in results and reports: a folder's own name, else the name given."""
    return Path(name).name if ("/" in name or Path(name).exists()) and Path(name).name else name


def engine_info(eng, args) -> dict:
    """What was loaded, on what hardware (results' config; a sweep's workers report it too)."""
    m = eng.models
    # the blocks drafted: never longer than --max-new-tokens (as the traces' config.block_size says)
    block = args.block_size or eng.block_size
    block = block and min(block, args.max_new_tokens)
    return dict(target_name=m.target_name, drafter_name=m.drafter_name, device_used=str(m.device),
                dtype_used=str(m.dtype).replace("torch.", ""), block_size=block,
                hardware=_hardware(m.device), torch=_torch_version())


def run_config(args, info: dict, todo: list[Variant], load_s: float, interrupted: bool,
               skipped: list[dict]) -> dict:
    """The results' "config": the flags, what was loaded (engine_info), the hardware, the date."""
    config = {k: v for k, v in vars(args).items() if k != "func"}
    config.update(info)
    config.update(variants=[vars(v) for v in todo], per_set_sample=PER_SET, load_s=round(load_s, 2),
                  interrupted=interrupted, skipped=skipped, date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    return config


def run_bench(args) -> dict:
    from ..decode.cost import engine_profile

    todo, sets = plan(args)
    t_load = time.perf_counter()
    engines = load_engines(args)
    load_s = time.perf_counter() - t_load
    first = next(iter(engines.values()))
    for eng in engines.values():
        prepare(eng, todo, sets, args)
    out = Path(args.out)
    earlier = set_aside_traces(out)   # results.json will be this run's: so is every trace left in DIR
    done, skipped, interrupted = run_sets(engines, todo, sets, args, out)
    info = engine_info(first, args)
    if len(engines) > 1:  # what each label of Table 3 is (a sweep runs one drafter)
        info["drafter_names"] = {d: e.models.drafter_name for d, e in engines.items()}
    results = aggregate(done, todo, args.temperature, run_config(args, info, todo, load_s, interrupted, skipped))
    results["config"]["earlier_traces"] = earlier
    written = [trace_path(trace_root(out, d, len(engines)), s, label, pid)
               for s, items in done.items() for pid, by_drafter in items for d, trs in by_drafter.items()
               for label in trs] if args.traces else []
    results["trace_files"] = sorted(str(p.relative_to(out)) for p in written if p.is_file())
    if any("auto" in (v.max_shifted, v.max_trie_nodes) for v in todo):
        results["cost"] = engine_profile(first).as_dict()
    if args.reference and not interrupted:  # the authors' loops beside the engine (engine/bench/reference.py)
        from .reference import bench_section
        results["reference"] = bench_section(first, sets, args)
    return results


def _hardware(device) -> dict:
    import torch
    hw = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
          "threads": torch.get_num_threads()}
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
    return hw


def _torch_version() -> str:
    import torch
    return torch.__version__


def aggregate(done: dict[str, list[tuple[str, dict[str, dict[str, dict]]]]], todo: list[Variant],
              temperature: float, config: dict) -> dict:
    """Per (set, drafter, variant): pooled tau over rounds, tokens/s over the summed wall time, ratios (speed
    against the first drafter's `ar`, which drafts nothing; tau and speed against the same drafter's DFlash
    under the same acceptance rule). The paper's analyses: the first drafter's runs.
    done[set]: [(prompt id, {drafter: {label: trace}})]."""
    runs, an = [], {}
    pooled: dict[str, list[dict]] = {}
    for set_name, items in done.items():
        if not items:
            continue
        drafters = list(items[0][1])
        first = items[0][1][drafters[0]]
        ar = "ar" in first and [t[drafters[0]]["ar"] for _, t in items]
        an[set_name] = {}
        for v in todo:   # the paper's analyses: the first drafter's runs
            trs = [t[drafters[0]][v.label] for _, t in items]
            pooled.setdefault(v.label, []).extend(trs)
            an[set_name][v.label] = A.summarize(trs)
        for d in drafters:
            row = {v.label: _run_row(set_name, v, [t[d][v.label] for _, t in items], temperature, ar)
                   for v in todo if v.label in items[0][1][d]}
            for label, r in row.items():
                dfl = row.get(run_label("dflash", acceptance=r["acceptance"]))
                r["drafter"] = d
                if r["mode"] != "ar":   # per drafter, for Table 3 (the first one's: its summary, not again)
                    s = an[set_name][label] if d == drafters[0] else None
                    trs = [t[d][label] for _, t in items]
                    r["post_rejection_agreement"] = (s["post_rejection_agreement"] if s
                                                     else A.post_rejection_agreement(trs))["rate"]
                    g = s["gain_by_offset"] if s else A.gain_by_offset(trs)
                    r.update({k: g[k] for k in ("extra_per_round", "gained_share", "per_gained_round")})
                if r["mode"] in TREE_MODES:   # per drafter: where accepted tokens came from (issue 40)
                    r.update(tree_row(s["tree_sources"] if s else A.tree_sources(trs)))
                r["tau_vs_dflash"] = _ratio(r["tau"], dfl and dfl["tau"])
                r["speed_vs_dflash"] = _ratio(r["tokens_per_s"], dfl and dfl["tokens_per_s"])
            runs += row.values()
    an["all"] = {label: A.summarize(trs) for label, trs in pooled.items()}
    return {"runs": runs, "analyses": an, "config": config}


def _run_row(set_name: str, v: Variant, trs: list[dict], temperature: float, ar: list[dict] | None) -> dict:
    new = sum(t["stats"]["new_tokens"] for t in trs)
    wall = sum(t["stats"]["wall_s"] for t in trs)
    tps = new / wall if wall > 0 else None
    ar_tps = None
    if ar:
        ar_wall = sum(t["stats"]["wall_s"] for t in ar)
        ar_tps = sum(t["stats"]["new_tokens"] for t in ar) / ar_wall if ar_wall > 0 else None
    return {"set": set_name, "mode": v.mode, "rule": v.rule, "label": v.label, "max_shifted": v.max_shifted,
            "max_trie_nodes": v.max_trie_nodes, "acceptance": v.acceptance, "auto": v.auto,
            "sweep_nodes": v.sweep_nodes, "tree_rank": v.tree_rank,
            "temperature": temperature, "n": len(trs), "tau": A.tau(trs), "rounds": sum(len(t["rounds"]) for t in trs),
            "new_tokens": new, "wall_s": wall, "tokens_per_s": tps, "speedup_vs_ar": _ratio(tps, ar_tps),
            "stages_ms": stage_means(trs),
            "lossless": (sum(t["output_ids"] == a["output_ids"] for t, a in zip(trs, ar)) / len(trs))
            if ar and temperature == 0 else None}


def tree_row(ts: dict) -> dict:
    """A tree run's row facts from analyses.tree_sources: the share of accepted drafts shifted blocks
    proposed, of rounds running past g(0)'s block, and the tau g(0)'s tree alone would have had on the
    run's own rounds (reanchor-tree), with the share of rounds where a displaced node would have been accepted."""
    d = ts["displaced"]
    return {"shifted_token_share": ts["shifted_token_share"], "beyond_share": ts["horizon"]["beyond_share"],
            "ddtree_tau_same_rounds": d["ddtree_tau"] if d["rounds"] else None,
            "displaced_accepted_share": d["displaced_accepted_share"]}


def _ratio(a, b):
    return a / b if a is not None and b else None


# -- CLI ---------------------------------------------------------------------------------------

def add_bench_args(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """The `bench` subcommand with its flags (`help`: what the parent's --help lists it as)."""
    p = subparsers.add_parser("bench", help=help,
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", default=None,
                   help=f"comma list of {', '.join(SETS)} (default: all; none when --prompts is given)")
    p.add_argument("--prompts", default=None, help="extra JSONL set of {\"id\", \"prompt\"} lines")
    p.add_argument("--n", type=int, default=10, help=f"prompts per set (of {PER_SET} sampled with --seed)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help="comma list of " + ", ".join(ENGINE_MODES) + ", MODE-auto (the cost budget), reanchor-<rule> or "
                        "ddtree-cal / reanchor-tree-cal (trees ranked by calibrated acceptance)")
    p.add_argument("--rules", default=DEFAULT_RULE,
                   help="attachment rules for reanchor, comma list of " + ", ".join(RULES))
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--acceptance", default=DEFAULT_ACCEPTANCE,
                   help="acceptance rules at T>0, comma list of " + ", ".join(ACCEPTANCE)
                   + " (match variants are labelled <mode>-match)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    add_model_args(p)
    p.add_argument("--drafters", default=None,
                   help="comma list of drafters (folders, hub ids, 'default'), each run on every prompt and mode over "
                        "one target; the report adds the paper's Table 3 (default: --drafter alone)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens")
    p.add_argument("--max-shifted", default=None, help="shifted blocks per round: all (default), auto or K")
    p.add_argument("--max-trie-nodes", default=None,
                   help=f"verified nodes per round, anchor included: all (default; tree modes: "
                        f"{DEFAULT_TREE_NODES}), auto or N (not for ar and dflash, the references)")
    p.add_argument("--calibration", default=DEFAULT_CALIBRATION, choices=CALIBRATIONS,
                   help="the auto budget's costs: online (rescaled by each round's times) or fixed (the hardware "
                        "profile's alone: repeatable)")
    p.add_argument("--tree-nodes", default=None,
                   help="comma list of node budgets N: each tree mode also runs as MODE@N (the budget curve)")
    p.add_argument("--block-size", type=int, default=None,
                   help="draft blocks of this size (default: the drafter's trained size)")
    p.add_argument("--traces", action="store_true", help="save every trace under DIR/traces")
    p.add_argument("--reference", default=None,
                   help="comma list of dflash, ddtree: also run the authors' loops (dflash_generate; DDTree's "
                        "ddtree_generate) beside the engine on the same prompts, for the report's speed comparison")
    p.add_argument("--ddtree", default=None, help="folder of a DDTree checkout (its ddtree.py), for --reference ddtree")
    p.add_argument("--reference-repeats", type=int, default=3, help="interleaved repeats per prompt for --reference")
    p.add_argument("--out", required=True,
                   help="output folder (traces an earlier run left there move to DIR/earlier-runs/<time>/)")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    write_results(start_out(args), run_bench(args))
    return 0


def start_out(args) -> Path:
    """Checks what plan() does not, then makes the output folder."""
    if args.n is not None and args.n < 1:
        raise InputError("n", f"must be at least 1, got {args.n}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file of that name, no permission: exit 2 naming the flag, not a traceback
        raise InputError("out", f"cannot make the folder {out}: {e.strerror or e}") from None
    check_writable_dir(out, "out")  # read-only: refused now, not after the whole run
    foreign = foreign_files(out)
    if foreign:   # the user's own files: a run replaced their report.md and results.json and deleted their figures
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise InputError("out", f"{out} holds files no benchmark wrote ({shown}): name a new or empty folder, or "
                                "an earlier benchmark's (whose results move to DIR/earlier-runs/)")
    return out


def write_results(out: Path, results: dict) -> None:
    """DIR/results.json (atomically) and, when a prompt finished, DIR/report.md and its figures. A figure an earlier
    run left that this report does not draw goes: it would show that run's numbers beside this run's results."""
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
    os.replace(tmp, out / "results.json")
    text = write_report(results, out) if results["runs"] else ""
    for name in FIGURES:
        if f"]({name})" not in text and (out / name).is_file():
            (out / name).unlink()
    if results["runs"]:
        print(f"wrote {out / 'results.json'} and {out / 'report.md'}", file=sys.stderr)
    else:  # a report.md of an earlier run in this folder would contradict results.json
        skipped = results["config"].get("skipped") or []
        earlier = results["config"].get("earlier_traces")
        (out / "report.md").write_text("# ReAnchor benchmark\n\nNo prompt finished"
                                       + (f" ({len(skipped)} skipped: {skipped[0]['error']})" if skipped else "")
                                       + ": no tables.\n"
                                       + (f"\nTraces an earlier run left in this folder were moved to `{earlier}/`.\n"
                                          if earlier else ""), encoding="utf-8")
        print(f"no prompt finished; wrote {out / 'results.json'}", file=sys.stderr)

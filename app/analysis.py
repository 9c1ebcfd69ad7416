"""The Analyses tab's adapter over engine.analyses (pure functions over traces).

A function that fails on a trace (a partial or odd one) shows up as a message instead of breaking the tab.
"""
from __future__ import annotations

import textwrap
from collections import Counter

from engine import analyses
from engine.bench import report
from engine.options import (ACCEPTANCE, DEFAULT_ACCEPTANCE, DEFAULT_RULE, DEFAULT_TREE_RANK, MODES, RULES, TREE_RANKS,
                            run_label)

from . import palette, plots
from .tokentext import markdown_text

REPLAY_WORK = 3_000_000  # path tokens a counterfactual may build (~2 us each): a loaded trace may ask for more

NAMES = ("acceptance_histogram", "full_block_share", "post_rejection_agreement", "alignment_stats",
         "earliest_win_rate", "gain_by_offset", "tree_sources")   # tree_sources: issue 40, docs/trees.md


def compute(trace: dict | list[dict]) -> dict:
    """{name: result} for every analysis of one trace, or of several pooled; a failing one gives
    {"unavailable": reason}."""
    out = {}
    for name in NAMES:
        fn = getattr(analyses, name)
        try:
            out[name] = jsonable(fn(trace))
        except Exception as e:  # a partial or odd trace must not break the tab
            out[name] = {"unavailable": f"{type(e).__name__}: {e}"}
    rules = {(t.get("config") or {}).get("rule") for t in ([trace] if isinstance(trace, dict) else trace)}
    if "all" not in rules and isinstance(out.get("earliest_win_rate"), dict):
        out["earliest_win_rate"] = {"note": "meaningful when the rule 'all' ran", **out["earliest_win_rate"]}
    return out


def jsonable(obj):
    """Plain JSON values (dict keys as strings) for gr.JSON."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def _numeric_items(obj) -> list[tuple[str, float]]:
    if not isinstance(obj, dict):
        return []
    items = []
    for k, v in obj.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            items.append((str(k), float(v)))
    return items


def figures(results: dict, scope: str = "current run"):
    """(acceptance histogram figure, accepted gain by offset figure), titled with the paper's names and, on a
    line of its own (one line was cut at the figure's edge on a 1024 or 1280 px wide page), `scope` (the current
    run, or the traces pooled)."""
    hist = _numeric_items(results.get("acceptance_histogram"))
    if hist:
        hist.sort(key=lambda kv: float(kv[0]) if kv[0].lstrip("-").isdigit() else 0)
        h = plots.bar_figure([k for k, _ in hist], [v for _, v in hist], f"Figure 2: acceptance length (accepted + bonus)\n{scope}",
                             "acceptance length", "rounds")
    else:
        h = plots.empty_figure("no histogram")
    gain = results.get("gain_by_offset")
    by_d = _numeric_items(gain.get("by_d") if isinstance(gain, dict) else None)
    if by_d:
        by_d.sort(key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)
        g = plots.bar_figure([f"d={k}" for k, _ in by_d], [v for _, v in by_d],
                             f"Figure 2 (gain): accepted drafts gained by shifted offset d\n{scope}", "offset", "tokens",
                             color=palette.D_COLORS[0])
    else:
        g = plots.empty_figure("no shifted gain in this run")
    return h, g


def replay_work(trace: dict, mode: str, rule: str) -> int:
    """Path tokens replaying `mode`/`rule` on the trace's rounds builds: rule "all" attaches each block at
    every baseline site matching its first token (a round of 128-token blocks: up to 2 M), others at one."""
    work = 0
    for r in trace["rounds"]:
        L = len(r["baseline"])
        if mode in ("ar", "dflash"):
            work += L
            continue
        counts = Counter(r["baseline"]) if rule == "all" else None
        work += 2 * L * (1 + sum(counts[b["tokens"][0]] if counts else 1 for b in r["shifted"]))
    return work


def counterfactual(trace: dict | None, mode: str, rule: str, name: str):
    """(figure, summary or {"unavailable": why}) for `mode`/`rule` replayed on the rounds of `trace`."""
    if not trace or not trace.get("rounds"):
        return plots.empty_figure("no run", 240), {"unavailable": "no run"}
    try:
        work = replay_work(trace, mode, rule)
        if work > REPLAY_WORK:
            raise ValueError(f"counterfactual: replaying {mode} / {rule} here would build {work:,} path tokens, "
                             f"over the {REPLAY_WORK:,} this page replays")
        rows = analyses.counterfactual(trace, mode, rule, sampled=True)
    except (ValueError, KeyError, TypeError) as e:  # a trace that cannot answer, or an odd loaded one
        return plots.empty_figure("\n".join(textwrap.wrap(str(e), 60)), 240), {"unavailable": str(e)}
    s = analyses.counterfactual_summary(rows)
    drawn = " along this run's realised draw (T>0)" if analyses.is_sampled(trace) else ""
    title = (f"{name} on these rounds{drawn} (◆) vs accepted (bars)\nτ {s['tau']:.2f} → "
             f"{s['counterfactual_tau']:.2f}: {s['better']} rounds better, {s['worse']} worse, {s['same']} same")
    return plots.counterfactual_figure(rows, title), s


def bench_label(cfg: dict) -> str:
    """The benchmark's name for a trace's run (engine.options.run_label of its config's fields: reanchor-RULE,
    MODE-cal for a tree ranked by calibrated acceptance, MODE-auto when a cost budget chose, -match under
    sample-and-match). A mode, rule, acceptance or tree ranking the engine does
    not know (a loaded trace may say anything) is "unknown": the label heads Markdown, where a trace's own words
    could be links or images the browser would fetch."""
    mode, rule, acc = cfg.get("mode", "?"), cfg.get("rule", DEFAULT_RULE), cfg.get("acceptance") or DEFAULT_ACCEPTANCE
    rank = cfg.get("tree_rank") or DEFAULT_TREE_RANK
    if mode not in MODES or rule not in RULES or acc not in ACCEPTANCE or rank not in TREE_RANKS:
        return "unknown"
    auto = "auto" in (cfg.get("max_shifted"), cfg.get("max_trie_nodes"))
    return run_label(mode, rule, acc if cfg.get("temperature") else DEFAULT_ACCEPTANCE, auto, tree_rank=rank)


PAPER_TABLES = (("Table 1", report.table1, "`dflash` or `reanchor` runs"),
                ("Table 5", report.table5, "runs with shifted blocks"),
                ("Table 8", report.table8, "`reanchor` runs with rule `all`"),
                ("Figure 2", report.figure2, "`dflash` or `reanchor` runs"))


def paper_tables(traces: dict | list[dict], scope: str) -> str:
    """The paper's Table 1, 5, 8 and Figure 2 (the benchmark report's own functions) over one run, or
    several pooled, as Markdown headed by `scope` ("current run" or "pooled ..."). A table that needs
    another kind of run says which."""
    traces = [traces] if isinstance(traces, dict) else list(traces)
    groups: dict[str, list[dict]] = {}
    fields: dict[str, dict] = {}   # the paper's tables read rounds, whatever budget or rule of acceptance chose
    for t in traces:                # them: a run is found by its mode and attachment rule (report.plain_label)
        cfg = t.get("config") or {}
        label = bench_label(cfg)
        groups.setdefault(label, []).append(t)
        fields.setdefault(label, {"mode": cfg.get("mode"), "rule": cfg.get("rule", DEFAULT_RULE)}
                          if label != "unknown" else {})
    try:
        an = {label: analyses.summarize(trs) for label, trs in groups.items()}
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as e:  # a partial or odd trace
        return f"### Analyses of the {scope}\n\nunavailable: {markdown_text(f'{type(e).__name__}: {e}')}"
    R = report.Results({"runs": [{"set": scope, "label": label, **fields[label]} for label in groups],
                        "analyses": {scope: an, "all": an}, "config": {}})
    out = [f"### The paper's tables, over the {scope} ({', '.join(groups)}; "
           f"{sum(len(t.get('rounds', [])) for t in traces)} rounds)"]
    for name, fn, needs in PAPER_TABLES:
        md = fn(R)
        lines = [line for line in "\n".join(md).splitlines() if not line.startswith("| all |")]
        lines = ["####" + line[2:] if line.startswith("## ") else line for line in lines]
        out.append("\n".join(lines) if md else f"\n#### {name}: not for this run (computed over {needs})")
    return "\n".join(out)

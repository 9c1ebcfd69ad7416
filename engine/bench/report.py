"""report.md from results.json: the paper's tables (2, 4, 7, 5, 6, 8, 1, Figure 2) and the cost
budget's, each a function of the results; Figure 2 as a self-contained HTML file."""
from __future__ import annotations

import re
from pathlib import Path

from ..options import DEFAULT_ACCEPTANCE, DEFAULT_RULE, DEFAULT_TREE_RANK, TREE_MODES, run_label
from .reference import report_lines


def _f(x, fmt="{:.2f}", none="–") -> str:
    return none if x is None else fmt.format(x)


def _x(x) -> str:
    """A ratio: '1.23x', or '–' without its unit when there is none (no `ar` run, say)."""
    return _f(x, "{:.2f}x")


def _pct(x) -> str:
    return _f(None if x is None else 100 * x, "{:.1f}%")


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _diff(a, b):
    return a - b if a is not None and b is not None else None


FIGURES = ("fig2_acceptance.html", "budget_curve.html")   # what write_figure and write_curve write
_ACCEPTANCE_NAMES = {"speculative": "speculative sampling", "match": "sample-and-match"}


def plain_label(run: dict) -> str:
    """A results.json run's name under speculative sampling, from its fields (options.run_label); a run without
    fields (the app's rows name only a label) is its label."""
    if "mode" not in run:
        return run["label"]
    return run_label(run["mode"], run.get("rule", DEFAULT_RULE), auto=run.get("auto", False),
                     sweep_nodes=run.get("sweep_nodes"), tree_rank=run.get("tree_rank", DEFAULT_TREE_RANK))


class Results:
    """Lookups into results.json: per (set, label) runs and analyses."""

    def __init__(self, results: dict):
        """The paper's other tables read the first drafter's runs; Table 3 reads every drafter's (all_runs)."""
        self.all_runs, self.an, self.cfg = results["runs"], results["analyses"], results["config"]
        self.drafters = list(dict.fromkeys(r.get("drafter") for r in self.all_runs))
        self.runs = [r for r in self.all_runs if r.get("drafter") == self.drafters[0]]
        self.cost = results.get("cost")
        self.sets = list(dict.fromkeys(r["set"] for r in self.runs))
        self.labels = list(dict.fromkeys(r["label"] for r in self.runs))
        self._by = {(r["set"], r["label"]): r for r in self.runs}
        # the per-mode tables read one acceptance rule's runs: speculative sampling's, else (--acceptance match
        # alone) the rule that ran, whose labels end in -match: lab() maps a mode's plain label to its run's
        accs = [r.get("acceptance", DEFAULT_ACCEPTANCE) for r in self.runs if r.get("mode") != "ar"]
        self.acceptance = DEFAULT_ACCEPTANCE if not accs or DEFAULT_ACCEPTANCE in accs else accs[0]
        self.plain: dict[str, str] = {}   # a run's name without its acceptance rule -> its label
        for r in self.runs:   # `ar` drafts nothing: one run, under either rule
            if r.get("mode") == "ar" or r.get("acceptance", DEFAULT_ACCEPTANCE) == self.acceptance:
                self.plain.setdefault(plain_label(r), r["label"])
        self.note = "" if self.acceptance == DEFAULT_ACCEPTANCE else \
            f" ({_ACCEPTANCE_NAMES.get(self.acceptance, self.acceptance)} runs)"

    def run_of(self, label: str) -> dict:
        """The fields of the run named `label` (its first set's row)."""
        return next((r for r in self.runs if r["label"] == label), {})

    def get(self, s: str, label: str, key: str):
        r = self._by.get((s, label))
        return r and r.get(key)

    def stat(self, s: str, label: str, *keys):
        x = self.an.get(s, {}).get(label)
        for k in keys:
            x = x.get(k) if isinstance(x, dict) else None
        return x

    def mean(self, label: str, key: str):
        return _mean(self.get(s, label, key) for s in self.sets)

    def lab(self, plain: str) -> str | None:
        """The label that ran for a mode's plain label (`dflash-match` for `dflash` under --acceptance match)."""
        return self.plain.get(plain)

    def first(self, *cands: str) -> str | None:
        return next((self.plain[c] for c in cands if c in self.plain), None)

    def having(self, *cands: str) -> list[str]:
        return [self.plain[c] for c in cands if c in self.plain]


def header(R: Results) -> list[str]:
    cfg = R.cfg
    counts = ", ".join(f"{s} {R.get(s, R.labels[0], 'n')}" for s in R.sets)
    return ["# ReAnchor benchmark\n",
            f"Target `{cfg['target_name']}`, drafter `{cfg['drafter_name']}` (B={cfg.get('block_size')})"
            + (f" (Table 3: also {', '.join(f'`{d}`' for d in R.drafters[1:])}; the other tables: the first)"
               if len(R.drafters) > 1 else "") + ", "
            f"{cfg['device_used']} {cfg['dtype_used']}, T={cfg['temperature']}, seed {cfg['seed']}, "
            f"max {cfg['max_new_tokens']} new tokens, prompts per set: {counts}. {cfg['date']}."
            + (" **Interrupted**: partial results." if cfg.get("interrupted") else ""),
            "\ntau = mean tokens committed per round (accepted drafts + the bonus), pooled over rounds; speedup = "
            "tokens/s over target-only (`ar`) tokens/s, same prompts, interleaved. Lossless: share of "
            "prompts whose output equals `ar`'s token for token (T=0)."
            + ("" if not cfg["temperature"] else
               f" At T={cfg['temperature']} outputs are samples, so the lossless share is not defined (–): "
               "the tests check instead that every mode samples the target's law. Drafts are sampled at "
               f"T and accepted {_acceptance_words(R)}. Analyses that need the target's choice off the accepted "
               "path (Table 1, Table 8) use its argmax.")]


def _acceptance_words(R: Results) -> str:
    """How drafts were accepted at T>0, and which runs the per-mode tables read."""
    if R.acceptance != DEFAULT_ACCEPTANCE:
        return (f"by {_ACCEPTANCE_NAMES.get(R.acceptance, R.acceptance)} alone (`--acceptance {R.acceptance}`): "
                f"every drafting column ends in `-{R.acceptance}`, and the tables below read those runs")
    if len(R.plain) < len(R.labels):   # both rules ran
        return ("by speculative sampling against their own law (`-match` columns: sample-and-match); the tables "
                "after the acceptance-rule table read the speculative-sampling runs")
    return "by speculative sampling against their own law"


def table2(R: Results) -> list[str]:
    L = R.labels
    return ["\n## Table 2: tau / speedup per set and mode\n",
            _table(["set"] + L, [[s] + [f"{_f(R.get(s, l, 'tau'))} / {_x(R.get(s, l, 'speedup_vs_ar'))}"
                                        for l in L] for s in R.sets] +
                   [["mean"] + [f"{_f(R.mean(l, 'tau'))} / {_x(R.mean(l, 'speedup_vs_ar'))}" for l in L]]),
            "\n### Tokens/s and losslessness\n",
            _table(["set"] + L, [[s] + [f"{_f(R.get(s, l, 'tokens_per_s'), '{:.1f}')} ({_pct(R.get(s, l, 'lossless'))})"
                                        for l in L] for s in R.sets])]


def table_acceptance(R: Results) -> list[str]:
    """tau under speculative sampling and under sample-and-match, side by side (T > 0)."""
    by_rule: dict[str, dict[str, str]] = {}   # plain name -> {acceptance: label}
    for r in R.runs:
        if r.get("mode", "ar") != "ar":
            by_rule.setdefault(plain_label(r), {})[r.get("acceptance", DEFAULT_ACCEPTANCE)] = r["label"]
    pairs = [(a["speculative"], a["match"]) for a in by_rule.values() if {"speculative", "match"} <= a.keys()]
    if not pairs:
        return []
    cell = lambda s, l, m: f"{_f(R.get(s, l, 'tau'))} / {_f(R.get(s, m, 'tau'))}"  # noqa: E731
    return ["\n## Acceptance rule: tau with speculative sampling / with sample-and-match\n",
            _table(["set"] + [l for l, _ in pairs], [[s] + [cell(s, l, m) for l, m in pairs] for s in R.sets] +
                   [["mean"] + [f"{_f(R.mean(l, 'tau'))} / {_f(R.mean(m, 'tau'))}" for l, m in pairs]])]


def tables_4_7(R: Results) -> list[str]:
    dfl = R.lab("dflash")
    if not dfl:
        return []
    md = []
    parts = R.having("in-block", "extension", "reanchor")
    if parts:
        md += [f"\n## Table 4: in-block refinement vs block extension (delta tau / speed over DFlash){R.note}\n",
               _table(["set", f"{dfl} tau"] + parts,
                      [[s, _f(R.get(s, dfl, "tau"))] +
                       [f"{_f(_diff(R.get(s, l, 'tau'), R.get(s, dfl, 'tau')), '{:+.2f}')} / "
                        f"{_x(R.get(s, l, 'speed_vs_dflash'))}" for l in parts] for s in R.sets])]
    steps = R.having("dflash", "shifted-fixed", "reanchor")
    if len(steps) > 1:
        md += [f"\n## Table 7: cumulative ablation (tau){R.note}\n",
               _table(["set"] + steps, [[s] + [_f(R.get(s, l, "tau")) for l in steps] for s in R.sets] +
                      [["mean"] + [_f(R.mean(l, "tau")) for l in steps]])]
    return md


def table5(R: Results) -> list[str]:
    src = R.first("reanchor", "reanchor-all", "in-block", "extension", "shifted-fixed")
    if not src:
        return []
    a = lambda s, k: R.stat(s, src, "alignment", k)  # noqa: E731
    return [f"\n## Table 5: start-token alignment (`{src}` runs; of shifted blocks with a match){R.note}\n",
            _table(["set", "shifted blocks", "matched", "shifted only", "multiple"],
                   [[s, a(s, "blocks"), a(s, "matched"), _pct(a(s, "shifted_only_rate")),
                     _pct(a(s, "multiple_rate"))] for s in R.sets + ["all"]])]


def table6(R: Results) -> list[str]:
    # fixed-offset: the shifted-fixed mode, or reanchor under --rules fixed (the same assembly)
    named = (("earliest", "earliest"), ("random", "random"), ("longest prefix", "latest"), ("all sites", "all"))
    rules = [(r, l) for r, l in (("fixed-offset", R.first("shifted-fixed", "reanchor-fixed")),
                                 *((name, R.lab(run_label("reanchor", rule))) for name, rule in named))
             if l]
    if len(rules) < 2:
        return []
    return [f"\n## Table 6: attachment rule (mean over sets){R.note}\n",
            _table(["rule", "tau", "speedup"],
                   [[r, _f(R.mean(l, "tau")), _x(R.mean(l, "speedup_vs_ar"))] for r, l in rules])]


def table8(R: Results) -> list[str]:
    src = R.lab("reanchor-all")
    if not src:
        return []
    w = lambda s, k: R.stat(s, src, "earliest_win", k)  # noqa: E731
    return [f"\n## Table 8: earliest-site win rate (rule `all`){R.note}\n",
            "Groups with several matching sites (and, in brackets, every eligible group).\n",
            _table(["set", "groups", "earliest wins", "win rate"],
                   [[s, f"{w(s, 'groups')} ({w(s, 'groups_all')})", f"{w(s, 'wins')} ({w(s, 'wins_all')})",
                     f"{_pct(w(s, 'rate'))} ({_pct(w(s, 'rate_all'))})"] for s in R.sets + ["all"]])]


def table1(R: Results) -> list[str]:
    base = R.first("dflash", "reanchor")
    if not base:
        return []
    p = lambda s, k: R.stat(s, base, "post_rejection_agreement", k)  # noqa: E731
    return [f"\n## Table 1: post-rejection agreement (`{base}` runs){R.note}\n",
            _table(["set", "drafts after the first rejection", "equal to target top-1", "agreement"],
                   [[s, p(s, "total"), p(s, "agree"), _pct(p(s, "rate"))] for s in R.sets + ["all"]])]


def figure2(R: Results, link: str | None = None) -> list[str]:
    """Figure 2's numbers: the full-block share per set (the histogram: `link`, write_figure's file), and
    ReAnchor's gain by credited offset."""
    shown = R.having("dflash", "reanchor")
    if not shown:
        return []
    md = [f"\n## Figure 2: acceptance length (bonus included) and full-block share{R.note}\n",
          *([f"Histogram: [{link}]({link}).\n"] if link else []),
          _table(["set"] + [f"{l} full-block share" for l in shown],
                 [[s] + [_pct(R.stat(s, l, "full_block_share")) for l in shown] for s in R.sets + ["all"]])]
    if R.lab("reanchor"):
        gain = R.stat("all", R.lab("reanchor"), "gain_by_offset") or {}
        md += ["\nReAnchor's extra accepted drafts over the baseline alone, per credited offset d "
               "(pooled over sets):\n",
               _table(["extra drafts", "in block", "beyond the block", "per round", "rounds that gain",
                       "per gaining round", "by d"],
                      [[gain.get("extra"), gain.get("in_block"), gain.get("beyond"), _f(gain.get("extra_per_round")),
                        _pct(gain.get("gained_share")), _f(gain.get("per_gained_round")),
                        ", ".join(f"{d}: {n}" for d, n in gain.get("by_d", {}).items())]])]
    return md


def table1_figure2(R: Results, out: Path) -> list[str]:
    if not R.first("dflash", "reanchor"):
        return []
    return table1(R) + figure2(R, write_figure(R.an, R.sets, R.having("dflash", "reanchor"), out))


def budget_tables(R: Results) -> list[str]:
    md = []
    if R.lab("reanchor-auto"):
        cmp = R.having("dflash", "reanchor", "reanchor-auto")
        z = lambda l, k, fmt="{:.1f}": _f(R.stat("all", l, "sizes", k), fmt)  # noqa: E731
        md += [f"\n## Cost budget: ReAnchor unbounded (paper) vs auto (cost model){R.note}\n",
               _table(["set"] + [f"{l} tau / tok/s / speedup" for l in cmp],
                      [[s] + [f"{_f(R.get(s, l, 'tau'))} / {_f(R.get(s, l, 'tokens_per_s'), '{:.1f}')} / "
                              f"{_x(R.get(s, l, 'speedup_vs_ar'))}" for l in cmp] for s in R.sets]),
               "\nWork per round (pooled over sets): shifted blocks drafted of those available, "
               "trie nodes verified, draft and verify time.\n",
               _table(["mode", "shifted drafted / available", "trie nodes", "draft ms", "verify ms"],
                      [[l, f"{z(l, 'shifted_drafted', '{:.2f}')} / {z(l, 'shifted_available', '{:.2f}')}",
                        z(l, "trie_nodes"), z(l, "draft_ms"), z(l, "verify_ms")] for l in cmp])]
    cost = R.cost
    if cost:
        md += [f"\n### Measured cost on this hardware ({cost['device']}, context {cost['context']} tokens)\n",
               _table(["trie nodes N", "verify ms"], [[n, _f(ms)] for n, ms in cost["verify"].items()]),
               "\n" + _table(["drafted blocks n", "draft ms"], [[n, _f(ms)] for n, ms in cost["draft"].items()])]
    return md


def table3(R: Results) -> list[str]:
    """The paper's Table 3: each drafter (DFlash and its variants) without and with ReAnchor, one run."""
    dfl, rea = R.lab("dflash"), R.lab("reanchor")
    if len(R.drafters) < 2 or not (dfl and rea):
        return []
    by = {(r["drafter"], r["set"], r["label"]): r for r in R.all_runs}

    def cells(d: str, s: str | None) -> list[str]:
        def get(label, key):
            if s is not None:
                return (by.get((d, s, label)) or {}).get(key)
            return _mean((by.get((d, x, label)) or {}).get(key) for x in R.sets)
        t0, t1 = get(dfl, "tau"), get(rea, "tau")
        v0, v1 = get(dfl, "speedup_vs_ar"), get(rea, "speedup_vs_ar")
        # the speed change needs no `ar`: over the same prompts it is the ratio of tokens/s
        s0, s1 = (v0, v1) if v0 and v1 else (get(dfl, "tokens_per_s"), get(rea, "tokens_per_s"))
        return [_f(t0), _f(t1), _pct(t1 / t0 - 1 if t0 and t1 else None), _x(v0), _x(v1),
                _pct(s1 / s0 - 1 if s0 and s1 else None), _pct(get(dfl, "post_rejection_agreement")),
                _f(get(rea, "extra_per_round")), _pct(get(rea, "gained_share")),
                _f(get(rea, "per_gained_round"))]

    rows = [[d, s or "mean"] + cells(d, s) for d in R.drafters for s in R.sets + [None]]
    return [f"\n## Table 3: drafter variants without and with ReAnchor (tau; speedup over `ar`){R.note}\n",
            "Every drafter runs every prompt in the same process, interleaved prompt by prompt. Post-rejection "
            "agreement: Table 1 of that drafter's `dflash` runs; extra drafts: ReAnchor's accepted drafts beyond the "
            "baseline alone, per round (Figure 2's gain) = the share of rounds that gain x the drafts a gaining round "
            "adds.\n",
            _table(["drafter", "set", "tau", "+ReAnchor tau", "delta tau", "speedup", "+ReAnchor speedup",
                    "delta speed", "post-rejection agreement", "+ReAnchor extra drafts / round", "rounds that gain",
                    "drafts per gaining round"], rows)]


def trees(R: Results) -> list[str]:
    """DDTree and ReAnchor in the same tree against DFlash's chain; the auto budgets against dflash."""
    md = []
    shown = R.having("dflash", "ddtree", "reanchor", "reanchor-tree")
    if R.lab("dflash") and (R.lab("ddtree") or R.lab("reanchor-tree")):   # either tree against the chain
        cell = lambda s, l: (f"{_f(R.get(s, l, 'tau'))} / {_x(R.get(s, l, 'tau_vs_dflash'))} / "  # noqa: E731
                             f"{_x(R.get(s, l, 'speed_vs_dflash'))}")
        md += [f"\n## Trees: tau / tau over dflash / speed over dflash{R.note}\n",
               _table(["set"] + shown, [[s] + [cell(s, l) for l in shown] for s in R.sets])]
    autos = [l for l in R.plain.values() if R.run_of(l).get("auto")]
    if autos and R.lab("dflash"):
        md += [f"\n## Auto budgets: tokens/s over dflash's (the goal: >= 0.97x on every set){R.note}\n",
               _table(["set"] + autos, [[s] + [_x(R.get(s, l, "speed_vs_dflash")) for l in autos]
                                        for s in R.sets] +
                      [["min"] + [_x(min((v for s in R.sets if (v := R.get(s, l, "speed_vs_dflash")) is not None),
                                          default=None))
                                  for l in autos]])]
    return md


def tree_sources(R: Results) -> list[str]:
    """Issue 40: every tree run (each drafter, set, mode and node budget) against `ddtree` with the same
    drafter, budget and set, the share of its accepted drafts shifted blocks proposed, of rounds past
    g(0)'s block, and (reanchor-tree) g(0)'s own tree replayed on the run's rounds; then, over every set,
    the first drafter's node acceptance by source at equal drafter score and the ranking's calibration.
    Runs are found by their fields (mode, auto, sweep_nodes, tree_rank), never by parsing labels."""
    runs = [r for r in R.all_runs if r.get("mode") in TREE_MODES and r.get("acceptance", DEFAULT_ACCEPTANCE) == R.acceptance]
    if not runs:
        return []
    by = {(r.get("drafter"), r["set"], plain_label(r)): r for r in R.all_runs
          if r.get("acceptance", DEFAULT_ACCEPTANCE) == R.acceptance}
    rows = []
    for r in runs:
        ref = by.get((r.get("drafter"), r["set"], run_label("ddtree", auto=r.get("auto", False),
                                                            sweep_nodes=r.get("sweep_nodes"))))
        name = re.sub(r".*/", "", str(r.get("drafter")))
        rows.append([name, r["set"], r["label"], _f(r.get("tau")), _x(_ratio(r.get("tau"), ref and ref.get("tau"))),
                     _f(r.get("tokens_per_s"), "{:.1f}"),
                     _x(_ratio(r.get("tokens_per_s"), ref and ref.get("tokens_per_s"))),
                     _pct(r.get("shifted_token_share")), _pct(r.get("beyond_share")),
                     _f(r.get("ddtree_tau_same_rounds")), _pct(r.get("displaced_accepted_share"))])
    md = [f"\n## Trees by source: each tree run against ddtree (same drafter, set and node budget){R.note}\n",
          "shifted share: accepted drafts a shifted block proposed; past g(0): rounds whose accepted path ran past "
          "g(0)'s block; g(0) alone, same rounds: tau of the tree g(0) alone would have grown with the same budget, "
          "replayed on the run's own rounds (T=0); displaced hit: rounds where a node the shifted blocks displaced "
          "would have been accepted (analyses.tree_sources, docs/trees.md).\n",
          _table(["drafter", "set", "run", "tau", "tau / ddtree", "tokens/s", "speed / ddtree", "shifted share",
                  "past g(0)", "g(0) alone, same rounds", "displaced hit"], rows)]
    cal = []
    for label in [lb for lb in R.labels if R.run_of(lb).get("mode") == "reanchor-tree"]:
        ts = R.stat("all", label, "tree_sources")
        if not ts:
            continue
        eq = ts["equal_score"]
        cal.append([label, _pct(eq["shifted_rate"]), _pct(eq["baseline_rate_at_equal_score"]), eq["matched_nodes"]]
                   + [" / ".join(f"{_pct(c['rate'])} ({_pct(c['q'])})" for _, c in
                                 sorted(ts["calibration"]["step"].get(k, {}).items(), key=lambda x: int(x[0].split("-")[0].rstrip("+"))))
                      or "–" for k in ("baseline", "baseline rank>0", "shifted", "shifted rank>0")])
    if cal:
        md += ["\n## Node acceptance by source (first drafter, every set)\n",
               "shifted nodes' acceptance vs g(0)'s at equal drafter score (log w bins, weighted by the shifted nodes "
               "in each); per kind, by depth (1, 2, 3-4, 5-8, 9-16, 17+), the share accepted among nodes whose parent "
               "was, and in brackets the drafter's mean q there (its prediction).\n",
               _table(["run", "shifted accepted", "g(0) at equal score", "shifted nodes matched", "g(0) rank 0",
                       "g(0) rank > 0", "shifted rank 0", "shifted rank > 0"], cal)]
    return md


def _ratio(a, b):
    return a / b if a is not None and b else None


def budget_curve(R: Results, out: Path) -> list[str]:
    """tau and tokens/s of each tree mode against its node budget N (the MODE@N runs, pooled over sets)."""
    curve: dict[str, list[tuple[int, str]]] = {}
    for label in R.labels:   # MODE@N runs; under sample-and-match, their own curve
        r = R.run_of(label)
        if r.get("sweep_nodes") is not None:
            name = run_label(r["mode"], r.get("rule", DEFAULT_RULE), r.get("acceptance", DEFAULT_ACCEPTANCE),
                             tree_rank=r.get("tree_rank", DEFAULT_TREE_RANK))
            curve.setdefault(name, []).append((r["sweep_nodes"], label))
    if not curve:
        return []
    rows = [[mode, n, _f(R.mean(l, "tau")), _f(R.mean(l, "tokens_per_s"), "{:.1f}"), _x(R.mean(l, "speedup_vs_ar"))]
            for mode, pts in curve.items() for n, l in sorted(pts)]
    figure = write_curve(R, curve, out)
    return ["\n## Budget curve: tau and speed against the node budget N (mean over sets)\n",
            f"Figure: [{figure}]({figure}).\n",
            _table(["mode", "N (nodes, anchor included)", "tau", "tokens/s", "speedup"], rows)]


def write_report(results: dict, out: Path) -> str:
    R = Results(results)
    md = (header(R) + table2(R) + table3(R) + table_acceptance(R) + trees(R) + tree_sources(R) + tables_4_7(R) + table5(R)
          + table6(R) + table8(R) + table1_figure2(R, out) + budget_tables(R) + budget_curve(R, out) + report_lines(results))
    if R.cfg.get("earlier_traces"):
        md += [f"\nTraces an earlier run left in this folder were moved to `{R.cfg['earlier_traces']}/`, with its "
               "figures and copies of its results.json and report.md; results.json's `trace_files` lists this run's."]
    if R.cfg.get("skipped"):
        md += [f"\nSkipped prompts: {len(R.cfg['skipped'])} ({R.cfg['skipped'][0]['error']}...)"]
    if R.cfg.get("failed"):  # a Ray sweep's jobs given up after repeated failures (not in the tables)
        md += [f"\nFailed jobs, not in the tables: {len(R.cfg['failed'])} ("
               + ", ".join(f"{f['set']}/{f['id']}" for f in R.cfg["failed"][:10])
               + f"; {R.cfg['failed'][0]['errors'][-1]}). `--resume` runs them again."]
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


def write_curve(R: Results, curve: dict[str, list[tuple[int, str]]], out: Path) -> str:
    """The budget curve as a self-contained HTML file: tau and tokens/s against N, one line per mode."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["tau against N", "tokens/s against N"])
    for mode, pts in curve.items():
        pts = sorted(pts)
        xs = [n for n, _ in pts]
        fig.add_trace(go.Scatter(x=xs, y=[R.mean(l, "tau") for _, l in pts], name=mode, legendgroup=mode,
                                 mode="lines+markers"), row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=[R.mean(l, "tokens_per_s") for _, l in pts], name=mode, legendgroup=mode,
                                 mode="lines+markers", showlegend=False), row=1, col=2)
    for c in (1, 2):
        fig.update_xaxes(title_text="node budget N", type="log", row=1, col=c)
    fig.update_layout(title="Budget curve (mean over sets)", width=900, height=420)
    name = "budget_curve.html"
    fig.write_html(out / name, include_plotlyjs=True, full_html=True)
    return name

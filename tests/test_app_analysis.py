"""The app's Analyses tab (app/analysis.py): runs are named as the benchmark names them, from their config's fields."""
from __future__ import annotations

import json
from pathlib import Path

from app import analysis

ROOT = Path(__file__).resolve().parent.parent


def test_runs_are_named_from_their_fields():
    """An auto-budget or sample-and-match run was labelled plain `reanchor`, its budget and rule lost."""
    label = analysis.bench_label
    assert label({"mode": "reanchor", "rule": "earliest", "max_shifted": "auto"}) == "reanchor-auto"
    assert label({"mode": "ddtree", "max_trie_nodes": "auto"}) == "ddtree-auto"
    assert label({"mode": "reanchor", "temperature": 1.0, "acceptance": "match"}) == "reanchor-match"
    assert label({"mode": "reanchor", "temperature": 0.0, "acceptance": "match"}) == "reanchor"  # the same at T=0
    assert label({"mode": "reanchor", "rule": "all", "acceptance": "match", "temperature": 1}) == "reanchor-all-match"
    assert label({"mode": "ar", "temperature": 1.0, "acceptance": "match"}) == "ar"
    assert label({"mode": "reanchor", "acceptance": "<img src=x>"}) == "unknown"


def test_a_calibrated_tree_keeps_its_cal_label():
    """A tree ranked by calibrated acceptance is MODE-cal in the benchmark (engine.options.run_label): the app
    named it as the drafter-ranked tree, so the two pooled as one run."""
    label = analysis.bench_label
    assert label({"mode": "ddtree", "tree_rank": "calibrated"}) == "ddtree-cal"
    assert label({"mode": "reanchor-tree", "tree_rank": "calibrated", "max_trie_nodes": "auto"}) == \
        "reanchor-tree-cal-auto"
    assert label({"mode": "ddtree", "tree_rank": "drafter"}) == label({"mode": "ddtree"}) == "ddtree"
    assert label({"mode": "ddtree", "tree_rank": "<img src=x>"}) == "unknown"


def test_an_auto_run_keeps_the_papers_tables():
    """Named reanchor-auto, the run still fills the tables computed over reanchor runs."""
    t = json.loads((ROOT / "assets/traces/math-speed-reanchor.json").read_text())
    t["config"]["max_shifted"] = "auto"
    md = analysis.paper_tables(t, "current run")
    assert "(reanchor-auto;" in md and "Table 1" in md and "not for this run (computed over `dflash`" not in md

"""Issue 55, what the page shows a researcher, from the state alone (app.views): the attachment table of a T>0 round
and its note, the list of rounds where the rules disagree, and a tree round's line on what its shifted blocks added."""
from __future__ import annotations

import html
import re

import pytest

pytest.importorskip("gradio")

from app import session, views  # noqa: E402
from app_fixtures import real_trace  # noqa: E402
from engine import analyses  # noqa: E402


def state_of(trace: dict) -> dict:
    st = session.new_state()
    st.update(trace=trace)
    return st


def test_a_sampled_round_has_its_table_and_says_whose_counts_they_are():
    t = real_trace("llama", "reanchor", "earliest", "hi, j.", 48, 1, 0.7)
    st = state_of(t)
    i = next(k for k, r in enumerate(t["rounds"]) if r["shifted"])
    cap, _ = views.round_entry(st, i)
    assert "rx-att" in cap and "No attachment table" not in cap
    assert "realised draw" in cap


def test_the_rule_rounds_list_is_the_disagreements():
    from engine.trace import load_trace
    from app_fixtures import REPO

    t = load_trace(REPO / "assets" / "traces" / "math-speed-reanchor.json")
    listed = views.rule_rounds(state_of(t))
    want = [d["round"] for d in analyses.disagreements(t)["disagree"]]
    assert want and [int(r) for r in re.findall(r"data-round='(\d+)'", listed)] == want
    assert f"{len(want)} of the 22 rounds with shifted blocks" in listed
    assert views.rule_rounds(state_of(real_trace(mode="dflash"))) == ""  # nothing to choose


def test_a_tree_round_says_what_its_shifted_blocks_added():
    t = real_trace("llama", "reanchor-tree", "earliest", "hi, j.", 40)
    st = state_of(t)
    found = analyses.tree_rounds(t)
    for i in range(len(t["rounds"])):
        cap = html.unescape(views.round_entry(st, i)[0])
        tr = analyses.tree_round(t, i)
        assert f"g(0)'s tree alone, same budget ({tr['alone_nodes']} nodes): {tr['alone']} accepted" in cap, cap
    listed = views.rule_rounds(st)
    assert "What the shifted blocks added" in listed
    assert [int(r) for r in re.findall(r"data-round='(\d+)'", listed)] == [r["round"] for r in found["changed"]]


def test_explore_controls_start_from_the_engines_app_defaults():
    """Issue 55, item 7: the page's run controls read their defaults from engine/options.py (one home), the run that
    shows shifted blocks at least cost: reanchor with the auto shifted cap (measured in options.py's comment)."""
    import app.__main__ as am
    from app.loader import ModelLoader
    from app.ui import build_ui
    from engine.options import DEFAULT_APP_MAX_NEW_TOKENS, DEFAULT_APP_MAX_SHIFTED, DEFAULT_APP_MODE, DEFAULT_RULE

    demo = build_ui(ModelLoader(am.parse_args(["--no-model"]), enabled=False))
    values = {c.elem_id: getattr(c, "value", None) for c in demo.blocks.values() if getattr(c, "elem_id", None)}
    assert (values["rx-mode"], values["rx-rule"], values["rx-shifted"], values["rx-max-new"]) == (
        DEFAULT_APP_MODE, DEFAULT_RULE, DEFAULT_APP_MAX_SHIFTED, DEFAULT_APP_MAX_NEW_TOKENS)
    assert (DEFAULT_APP_MODE, DEFAULT_APP_MAX_SHIFTED) == ("reanchor", "auto")


def test_compare_counterfactual_at_t_above_0_follows_the_realised_draw():
    """Compare at T=0.7 showed dashes: now each run's rounds are replayed along its realised draw, and say so. The
    run's own assembly along its own draw accepts what it accepted; dflash's, the baseline-alone length."""
    import json

    from app import analysis

    t = real_trace("llama", "reanchor", "earliest", "hi, j.", 48, 1, 0.7)
    fig, summary = analysis.counterfactual(t, "dflash", "earliest", "comparison's dflash / earliest")
    assert "unavailable" not in summary and summary["rounds"] == len(t["rounds"])
    assert "realised draw" in json.dumps(fig.layout.title.text)
    rows = analyses.counterfactual(t, "dflash", "earliest", sampled=True)
    assert [r["counterfactual"] for r in rows] == [analyses.baseline_accepted(r) for r in t["rounds"]]
    own = analyses.counterfactual(t, "reanchor", "earliest", sampled=True)
    assert [r["counterfactual"] for r in own] == [r["accepted"] for r in t["rounds"]]
    with pytest.raises(ValueError, match="T=0"):   # the analysis itself still refuses unless asked
        analyses.counterfactual(t, "dflash", "earliest")

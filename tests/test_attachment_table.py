"""engine.analyses.attachment_table and `python -m engine explain`: per round, each shifted block's sites, each
rule's choice and the drafts the round accepts under each rule, from the trace alone (no model)."""
from __future__ import annotations

import json

import pytest

from app_fixtures import real_trace
from engine import analyses
from engine.__main__ import main
from engine.options import RULES


@pytest.fixture(scope="module")
def trace():
    return real_trace("llama", "reanchor", "earliest", "hi, j.", 48)


def test_accepted_under_each_rule_is_the_counterfactuals(trace):
    """Every round, every rule: the table's accepted drafts are analyses.counterfactual's for that round, and the
    rule that ran accepts what the run accepted."""
    per_rule = {rule: analyses.counterfactual(trace, "reanchor", rule) for rule in RULES}
    shifted = 0
    for i, rec in enumerate(trace["rounds"]):
        table = analyses.attachment_table(trace, i)
        assert table["ran"] == "earliest" and table["rules"]["earliest"]["accepted"] == rec["accepted"]
        for rule in RULES:
            assert table["rules"][rule]["accepted"] == per_rule[rule][i]["counterfactual"], (i, rule)
        for b, row in zip(rec["shifted"], table["blocks"]):
            shifted += 1
            assert row["d"] == b["d"] and row["sites"] == b["sites"] and row["a_d"] == b["tokens"][0]
            assert row["native"] == rec["anchor_pos"] + b["d"]
            assert row["choice"]["earliest"] == b["attached"]      # the rule that ran chose what the trace records
            assert row["choice"]["all"] == b["sites"]
            assert row["choice"]["latest"] == b["sites"][-1:]
            assert row["choice"]["fixed"] == ([b["d"]] if b["d"] in b["sites"] else [])
    assert shifted > 10


def test_explain_prints_the_table_and_refuses_bad_rounds(trace, tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    i = next(k for k, r in enumerate(trace["rounds"]) if any(b["sites"] for b in r["shifted"]))
    assert main(["explain", str(path), "--round", str(i), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == analyses.attachment_table(trace, i)
    assert main(["explain", str(path), "--round", str(i)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"round {i} · anchor at position") and "earliest*" in out and "accepted" in out
    assert main(["explain", str(path), "--round", "999"]) == 2
    assert "round: must be between 0 and" in capsys.readouterr().err


def test_tree_traces_give_no_table():
    with pytest.raises(ValueError, match="tree"):
        analyses.attachment_table(real_trace("llama", "ddtree", "earliest", "hi, j.", 24), 1)

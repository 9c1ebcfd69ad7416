"""Issue 55 (the researcher's views): `python -m engine explain` on T>0 traces, across a whole trace (--rounds all)
and on tree rounds, each checked against a brute-force recomputation from the trace's own drafts."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from app_fixtures import REPO, real_trace
from engine import analyses
from engine.__main__ import main
from engine.options import RULES


@pytest.fixture(scope="module")
def sampled():
    """A T=0.7 trace of the tiny models (speculative sampling against each draft's own law)."""
    return real_trace("llama", "reanchor", "earliest", "hi, j.", 48, 1, 0.7)


@pytest.fixture(scope="module")
def greedy():
    return real_trace("llama", "reanchor", "earliest", "hi, j.", 48)


@pytest.fixture(scope="module")
def shipped():
    """A shipped example trace (the embedded target, T=0): rounds where the rules differ exist in it."""
    from engine.trace import load_trace

    return load_trace(REPO / "assets" / "traces" / "math-speed-reanchor.json")


def brute_counts(trace: dict, i: int, after: list[int], seed: int = 0) -> dict[str, int]:
    """Per rule, round i's accepted drafts recomputed by hand: every path (g(0), then each block at the sites the rule
    picks, the overlap token once), and the longest of them that `after` (what the run committed) follows. `random`
    draws as documented (counterfactual's own generator, seeded by the round)."""
    r = trace["rounds"][i]
    base, out = r["baseline"], {}
    for rule in RULES:
        rng = random.Random(seed * 1_000_003 + i)
        paths = [base]
        for b in sorted(r["shifted"], key=lambda b: b["d"]):
            sites = [t for t, tok in enumerate(base) if tok == b["tokens"][0]]
            picks = {"earliest": sites[:1], "latest": sites[-1:], "all": sites,
                     "fixed": [b["d"]] if b["d"] in sites else [],
                     "random": [rng.choice(sites)] if sites else []}[rule]
            paths += [base[: t + 1] + b["tokens"][1:] for t in picks]
        best = 0
        for p in paths:
            k = 0
            while k + 1 < len(p) and k < len(after) and p[k + 1] == after[k]:
                k += 1
            best = max(best, k)
        out[rule] = best
    return out


def committed_after(trace: dict, i: int) -> list[int]:
    toks = [t for r in trace["rounds"] for t in r["new_tokens"]]
    return toks[sum(len(r["new_tokens"]) for r in trace["rounds"][:i]):]


def test_sampled_trace_table_is_facts_and_the_realised_draw(sampled, tmp_path, capsys):
    """At T=0.7: sites and choices are the drafts' facts (the rule that ran chose what the trace records), the counts
    are how far each rule's trie follows the sampled text, and the rule that ran follows it exactly as far as the run
    accepted. The output says the counts are the realised draw's."""
    assert sampled["config"]["temperature"] == 0.7
    checked = 0
    for i, rec in enumerate(sampled["rounds"]):
        if not rec["shifted"]:
            continue
        table = analyses.attachment_table(sampled, i)
        assert table["sampled"] is True
        assert table["rules"]["earliest"]["accepted"] == rec["accepted"], i
        assert {k: v["accepted"] for k, v in table["rules"].items()} == brute_counts(sampled, i,
                                                                                   committed_after(sampled, i)), i
        for b, row in zip(rec["shifted"], table["blocks"]):
            assert row["choice"]["earliest"] == b["attached"] and row["sites"] == b["sites"]
            assert row["a_d_text"] == sampled["token_texts"][str(b["tokens"][0])]
        checked += 1
    assert checked > 5
    path = tmp_path / "t.json"
    path.write_text(json.dumps(sampled))
    i = next(k for k, r in enumerate(sampled["rounds"]) if r["shifted"])
    assert main(["explain", str(path), "--round", str(i)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"round {i} · anchor at position") and "realised draw" in out and "T>0" in out


@pytest.mark.parametrize("which", ["shipped", "greedy", "sampled"])
def test_rounds_all_lists_exactly_the_rounds_where_rules_differ(which, request, tmp_path, capsys):
    """--rounds all (and its --json) against the brute force over every round: the listed rounds are exactly those
    whose per-rule counts are not all equal, with those counts, and each listed block is one whose choices differ,
    its a_d as id and text."""
    trace = request.getfixturevalue(which)
    want = {}
    for i, r in enumerate(trace["rounds"]):
        if r["shifted"]:
            counts = brute_counts(trace, i, committed_after(trace, i))
            if len(set(counts.values())) > 1:
                want[i] = counts
    found = analyses.disagreements(trace)
    assert found["rounds"] == sum(bool(r["shifted"]) for r in trace["rounds"]) and found["sampled"] == (which == "sampled")
    got = {t["round"]: {k: v["accepted"] for k, v in t["rules"].items()} for t in found["disagree"]}
    assert got == want
    assert want or which != "shipped", "no round where the rules differ in the shipped trace: the test shows nothing"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    assert main(["explain", str(path), "--rounds", "all", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js == json.loads(json.dumps(found))
    for t in js["disagree"]:
        rec = trace["rounds"][t["round"]]
        assert t["blocks"] and all(len({tuple(c) for c in b["choice"].values()}) > 1 for b in t["blocks"])
        for b in t["blocks"]:
            tok = next(s["tokens"][0] for s in rec["shifted"] if s["d"] == b["d"])
            assert b["a_d"] == tok and b["a_d_text"] == trace["token_texts"][str(tok)]
    assert main(["explain", str(path), "--rounds", "all"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{len(want)} of {found['rounds']} rounds")
    assert [int(line.split()[1]) for line in out.splitlines() if line.startswith("round ")] == sorted(want)
    for t in js["disagree"]:
        for b in t["blocks"]:
            assert f"g({b['d']}) a_d {b['a_d_text']!r}" in out


def test_a_run_without_shifted_blocks_has_nothing_to_explain(tmp_path, capsys):
    path = tmp_path / "dflash.json"
    path.write_text(json.dumps(real_trace("llama", "dflash", "earliest", "hi, j.", 24)))
    for which in (["--round", "1"], ["--rounds", "all"]):
        assert main(["explain", str(path), *which]) == 2
        assert "a dflash run drafts no shifted blocks: there is no attachment to explain" in capsys.readouterr().err


def test_explain_needs_one_of_round_or_rounds(greedy, tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(greedy))
    for args, says in (([], "one of the arguments --round --rounds is required"),
                       (["--rounds", "some"], "--rounds: invalid choice: 'some'"),
                       (["--round", "1", "--rounds", "all"], "not allowed with argument")):
        with pytest.raises(SystemExit) as e:
            main(["explain", str(path), *args])
        assert e.value.code == 2 and says in capsys.readouterr().err


def test_tree_rounds_say_what_the_shifted_blocks_added(tmp_path, capsys):
    """A reanchor-tree trace: per round, the run's accepted length against the tree g(0) alone would have grown (its
    recorded trie.ddtree) walked along the committed text. Checked where the answer is known without the function's
    walk: a round whose trie holds no shifted node is the g(0)-alone tree itself (gain 0, nothing displaced), and the
    run's own tree walked the same way accepts what the run accepted."""
    trace = real_trace("llama", "reanchor-tree", "earliest", "hi, j.", 40)
    found = analyses.tree_rounds(trace)
    assert found["compared"] == len(trace["rounds"])
    no_shifted = 0
    for i, r in enumerate(trace["rounds"]):
        t = analyses.tree_round(trace, i)
        assert t["accepted"] == r["accepted"] and t["gain"] == r["accepted"] - t["alone"]
        own = analyses.tree_alone({**r, "trie": {**r["trie"], "ddtree": r["trie"]}}, committed_after(trace, i))
        assert own["accepted"] == r["accepted"] and own["displaced_nodes"] == 0
        if not any(r["trie"]["block"][1:]):
            no_shifted += 1
            assert t["gain"] == 0 and t["displaced_nodes"] == 0 and t["shifted_nodes"] == 0, i
    assert found["changed"] == [t for t in (analyses.tree_round(trace, i) for i in range(len(trace["rounds"])))
                                if t["gain"]]
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(trace))
    assert main(["explain", str(path), "--round", "1"]) == 0
    assert "g(0)'s tree alone, same budget" in capsys.readouterr().out
    assert main(["explain", str(path), "--rounds", "all"]) == 0
    assert capsys.readouterr().out.startswith(f"{len(trace['rounds'])} of {len(trace['rounds'])} rounds compared")
    dd = real_trace("llama", "ddtree", "earliest", "hi, j.", 24)
    assert "no shifted blocks" in analyses.tree_text(analyses.tree_round(dd, 1))



def test_explain_imports_no_torch(greedy, tmp_path):
    """The command reads a trace on a machine without the model stack: it imports no torch. (While engine/__main__'s
    module-level imports still load torch for the other subcommands, the check cannot be made: skipped, saying so.)"""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(greedy))
    top = subprocess.run([sys.executable, "-c", "import sys, engine.__main__; print('torch' in sys.modules)"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    if top == "True":
        pytest.skip("engine/__main__ imports torch at module level (its imports are made lazy elsewhere)")
    code = ("import sys, runpy\nsys.argv = ['engine', 'explain', sys.argv[1], '--rounds', 'all']\n"
            "try:\n    runpy.run_module('engine', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO TORCH')\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("NO TORCH") and "rounds with shifted blocks" in out.stdout

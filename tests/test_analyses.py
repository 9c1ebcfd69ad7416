"""engine/analyses.py on hand-checkable rounds (built with the engine's own attach/trie code) and
on real traces from tiny random models."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import analyses as A
from engine.attach import proposal
from engine.options import TREE_MODES
from engine.trace import round_record
from engine.trie import accept


def make_round(baseline, shifted, truth, mode="reanchor", rule="earliest", max_nodes=None) -> dict:
    """A round record as the engine writes it (engine.trace.round_record), verified by a target whose
    top-1 at depth k is truth[k+1] whatever the prefix (so post-rejection drafts can still agree)."""
    paths, info, trie = proposal(baseline, shifted, mode, rule, random.Random(0), max_nodes=max_nodes)
    top1 = [truth[d + 1] for d in trie.depths]
    chain, bonus = accept(trie, lambda n: top1[n])
    new = [trie.tokens[n] for n in chain[1:]] + [bonus]
    return round_record(0, 5, len(baseline), baseline, shifted, info, paths, trie, chain, bonus, new, top1, 0,
                        1.0, 2.0, 3.0)


TRUTH = list(range(10, 30))
BASE = [10, 11, 99, 13, 99]                       # draft 2 rejected; 13 right again, 99 wrong
SHIFTED = {1: [99, 13, 14, 15, 16],               # matches at t=2 and t=4: shifted only, multiple
           2: [11, 12, 13, 14, 15],               # matches at t=1 only: shifted only; the winner
           3: [13, 14, 15, 16, 17],               # matches at t=3 == d: aligned
           4: [55, 1, 2, 3, 4]}                   # no match: discarded


def trace(*rounds) -> dict:
    return {"rounds": list(rounds)}


def test_hand_round_reanchor():
    r = make_round(BASE, SHIFTED, TRUTH)
    assert r["accepted"] == 5                      # 11 12 13 14 15 along g(2) attached at t=1
    assert A.baseline_accepted(r) == 1
    assert A.acceptance_histogram(trace(r)) == {6: 1} and A.tau(trace(r)) == 6
    assert A.full_block_share(trace(r)) == 0
    assert A.post_rejection_agreement(trace(r)) == {"agree": 1, "total": 2, "rate": 0.5}
    al = A.alignment_stats(trace(r))
    assert (al["blocks"], al["matched"], al["shifted_only"], al["multiple"]) == (4, 3, 2, 1)
    assert al["shifted_only_rate"] == pytest.approx(2 / 3) and al["multiple_rate"] == pytest.approx(1 / 3)
    g = A.gain_by_offset(trace(r))
    assert g["by_d"] == {"2": 4} and (g["extra"], g["in_block"], g["beyond"]) == (4, 3, 1)
    assert A.round_gain(r) == (2, 4)
    r0 = {**make_round([10, 50, 51, 52, 53], {}, TRUTH, mode="dflash"), "retained": 4}
    g = A.gain_by_offset(trace(r0, r, r))          # 2 of 3 rounds gain, 4 drafts each
    assert (g["gained_rounds"], g["extra_per_round"]) == (2, 8 / 3)
    assert g["gained_share"] == pytest.approx(2 / 3) and g["per_gained_round"] == 4
    z = A.round_sizes(trace(r0, r))                # r drafted 4 blocks; r0 left 4 states
    assert (z["shifted_drafted"], z["shifted_available"]) == (2, 2)
    assert z["trie_nodes"] == (5 + len(r["trie"]["tokens"])) / 2 and z["verify_ms"] == 2.0


def test_hand_round_fixed_offset_loses_the_gain():
    r = make_round(BASE, SHIFTED, TRUTH, mode="shifted-fixed")
    assert [p["source"] for p in r["paths"]] == [0, 3]   # only d=3 matches at t=d
    assert r["accepted"] == 1 and A.gain_by_offset(trace(r))["extra"] == 0
    # alignment is a property of the drafted blocks, not of the rule
    assert A.alignment_stats(trace(r))["matched"] == 3


def test_full_block_and_pooling():
    full = make_round([10, 11, 12, 13], {}, TRUTH, mode="dflash")
    zero = make_round([10, 50, 51, 52], {}, TRUTH, mode="dflash")
    assert full["accepted"] == 3 and zero["accepted"] == 0
    assert A.full_block_share(trace(full, zero)) == 0.5
    assert A.full_block_share([trace(full), trace(zero), trace(zero)]) == pytest.approx(1 / 3)
    assert A.acceptance_histogram([trace(full), trace(zero)]) == {1: 1, 4: 1}
    assert A.tau([trace(full), trace(zero)]) == 2.5
    # no rejection: nothing after it; all rejected: 51 vs 12, 52 vs 13 under rejected prefixes
    assert A.post_rejection_agreement(trace(full))["total"] == 0
    assert A.post_rejection_agreement(trace(zero)) == {"agree": 0, "total": 2, "rate": 0.0}


def test_earliest_win_rate_rule_all():
    r1 = make_round(BASE, SHIFTED, TRUTH, rule="all")
    assert [(p["source"], p["site"]) for p in r1["paths"]] == [(0, None), (1, 2), (1, 4), (2, 1), (3, 3)]
    # truth 20 30 21 22...; g(1) matches at t=0 (path 20 21.., 0 accepted) and t=2 (20 30 20 21.., 1)
    truth2 = [20, 30, 21, 22, 23, 24, 25, 26, 27, 28]
    r2 = make_round([20, 30, 20, 9], {1: [20, 21, 22, 23]}, truth2, rule="all")
    assert A.greedy_accepted(r2, r2["paths"][1]["tokens"]) == 0
    assert A.greedy_accepted(r2, r2["paths"][2]["tokens"]) == 1
    w = A.earliest_win_rate([trace(r1), trace(r2)])
    # multi-site groups: r1 d=1 (tie at 1 accepted: win), r2 d=1 (later site better: loss)
    assert (w["groups"], w["wins"], w["rate"]) == (2, 1, 0.5)
    assert (w["groups_all"], w["wins_all"]) == (4, 3)
    # single-site rules leave no multi-site group
    assert A.earliest_win_rate(trace(make_round(BASE, SHIFTED, TRUTH)))["groups"] == 0


def test_node_cap_truncates_paths_safely():
    r = make_round(BASE, SHIFTED, TRUTH, max_nodes=3)   # the baseline itself is cut after 3 nodes
    assert len(r["trie"]["tokens"]) == 3
    assert A.path_nodes(r, BASE) == [0, 1, 2]
    # draft 3 is judged by node 2's top-1; draft 4 would need node 3, which was never verified
    assert A.post_rejection_agreement(trace(r)) == {"agree": 1, "total": 1, "rate": 1.0}
    A.summarize(trace(r))


def test_empty():
    s = A.summarize([])
    assert s["rounds"] == 0 and s["tau"] is None and s["full_block_share"] is None
    assert s["post_rejection_agreement"]["rate"] is None and s["alignment"]["matched"] == 0


@pytest.fixture(scope="module")
def real_traces():
    from tiny import tiny_models

    from engine.decode import DecodeConfig, Engine

    eng = Engine(tiny_models())
    out = {}
    for mode, rule in (("dflash", "earliest"), ("reanchor", "earliest"), ("reanchor", "all"),
                       ("extension", "earliest")):
        out[f"{mode}-{rule}"] = [eng.generate(p, DecodeConfig(mode=mode, rule=rule, max_new_tokens=40))
                                 for p in ("abc dea, fig?", "jig a bad cafe.")]
    return out


def test_real_traces_invariants(real_traces):
    for name, trs in real_traces.items():
        rounds = list(A.rounds_of(trs))
        assert rounds, name
        h = A.acceptance_histogram(trs)
        assert sum(h.values()) == len(rounds)
        assert sum(k * v for k, v in h.items()) / len(rounds) == pytest.approx(A.tau(trs))
        for t in trs:
            assert A.tau(t) == pytest.approx(t["stats"]["tau"])
        extra = 0
        for r in rounds:
            # T=0: the target's top-1 walk along each path reproduces the engine's acceptance
            assert r["accepted"] == max(A.greedy_accepted(r, p["tokens"]) for p in r["paths"])
            assert A.baseline_accepted(r) == A.greedy_accepted(r, r["baseline"])
            d, n = A.round_gain(r)
            extra += n
            if n:
                from engine.trace import token_sources
                assert token_sources(r)[r["accepted"] - 1] == f"d{d}"
        g = A.gain_by_offset(trs)
        assert g["extra"] == extra == g["in_block"] + g["beyond"]
        s = A.summarize(trs)
        assert 0 <= (s["full_block_share"] or 0) <= 1
        pra = s["post_rejection_agreement"]
        assert 0 <= pra["agree"] <= pra["total"]
        al = s["alignment"]
        assert al["blocks"] == sum(len(r["shifted"]) for r in rounds)
        assert al["shifted_only"] <= al["matched"] and al["multiple"] <= al["matched"]
    for t in real_traces["reanchor-earliest"]:  # unbounded: every retained state is drafted
        for prev, r in zip(t["rounds"], t["rounds"][1:]):
            assert len(r["shifted"]) == prev["retained"] or r["block_size"] < 2
    assert A.alignment_stats(real_traces["dflash-earliest"])["blocks"] == 0
    assert A.gain_by_offset(real_traces["dflash-earliest"])["extra"] == 0
    assert A.alignment_stats(real_traces["reanchor-earliest"])["matched"] > 0
    w = A.earliest_win_rate(real_traces["reanchor-all"])
    assert w["groups"] <= w["groups_all"] and w["wins"] <= w["groups"] and w["wins_all"] <= w["groups_all"]
    # extension only adds tokens beyond the native block
    assert A.gain_by_offset(real_traces["extension-earliest"])["in_block"] == 0


def _as_trace(r: dict, truth: list[int], mode: str = "reanchor", rule: str = "earliest") -> dict:
    """One hand round as a T=0 trace whose committed text continues with the truth."""
    return {"config": {"mode": mode, "rule": rule, "temperature": 0.0},
            "rounds": [{**r, "new_tokens": truth[1:]}]}


def test_counterfactual_hand_round():
    t = _as_trace(make_round(BASE, SHIFTED, TRUTH), TRUTH)
    got = {(m, ru): A.counterfactual(t, m, ru)[0]["counterfactual"]
           for m, ru in (("reanchor", "earliest"), ("dflash", "earliest"), ("shifted-fixed", "earliest"),
                         ("in-block", "earliest"), ("extension", "earliest"), ("ar", "earliest"))}
    # g(2) at t=1 gives 5; baseline alone 1; fixed keeps only g(3) at t=3 (rejected early): 1;
    # in-block cuts g(2)'s path at the native block (4 drafts); extension grafts after a rejected baseline: 1
    assert got == {("reanchor", "earliest"): 5, ("dflash", "earliest"): 1, ("shifted-fixed", "earliest"): 1,
                   ("in-block", "earliest"): 4, ("extension", "earliest"): 1, ("ar", "earliest"): 0}
    # earliest vs latest: g(1) matches at t=0 and t=2; only the later site follows the truth (the
    # baseline alone accepts 2)
    truth2 = [20, 30, 20, 21, 22, 23, 24, 25]
    t2 = _as_trace(make_round([20, 30, 20, 9], {1: [20, 21, 22, 23]}, truth2, rule="all"), truth2, rule="all")
    assert A.counterfactual(t2, "reanchor", "earliest")[0]["counterfactual"] == 2
    assert A.counterfactual(t2, "reanchor", "latest")[0]["counterfactual"] == 5
    # tau counts committed tokens: the hand round's (the whole truth: 7), the replay's accepted + the bonus
    assert A.counterfactual(t2, "reanchor", "all")[0] == {"round": 0, "actual": 5, "counterfactual": 5,
                                                          "cut": False, "tokens": 7, "counterfactual_tokens": 6}
    s = A.counterfactual_summary(A.counterfactual(t2, "reanchor", "earliest"))
    assert (s["worse"], s["better"], s["extra_drafts"], s["tau"], s["counterfactual_tau"]) == (1, 0, -3, 7, 3)


def test_counterfactual_refuses_what_a_trace_cannot_answer():
    t = _as_trace(make_round(BASE, SHIFTED, TRUTH), TRUTH)
    with pytest.raises(ValueError, match="T=0"):
        A.counterfactual({**t, "config": {"mode": "reanchor", "temperature": 0.7}}, "dflash", "earliest")
    with pytest.raises(ValueError, match="no shifted blocks"):
        A.counterfactual({**t, "config": {"mode": "dflash", "temperature": 0}}, "reanchor", "earliest")
    with pytest.raises(ValueError, match="unknown"):
        A.counterfactual(t, "reanchor", "nearest")


def test_counterfactual_of_a_runs_own_settings_is_what_it_did():
    """On real T=0 traces (tiny random Llama), replaying a run's own (mode, rule) on its rounds gives
    its accepted lengths, and dflash gives the baseline-alone lengths."""
    from app_fixtures import CONFIGS, real_trace

    checked = differs = 0
    for mode, rule in CONFIGS:
        t = real_trace("llama", mode, rule, "hi, j.", 48)
        if rule == "random":
            continue  # the replay draws its own random sites
        if mode in TREE_MODES:  # a tree's other branches come from the drafter's ranking, not in the trace
            with pytest.raises(ValueError, match="tree"):
                A.counterfactual(t, mode, rule)
            continue
        own, base = A.counterfactual(t, mode, rule), A.counterfactual(t, "dflash", "earliest")
        assert len(own) == len(t["rounds"])
        for o, b, r in zip(own, base, t["rounds"]):
            if not o["cut"]:
                checked += 1
                assert o["counterfactual"] == r["accepted"], (mode, rule, o)
            if not b["cut"]:
                assert b["counterfactual"] == A.baseline_accepted(r), (mode, rule, b)
                differs += b["counterfactual"] != r["accepted"]
    assert checked > 100 and differs > 0  # shifted blocks made a difference somewhere


def test_counterfactual_under_an_auto_node_budget():
    """A run with "auto" trie nodes records each round's node budget: the replay cuts its trie there, as a
    fixed cap of the same size would (the string "auto" reached build_trie: a TypeError). A round
    without its budget, or a cap that is none, is refused by name."""
    import copy

    from app_fixtures import tiny_engine
    from engine.decode import DecodeConfig
    from engine.decode.cost import budget_for

    eng = tiny_engine("llama")
    cfg = DecodeConfig(mode="reanchor", rule="earliest", max_new_tokens=40, max_trie_nodes="auto")
    t = eng.generate("hi, j.", cfg, budget_for(eng, cfg))
    assert t["config"]["max_trie_nodes"] == "auto" and all("nodes" in r["budget"] for r in t["rounds"])
    assert len(A.counterfactual(t, "dflash", "earliest")) == len(t["rounds"])
    for n in (2, 5):
        same = copy.deepcopy(t)
        for r in same["rounds"]:
            r["budget"]["nodes"] = n
        fixed = {**same, "config": {**same["config"], "max_trie_nodes": n}}
        rows = A.counterfactual(same, "reanchor", "earliest")
        assert rows == A.counterfactual(fixed, "reanchor", "earliest")
        assert max(row["counterfactual"] for row in rows) <= n - 1  # n nodes, the anchor included
    del same["rounds"][3]["budget"]
    with pytest.raises(ValueError, match=r"round 3 does not record its nodes"):
        A.counterfactual(same, "dflash", "earliest")
    with pytest.raises(ValueError, match=r"config.max_trie_nodes: 'many' is not a whole number"):
        A.counterfactual({**t, "config": {**t["config"], "max_trie_nodes": "many"}}, "dflash", "earliest")


def test_tau_counts_the_tokens_each_round_commits():
    """tau * rounds is the tokens the rounds committed, also where the run's end cut a round (room for
    its drafts but not the bonus, or drafts past a stop token), in the run's stats and the analyses."""
    from engine.decode import DecodeConfig, Engine
    from tiny import tiny_models
    cut = 0
    for seed in (1, 4):
        eng = Engine(tiny_models("llama", seed, block_size=4, sharpen=3.0))
        ids = eng.encode_prompt("ab c")
        for n in range(2, 8):
            run = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=n, ignore_eos=True))
            run.finish()
            committed = sum(len(r["new_tokens"]) for r in run.rounds)
            stats = run.result["stats"]
            assert stats["tau"] * stats["rounds"] == pytest.approx(committed) == n - 1
            assert A.tau([run.trace()]) == pytest.approx(stats["tau"])
            cut += any(len(r["new_tokens"]) < r["accepted"] + 1 for r in run.rounds)
    assert cut, "no round was cut: the test proves little"


def test_replay_tau_counts_the_tokens_each_round_commits():
    """The replay's tau of the run is the run's tau (tokens committed a round) also where the run's end cut
    its last round (max_new_tokens left no room for the bonus; a stop token dropped it), and a replayed
    round commits no more than the run did from the same state. Replaying a run's own assembly gives its
    tau (it counted accepted + 1: 1.6 for a run of tau 1.4)."""
    from app_fixtures import real_trace, stop_cut_trace

    ends = {"max_new_tokens": real_trace("llama", "reanchor", "earliest", "hi, j.", 8),
            "stop token": stop_cut_trace("reanchor", "earliest")}
    for end, t in ends.items():
        last = t["rounds"][-1]
        assert len(last["new_tokens"]) < last["accepted"] + 1, end  # the run's end cut its last round
        for mode in ("reanchor", "dflash", "in-block"):
            rows = A.counterfactual(t, mode, "earliest")
            s = A.counterfactual_summary(rows)
            assert s["tau"] == t["stats"]["tau"] == A.tau(t), (end, mode, s)
            left = len(t["output_ids"]) - 1
            for row, r in zip(rows, t["rounds"]):
                assert row["tokens"] == len(r["new_tokens"])
                assert row["counterfactual_tokens"] == min(row["counterfactual"] + 1, left), (end, mode, row)
                left -= len(r["new_tokens"])
        own = A.counterfactual_summary(A.counterfactual(t, "reanchor", "earliest"))
        assert own["counterfactual_tau"] == own["tau"] and own["same"] == own["rounds"], (end, own)


def test_tree_sources_hand_rounds():
    """tree_sources on two hand-built reanchor-tree rounds (tests/test_tree.py hand_round: g(0) = 7 1 2 3,
    g(1) = 2 9 10 11 attached at site 2, ten nodes: 1 2 3, g(0)'s rank-1 6 and 8 and their children, and
    g(1)'s 9 10 11, where g(0) alone would have had 5 and its children). The target follows g(1) past g(0)'s
    block in one round and takes 5, a node g(1)'s nodes displaced, in the other (the run ends there)."""
    from helpers import hand_round

    far, near = hand_round(11, [1, 2, 9, 10, 11, 20]), hand_round(11, [5, 2])
    assert far["accepted"] == 5 and near["accepted"] == 0
    s = A.tree_sources([{"rounds": [far]}, {"rounds": [near]}])
    assert s["rounds"] == 2
    assert {k: (c["nodes"], c["accepted"]) for k, c in s["kinds"].items()} == \
        {"baseline": (8, 2), "baseline rank>0": (6, 0), "shifted": (6, 3)}
    assert s["shifted_token_share"] == pytest.approx(3 / 5)
    assert s["horizon"] == {"rounds": 2, "full_block_rounds": 1, "beyond_rounds": 1, "beyond_share": 0.5,
                            "beyond_tokens": 2}
    d = s["displaced"]   # g(0) alone: 1 2 in the first round (no 9), 5 in the second
    assert (d["rounds"], d["better"], d["worse"], d["displaced_accepted_rounds"]) == (2, 1, 1, 1)
    assert d["tau"] == pytest.approx((6 + 1) / 2) and d["ddtree_tau"] == pytest.approx((3 + 1) / 2)
    step = s["calibration"]["step"]
    assert step["baseline rank>0"]["2"] == {"nodes": 1, "accepted": 0, "rate": 0.0, "q": pytest.approx(0.4)}
    assert s["equal_score"]["shifted_rate"] == pytest.approx(3 / 6)


def test_tree_sources_on_tiny_model_traces():
    """On real reanchor-tree traces (tiny random models): the kinds count every verified node and every
    accepted draft once; the replayed g(0)-alone tree of a run's own rounds gives the run's own tau."""
    from engine.decode import DecodeConfig, Engine
    from tiny import tiny_models

    eng = Engine(tiny_models("llama", 3, block_size=5))
    trs = [eng.generate(p, DecodeConfig(mode="reanchor-tree", max_new_tokens=24, max_trie_nodes=9, ignore_eos=True))
           for p in ("ab", "c a b")]
    s = A.tree_sources(trs)
    rounds = list(A.rounds_of(trs))
    assert sum(c["nodes"] for c in s["kinds"].values()) == sum(len(r["trie"]["tokens"]) - 1 for r in rounds)
    assert sum(c["accepted"] for c in s["kinds"].values()) == sum(r["accepted"] for r in rounds)
    assert s["displaced"]["rounds"] == len(rounds) and s["displaced"]["tau"] == pytest.approx(A.tau(trs))
    assert s["displaced"]["better"] + s["displaced"]["worse"] + s["displaced"]["same"] == len(rounds)
    # retention: the retained first node is one of the last accepted node's rejected children, so the best
    # child matches the next g(0) at least as often as g(1) did (whose anchor is that node's target token)
    # the recorded g(0)-alone tree is validated like the trie: a parent after its child is named
    import copy
    from engine.trace import TraceError, validate_trace
    bad = copy.deepcopy(trs[0])
    validate_trace(bad)
    bad["rounds"][0]["trie"]["ddtree"]["parents"][1] = 3
    with pytest.raises(TraceError, match=r"rounds\[0\]\.trie\.ddtree\.parents\[1\]"):
        validate_trace(bad)
    ret = s["retention"]
    assert ret["rounds"] > 0 and ret["g1_matched"] > 0
    assert ret["g1_matched_share"] <= ret["best_child_share"] and ret["rejected_children_per_round"] >= 1

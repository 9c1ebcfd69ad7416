"""engine/bench/siblings.py: the upper bound of re-anchoring from every rejected child (issue 40), on the embedded
target and its shipped DFlash drafter (the tiny random drafters draft one token over and over, whatever their
context: a check of their drafts could not fail).

The bound stands on three pieces, each checked against the engine's own run: the watched run is the run; the
state kept before each round drafts that round's g(0) again; a child's block drafted from it is the block the
engine drafts when ReAnchor retains that child (reanchor-tree's g(1)). And its arithmetic: the best path of a
round's own tree agrees with the greedy output exactly as far as the round accepted."""
from __future__ import annotations

import pytest
import torch

from engine.bench.siblings import child_block, sibling_counts, summary, watched_run
from engine.decode import DecodeConfig

PROMPTS = ["Write a Python function that returns the sum of the squares of a list of numbers.",
           "What is 17 times 23? Explain step by step."]


@pytest.fixture(scope="module")
def runs():
    from engine.decode import Engine
    from engine.models.load import load_models
    from helpers import embedded_or_skip

    embedded_or_skip()
    eng = Engine(load_models(None, "default", "cpu", "float32"))
    cfg = DecodeConfig(mode="reanchor-tree", max_new_tokens=40, ignore_eos=True, max_trie_nodes=16)
    return eng, cfg, [(eng.encode_prompt(p), *watched_run(eng, eng.encode_prompt(p), cfg)) for p in PROMPTS]


def test_the_watched_run_is_the_run_and_its_states_draft_each_round_again(runs):
    eng, cfg, got = runs
    assert "verify" not in vars(eng)   # the instance's verify is the class's again
    for ids, recs, before, feats, out in got:
        plain = eng.run(ids, cfg)
        plain.finish()
        assert out[len(ids):] == plain.result["output_ids"]
        assert [r["trie"]["tokens"] for r in recs] == [r["trie"]["tokens"] for r in plain.rounds]
        assert [f.shape[0] for f in feats] == [len(r["trie"]["tokens"]) for r in recs]
        for r, (rec, b) in enumerate(zip(recs, before)):
            assert b.x == out[: rec["anchor_pos"] + 1]
            if rec["block_size"] < 2:
                continue
            with torch.inference_mode():
                d = eng.draft(b.ctx.copy(), b.ctx_new, b.ctx_new[:0], [rec["anchor"]], rec["anchor_pos"],
                              rec["block_size"], 0.0, None, True)
            assert d.tokens[0] == rec["baseline"], r


def test_a_childs_block_is_the_block_reanchor_drafts_when_it_retains_that_child(runs):
    """Where reanchor-tree drafted g(1) in round r+1, it re-anchored from a rejected child of round r's last
    accepted node: the bound's draft from that child (its features, its target token) is g(1) token for token."""
    eng, _, got = runs
    checked = 0
    for ids, recs, before, feats, out in got:
        for r in range(len(recs) - 1):
            rec, nxt = recs[r], recs[r + 1]
            g1 = next((b for b in nxt["shifted"] if b["d"] == 1), None)
            if g1 is None:
                continue
            tokens, parents = rec["trie"]["tokens"], rec["trie"]["parents"]
            u = rec["accepted_nodes"][-1]
            kids = [v for v in range(len(tokens)) if parents[v] == u and rec["target_top1"][v] == g1["tokens"][0]]
            assert kids, r
            b = before[r + 1]
            drafts = [child_block(eng, b, feats[r][v: v + 1], g1["tokens"][0], nxt["anchor_pos"], nxt["block_size"])
                      for v in kids]
            assert g1["tokens"] in drafts, (r, g1["tokens"], drafts)
            checked += 1
    assert checked >= 3, checked


def test_the_bound_counts_what_each_round_accepted_and_never_less(runs):
    eng, _, got = runs
    total = None
    for ids, recs, before, feats, out in got:
        c = sibling_counts(eng, recs, before, feats, out)
        assert c["own_tree_agrees"] == c["rounds"] > 0   # the truth is aligned with each round's positions
        assert c["accepted"] == sum(r["accepted"] for r in recs[1:] if r["block_size"] >= 2)
        assert c["bound"] >= c["bound_first_child"] >= c["accepted"]
        total = c if total is None else {k: total[k] + v for k, v in c.items()}
    s = summary(total)
    assert s["tau_bound"] >= s["tau"] > 1.0

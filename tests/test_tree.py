"""Draft trees (engine/tree.py): the heap returns exactly the N best prefixes (against brute force),
shifted blocks hang under their sites and merge with the baseline, and the tree modes on real (tiny)
models stay within their node budget and accept branches a chain would not have had."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from engine.decode import DecodeConfig, Engine
from engine.tree import Source, best_first, tree_proposal
from helpers import BASE, RANKED0, RANKED1, SHIFTED, hand_round
from tiny import tiny_models


def ranked_lists(rng: random.Random, positions: int, k: int, vocab: int) -> list[list[tuple[int, float]]]:
    """Random distributions over a small vocabulary: the k best (token, log p) per position, best first."""
    out = []
    for _ in range(positions):
        w = [rng.random() ** 3 for _ in range(vocab)]
        z = sum(w)
        lp = sorted(((math.log(x / z), t) for t, x in enumerate(w)), reverse=True)[:k]
        out.append([(t, x) for x, t in lp])
    return out


def all_prefixes(sources: list[Source], max_depth: int) -> dict[tuple[int, ...], float]:
    """Every token path any source can produce, with its best score (log w): brute force."""
    best: dict[tuple[int, ...], float] = {}
    base = sources[0]
    chain = [base.top[j][0] for j in range(len(base.top))]          # g(0)'s rank-0 prefix

    def walk(src: Source, prefix: tuple[int, ...], score: float) -> None:
        for ranks in itertools.chain.from_iterable(
                itertools.product(*(range(len(src.top[j])) for j in range(n))) for n in range(1, len(src.top) + 1)):
            toks, sc = list(prefix), score
            for j, r in enumerate(ranks):
                tok, lq = src.top[j][r]
                toks.append(tok)
                sc += lq
                if len(toks) - 1 <= max_depth:
                    best[tuple(toks)] = max(best.get(tuple(toks), -1e9), sc)

    walk(base, (7,), 0.0)
    for src in sources[1:]:
        prefix = (7,) + tuple(t for t, _ in chain[: src.site])
        walk(src, prefix, sum(lq for _, lq in chain[: src.site]))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_heap_returns_the_best_prefixes(seed):
    rng = random.Random(seed)
    vocab, positions, k = 4, 3, 3
    sources = [Source(0, 0, ranked_lists(rng, positions, k, vocab))]
    for d in range(1, rng.randint(1, 3)):   # shifted blocks under the baseline's rank-0 prefix
        sources.append(Source(d, rng.randint(0, positions - 1), ranked_lists(rng, positions, k, vocab)))
    max_depth = rng.randint(2, 5)
    universe = all_prefixes(sources, max_depth)
    for budget in (1, 3, 7, 15, len(universe)):
        tree = best_first(7, sources, budget, max_depth)
        got = {tuple(tree.tokens[n] for n in tree.path(i)) for i in range(1, len(tree))}
        want = sorted(universe, key=lambda p: -universe[p])[:budget]
        assert got == set(want), (seed, budget)
        assert len(got) == len(tree) - 1 == min(budget, len(universe))    # merged nodes cost no budget
        for i in range(1, len(tree)):     # parents first, depths and scores consistent
            p = tree.parents[i]
            assert p < i and tree.depths[i] == tree.depths[p] + 1
            assert tree.scores[i] == pytest.approx(universe[tuple(tree.tokens[n] for n in tree.path(i))])


def test_shifted_branch_hangs_under_its_site_and_merges():
    lp = math.log
    base = Source(0, 0, [[(5, lp(.9)), (6, lp(.1))], [(8, lp(.6)), (9, lp(.4))], [(1, lp(.5)), (2, lp(.5))]])
    shifted = Source(2, 1, [[(9, lp(.8)), (3, lp(.2))], [(4, lp(.9)), (1, lp(.1))]])   # hangs under "5"
    tree = best_first(7, [base, shifted], 20, 10)
    paths = {tuple(tree.tokens[n] for n in tree.path(i)): i for i in range(len(tree))}
    nine = paths[(7, 5, 9)]               # proposed by both: the baseline (rank 1) and g(2) (rank 0)
    assert tree.sources[nine] == 1 and tree.also[nine] == [0] and tree.scores[nine] == pytest.approx(lp(.9 * .8))
    assert (7, 5, 9, 4) in paths          # g(2)'s continuation grows below the merged node
    assert (7, 6, 3) not in paths         # a shifted block only hangs under g(0)'s rank-0 prefix


def test_a_block_deeper_than_a_node_another_block_made_first_still_hangs():
    """g(1) at the anchor proposes g(0)'s own next token with a higher q, so it makes that node
    first; the baseline chain must still go on through it, and g(2), attached deeper, hang there."""
    lp = math.log
    base = Source(0, 0, [[(5, lp(.6)), (9, lp(.2))], [(6, lp(.6)), (9, lp(.2))], [(7, lp(.6)), (9, lp(.2))]])
    first = Source(1, 0, [[(5, lp(.95)), (9, lp(.02))], [(11, lp(.5)), (9, lp(.2))]])
    deep = Source(2, 2, [[(20, lp(.99)), (9, lp(.005))], [(21, lp(.99)), (9, lp(.005))]])
    tree = best_first(1, [base, first, deep], 40, 10)
    paths = {tuple(tree.tokens[n] for n in tree.path(i)) for i in range(len(tree))}
    assert (1, 5, 6, 20, 21) in paths


def test_tree_proposal_facts_align_with_the_trie():
    rng = random.Random(3)
    ranked = [ranked_lists(rng, 5, 4, 6) for _ in range(3)]
    baseline = [7] + [pos[0][0] for pos in ranked[0]]
    shifted = {1: [baseline[2]] + [pos[0][0] for pos in ranked[1]], 2: [99] + [pos[0][0] for pos in ranked[2]]}
    paths, info, trie, facts = tree_proposal(baseline, shifted, ranked, "reanchor-tree", "earliest",
                                             random.Random(0), 9, 12)
    assert len(trie) == 12 and trie.path_nodes[0] == list(range(len(trie.path_nodes[0])))
    assert info[1]["attached"] == [baseline.index(baseline[2])] and info[2]["attached"] == []  # g(2): no site
    assert set(facts) == {"block", "rank", "prob", "score", "ddtree"}   # ddtree: the round's, g(0) alone
    assert all(len(facts[k]) == len(trie) for k in ("block", "rank", "prob", "score"))
    for n in range(1, len(trie)):
        src = facts["block"][n]
        block_pos = trie.depths[n] - (0 if src == 0 else info[src]["attached"][0]) - 1
        tok, lq = ranked[0 if src == 0 else src][block_pos][facts["rank"][n]]
        assert tok == trie.tokens[n] and facts["prob"][n] == pytest.approx(math.exp(lq), abs=1e-6)


@pytest.mark.parametrize("mode", ["ddtree", "reanchor-tree"])
def test_tree_modes_keep_the_budget_and_use_branches(mode):
    """On tiny random models: every round verifies at most its node budget, and over a few prompts the
    target takes a branch that is not the drafter's first choice (what a chain never offers)."""
    branches = 0
    for seed, prompt in enumerate(["ab", "c a b", "bbb aa"]):
        eng = Engine(tiny_models("llama", seed, block_size=5))
        for nodes in (3, 9):
            run = eng.run(eng.encode_prompt(prompt), DecodeConfig(mode=mode, max_new_tokens=16, max_trie_nodes=nodes,
                                                                  ignore_eos=True))
            for r in run:
                assert len(r["trie"]["tokens"]) <= nodes
                branches += sum(r["trie"]["rank"][n] > 0 for n in r["accepted_nodes"][1:])
    assert branches > 0


def test_node_budget_follows_the_hardware():
    """choose_nodes: free verification takes every node worth anything; a verify cost that climbs
    after 8 nodes stops there; the calibration learns that the drafter is over-confident."""
    from engine.decode.cost import Calibration, Profile, Stats, choose_nodes

    est = [0.9, 0.8, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01]
    flat = Profile(16, [1, 16], [5, 5], [1, 128], [10, 10])
    steep = Profile(16, [1, 16], [5, 5], [1, 8, 16, 128], [10, 10.5, 30, 200])
    assert choose_nodes(flat, Stats(), est, 1)[0] == len(est)
    n, expect, ms = choose_nodes(steep, Stats(), est, 1)
    assert n == 7 and expect == pytest.approx(1 + sum(est[:7])) and ms == pytest.approx(15.5)
    cal = Calibration()
    raw = cal.estimates([math.log(0.9), math.log(0.5)])
    for _ in range(200):     # nodes the drafter gives 0.9 are accepted a third of the time
        cal.observe([0.0, math.log(0.9), math.log(0.9), math.log(0.9)], [0, 1])
    learnt = cal.estimates([math.log(0.9), math.log(0.5)])
    assert learnt[0] == pytest.approx(1 / 3, abs=0.02) and raw[0] > 0.8
    assert learnt[1] <= learnt[0]   # never more likely than a better-scored node


def test_calibration_starts_at_the_drafters_own_estimate():
    """Before any observation, a node's estimate is exp(score) to within its bin: the prior of the
    bin the score falls in, not of a neighbour's."""
    from engine.decode.cost import CALIB_EDGES, Calibration
    cal = Calibration()
    hi = (0.0,) + CALIB_EDGES
    for b, lo in enumerate(CALIB_EDGES):
        score = (lo + hi[b]) / 2
        assert math.exp(lo) <= cal.estimates([score])[0] <= math.exp(hi[b]), (b, score)


@pytest.mark.parametrize("mode", ["dflash", "ddtree", "reanchor", "reanchor-tree"])
def test_auto_budget_is_lossless_and_says_why(mode):
    from engine.decode.cost import budget_for
    from engine.decode.checks import greedy_reference

    eng = Engine(tiny_models("qwen3", 2, block_size=6))
    ids = eng.encode_prompt("c a b")
    cfg = DecodeConfig(mode=mode, max_new_tokens=20, max_shifted="auto", max_trie_nodes="auto", ignore_eos=True)
    run = eng.run(ids, cfg, budget_for(eng, cfg))
    rounds = list(run)
    assert run.result["output_ids"] == greedy_reference(eng.models.target, ids, 20)
    for r in rounds:
        b = r["budget"]
        assert len(r["trie"]["tokens"]) <= b["nodes"] and b["expected_tokens"] >= 1 and b["expected_ms"] > 0
        assert len(r["shifted"]) == b["shifted"] <= b["available"]


def test_auto_shifted_blocks_leave_a_tree_its_node_budget():
    """max_shifted "auto" alone: the budget picks the shifted blocks, and the tree keeps its own node
    budget (DEFAULT_TREE_NODES). The chain modes' node cap it used to take instead grew with the very
    tries it measured: up to 159 nodes a round here."""
    from engine.decode.cost import budget_for
    from engine.options import DEFAULT_TREE_NODES

    eng = Engine(tiny_models("qwen3", 4, block_size=8))
    cfg = DecodeConfig(mode="reanchor-tree", max_new_tokens=40, max_shifted="auto", ignore_eos=True)
    rounds = list(eng.run(eng.encode_prompt("ab c"), cfg, budget_for(eng, cfg)))
    assert any(r["budget"]["shifted"] for r in rounds)
    assert all(len(r["trie"]["tokens"]) <= DEFAULT_TREE_NODES for r in rounds)


# -- issue 40: a calibrated ranking, and the g(0)-alone tree a reanchor-tree round records --------------


def tree_tokens(rnd: dict) -> set[int]:
    return set(rnd["trie"]["tokens"][1:])


def test_calibrated_ranking_lets_a_shifted_node_displace_a_sibling_worth_less():
    """By the drafter's q, g(0)'s rank-1 node 6 (q 0.4) beats the shifted block's 9 (q 0.3 under the same
    prefix); once the run has seen shifted nodes like 9 accepted and g(0)'s rank-1 nodes rejected, the
    calibrated ranking takes 9 (and its block's continuation) instead."""
    from engine.decode.cost import TreeRanker

    assert tree_tokens(hand_round(4, [1, 2, 9, 10, 11, 20])) == {1, 2, 6}   # drafter ranking: 6 before 9
    ranker = TreeRanker()
    for _ in range(10):  # what the target did on rounds like it: g(1)'s path accepted, g(0)'s branches not
        ranker.observe(hand_round(12, [1, 2, 9, 10, 11, 20]))
    seen = hand_round(4, [1, 2, 9, 10, 11, 20], ranker)
    assert tree_tokens(seen) == {1, 2, 9} and seen["accepted"] == 3
    assert ranker.log_accept(1, 0, 3, math.log(0.3)) > ranker.log_accept(0, 1, 2, math.log(0.4))
    # the score a calibrated tree records is its ranking's own estimate: log of a probability, along the path
    t = seen["trie"]
    assert all(t["score"][n] <= t["score"][t["parents"][n]] <= 0 for n in range(1, len(t["tokens"])))


def test_reanchor_tree_records_the_tree_g0_alone_would_have_grown():
    rnd = hand_round(7, [1, 2, 9, 10, 11, 20])
    alt = rnd["trie"]["ddtree"]
    ddtree = tree_proposal(BASE, {}, [RANKED0], "ddtree", "earliest", random.Random(0), 6, 7)[2]
    assert sorted(alt["tokens"]) == sorted(ddtree.tokens) and alt["parents"][0] == -1
    assert all(0 <= p < i for i, p in enumerate(alt["parents"]) if i)
    # the auto node budget cuts the tree and its alternative to as many nodes, the best of each
    from engine.tree import best_nodes, prune
    paths, info, trie, facts = tree_proposal(BASE, SHIFTED, [RANKED0, RANKED1], "reanchor-tree", "earliest",
                                             random.Random(0), 6, 7)
    cut, cut_facts = prune(paths, trie, facts, set(best_nodes(facts["score"], 3)))
    assert len(cut) == len(cut_facts["ddtree"]["tokens"]) == 4 == len(cut_facts["block"])
    assert sorted(cut_facts["ddtree"]["tokens"]) == [1, 2, 6, 7]


@pytest.mark.parametrize("seed", range(40))
def test_as_trie_numbers_nodes_as_build_trie_merges_its_paths(seed):
    """A round's trie comes from its tree in one pass (as_trie); it must be the trie build_trie makes of the
    tree's paths, leaves depth first with the best-scoring child first: same nodes, same numbers, same
    provenance, and every trie node mapped to the tree node with its token and depth."""
    from engine.trie import build_trie
    from engine.tree import as_trie
    rng = random.Random(seed)
    tree = best_first(7, [Source(0, 0, ranked_lists(rng, rng.randint(1, 7), rng.randint(1, 4), 5))],
                      rng.randint(1, 30), 8)
    trie, of = as_trie(tree)

    def path(n):  # tree nodes from the anchor to n
        return [n] if n == 0 else path(tree.parents[n]) + [n]

    def order(n):  # leaves depth first, children by descending score, ties: the older node first
        kids = sorted((c for c in range(1, len(tree)) if tree.parents[c] == n), key=lambda c: (-tree.scores[c], c))
        return [n] if not kids else [leaf for c in kids for leaf in order(c)]
    want = build_trie([[tree.tokens[n] for n in path(leaf)] for leaf in order(0)])
    for f in ("tokens", "parents", "depths", "provenance", "path_nodes", "whole"):
        assert getattr(trie, f) == getattr(want, f), f
    assert [tree.tokens[n] for n in of] == trie.tokens and [tree.depths[n] for n in of] == trie.depths

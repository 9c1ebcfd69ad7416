"""Attachment, trie merge, tree mask and acceptance: pure functions, no model."""
import random
from dataclasses import replace

import torch

from engine.attach import assemble, attach, choose_sites, match_sites
from engine.decode.engine import MASK_ALIGN, TreeMask, additive, tree_mask
from engine.tree import Source, as_trie, best_first
from engine.trie import accept, build_trie, retained_path

BASE = [5, 7, 9, 7, 3, 8]  # anchor 5; token 7 at baseline indices 1 and 3


def test_match_sites_several_and_none():
    assert match_sites(BASE, 7) == [1, 3]
    assert match_sites(BASE, 4) == []


def test_rules_pick_sites():
    rng = random.Random(0)
    assert choose_sites([1, 3], 3, "earliest", rng) == [1]
    assert choose_sites([1, 3], 3, "latest", rng) == [3]
    assert choose_sites([1, 3], 3, "fixed", rng) == [3]
    assert choose_sites([1, 3], 2, "fixed", rng) == []   # matches only away from its offset
    assert choose_sites([1, 3], 2, "all", rng) == [1, 3]
    picks = {choose_sites([1, 3], 2, "random", random.Random(s))[0] for s in range(20)}
    assert picks == {1, 3}


def test_attach_keeps_overlap_once():
    assert attach(BASE, [7, 1, 2, 4, 6, 0], 3) == [5, 7, 9, 7, 1, 2, 4, 6, 0]


def test_assemble_modes():
    g2 = [7, 1, 2, 4, 6, 0]   # d=2 matches only at t=1 and t=3, never at t=2
    g1 = [4, 4, 4, 4, 4, 4]   # no match: discarded
    rng = random.Random(0)
    paths, info = assemble(BASE, {1: g1, 2: g2}, "reanchor", "earliest", rng)
    assert [p.tokens for p in paths] == [BASE, BASE[:2] + g2[1:]]
    assert info[1] == {"sites": [], "attached": []} and info[2]["attached"] == [1]
    paths, _ = assemble(BASE, {1: g1, 2: g2}, "shifted-fixed", "earliest", rng)
    assert len(paths) == 1                        # fixed needs a match at t = d = 2
    paths, _ = assemble(BASE, {2: g2}, "reanchor", "all", rng)
    assert [p.site for p in paths] == [None, 1, 3]
    paths, _ = assemble(BASE, {2: g2}, "in-block", "latest", rng)
    assert paths[1].tokens == (BASE[:4] + g2[1:])[:6]
    paths, _ = assemble(BASE, {2: g2}, "extension", "latest", rng)
    assert paths[1].tokens == BASE + (BASE[:4] + g2[1:])[6:]


def test_trie_merge_shares_prefixes_and_records_provenance():
    t = build_trie([[5, 7, 9], [5, 7, 1, 2], [5, 3]])
    assert t.tokens == [5, 7, 9, 1, 2, 3]
    assert t.parents == [-1, 0, 1, 1, 3, 0]
    assert t.depths == [0, 1, 2, 2, 3, 1]
    assert t.provenance[1] == [0, 1] and t.provenance[4] == [1] and t.provenance[0] == [0, 1, 2]
    assert t.path_nodes == [[0, 1, 2], [0, 1, 3, 4], [0, 5]]
    capped = build_trie([[5, 7, 9], [5, 7, 1, 2]], max_nodes=4)
    assert capped.tokens == [5, 7, 9, 1] and capped.path_nodes[1] == [0, 1, 3]


def test_tree_mask_is_ancestor_or_self():
    m = tree_mask([-1, 0, 1, 1, 3, 0], 3)
    want = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                         [1, 1, 0, 1, 0, 0], [1, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(m, want)


def test_tree_mask_buffer_equals_a_fresh_mask_every_round():
    # rounds of a run (chains take a buffer of their own, TreeMask.chain): the prefix grows, trees change shape and size, the buffer outgrows its first size
    rounds = [(5, [-1, 0, 1, 1, 3, 0]), (7, [-1, 0, 0, 1]), (8, [-1, 0, 1, 2, 3, 4, 5]), (9, [-1]),
              (600, [-1, 0, 1, 0, 3, 3] + list(range(5, 40))), (604, [-1, 0, 0, 0]),
              (700, list(range(-1, 39))), (2, [-1, 0]), (701, [-1, 0, 0]), (1500, list(range(-1, 5)))]  # chains
    buf = TreeMask()
    for s, parents in rounds:
        depth = max(len(_chain(parents, i)) for i in range(len(parents))) - 1
        fresh = additive(torch.cat([torch.ones(len(parents), s, dtype=torch.bool), tree_mask(parents, depth)], 1),
                         torch.float32)
        assert torch.equal(buf.mask(parents, s, torch.float32, "cpu"), fresh), (s, parents)


def test_tree_mask_views_start_aligned():
    # CUDA's memory-efficient attention loads the mask in 16-byte vectors: a view starting between them faulted
    # ("misaligned address") on an H200, where the CPU never minds. Chains and trees, at every residue of s.
    buf = TreeMask()
    for s in list(range(0, 40)) + [511, 513, 600, 1029, 1500]:
        for parents in ([-1, 0, 1, 2], [-1, 0, 0, 1, 3], list(range(-1, 20))):
            for dtype in (torch.float32, torch.bfloat16):
                m = buf.mask(parents, s, dtype, "cpu")
                assert m.shape == (1, 1, len(parents), s + len(parents)), (s, parents)
                assert m.storage_offset() % MASK_ALIGN == 0 and m.stride(-2) % MASK_ALIGN == 0, (s, parents, dtype)
                assert m.stride(-1) == 1


def test_tree_mask_of_a_preorder_trie_equals_the_row_by_row_one():
    # a tree round's trie (tree.as_trie) is numbered in preorder and carries its subtree sizes: the mask is
    # then read from intervals; random trees of one to three sources, with merges, against the fresh mask
    rng = random.Random(0)
    buf = TreeMask()
    for t in range(600):
        def top(n):
            return [list(zip(rng.sample(range(20), 4), sorted((-3 * rng.random() for _ in range(4)), reverse=True)))
                    for _ in range(n)]
        sources = [Source(0, 0, top(rng.randint(2, 8)))] + [Source(d, rng.randint(0, 2), top(rng.randint(1, 5)))
                                                             for d in range(1, rng.randint(1, 3))]
        trie, _ = as_trie(best_first(1, sources, rng.randint(1, 40), 10))
        parents, s = trie.parents, rng.randint(0, 700)
        if all(p == i - 1 for i, p in enumerate(parents)):
            continue  # a chain: TreeMask.chain
        depth = max(trie.depths)
        fresh = additive(torch.cat([torch.ones(len(parents), s, dtype=torch.bool), tree_mask(parents, depth)], 1),
                         torch.float32)
        assert torch.equal(buf.mask(parents, s, torch.float32, "cpu", trie.sizes), fresh), (t, parents)


def test_accept_on_a_preorder_trie_walks_as_on_any_trie():
    # a tree round's trie (tree.as_trie, preorder, with subtree sizes) is walked through its sizes: the same
    # chain and bonus as the walk over a child map, for targets that follow the tree for a while
    rng = random.Random(1)
    for t in range(600):
        sources = [Source(0, 0, [list(zip(rng.sample(range(6), 4), sorted((-3 * rng.random() for _ in range(4)),
                                                                            reverse=True))) for _ in range(6)])]
        trie, _ = as_trie(best_first(1, sources, rng.randint(1, 30), 8))
        follow = {k: trie.tokens[rng.choice([c for c, p in enumerate(trie.parents) if p == k] or [0])]
                  if rng.random() < 0.8 else rng.randrange(6) for k in range(len(trie))}
        plain = replace(trie, sizes=None)
        assert trie.sizes is not None and accept(trie, follow.__getitem__) == accept(plain, follow.__getitem__), t


def _chain(parents, i):
    out = [i]
    while parents[out[-1]] >= 0:
        out.append(parents[out[-1]])
    return out


def test_accept_walks_the_target_tokens():
    t = build_trie([[5, 7, 9], [5, 7, 1, 2], [5, 3]])
    target = {0: 7, 1: 1, 3: 2, 4: 6}   # the target's own next token after each node
    chain, bonus = accept(t, target.__getitem__)
    assert chain == [0, 1, 3, 4] and bonus == 6
    assert retained_path(t, chain) == 1
    chain, bonus = accept(t, {0: 8}.__getitem__)
    assert chain == [0] and bonus == 8 and retained_path(t, chain) == 0


def test_records_round_as_pythons_round_does():
    # engine.trace.rounded (a quarter of round(x, p)'s cost, on every float a round records) gives round(x, p)'s
    # values: the same doubles, so the same JSON; infinities and NaN pass through
    import math

    from engine.trace import rounded
    rng = random.Random(7)
    xs = [rng.uniform(-30, 0) for _ in range(20000)] + [math.exp(rng.uniform(-30, 0)) for _ in range(20000)]
    xs += [0.0, -0.0, 1.0, 0.5, 1e-9, 123456.78901, -2.5e-5, 0.12345650000000001]
    for p in (3, 4, 6):
        assert rounded(xs, p) == [round(x, p) for x in xs], p
    out = rounded([math.inf, -math.inf, math.nan], 4)
    assert out[:2] == [math.inf, -math.inf] and math.isnan(out[2])


def test_chain_masks_are_built_once_for_every_run():
    # a chain's planes never change once written: runs share them (a run used to build its own, 0.1-0.3 ms)
    a = TreeMask().mask(list(range(-1, 7)), 40, torch.float32, "cpu")
    b = TreeMask().mask(list(range(-1, 7)), 41, torch.float32, "cpu")
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert not torch.equal(a[..., :48], b[..., :48])   # and each is its own s's view

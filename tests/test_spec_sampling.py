"""Speculative sampling over a trie (engine/sampling.py) is exact: computed, not sampled.

A synthetic target (order-2 Markov over V tokens) and synthetic drafter laws, independent per
position (DFlash) or conditioned on the row's previous token (DFlash 2, sequential heads), some
with zeros (a top-k drafter). Every realisation of the drafted rows is enumerated with its
probability, assembled by the engine's own attach.proposal (every mode and rule, node caps), and
walked by speculative_accept with every coin and sample enumerated too (ScriptLaws). The law of
the committed tokens, completed by the target, must equal the target's law to 1e-9.

Breakages this catches (each tried by hand: break the code, see this test red, restore): testing a block attached at several
sites against its law (rule "all"), ignoring the node cap (Trie.whole), the residual p instead of
max(p - q, 0), shifted paths before the baseline, proposing a baseline draw twice at one node,
testing the draws of a trie the auto node budget cut by their scores against their laws
(round.fit_nodes must mark such paths as not whole). And the other way: a baseline a node cap cuts
short must keep its law (test_a_node_cap_below_the_block_keeps_the_baseline_law).
"""
from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict

import pytest

from engine.attach import proposal
from engine.decode.round import fit_nodes
from engine.sampling import speculative_accept

V, L, ANCHOR, BEFORE = 3, 3, 0, 1      # tokens 0..2; blocks [anchor, x1, x2]; the token before the anchor


class Branch(Exception):
    def __init__(self, options):
        self.options = options


class ScriptLaws:
    """Laws on lists of floats; each random choice replays the next scripted value, and an
    unscripted one raises Branch with its options, so `enumerate_walk` visits every outcome."""

    def __init__(self, script: tuple):
        self.script, self.i, self.weight = script, 0, 1.0

    def _choose(self, options):
        options = [(v, w) for v, w in options if w > 0]
        if len(options) == 1:
            return options[0][0]
        if self.i == len(self.script):
            raise Branch(options)
        v = self.script[self.i]
        self.i += 1
        self.weight *= dict(options)[v]
        return v

    def prob(self, law, token):
        return law[token]

    def residual(self, law, q, token):
        q = [float(k == token) for k in range(len(law))] if q is None else q
        r = [max(a - b, 0.0) for a, b in zip(law, q)]
        total = sum(r)
        return [x / total for x in r] if total > 0 else law

    def sample(self, law):
        return self._choose(list(enumerate(law)))

    def bernoulli(self, prob):
        return self._choose([(True, prob), (False, 1 - prob)])


def enumerate_walk(walk) -> dict:
    out, todo = defaultdict(float), [()]
    while todo:
        script = todo.pop()
        laws = ScriptLaws(script)
        try:
            res = walk(laws)
        except Branch as b:
            todo += [script + (v,) for v, _ in b.options]
            continue
        out[res] += laws.weight
    return out


def rand_law(rng: random.Random, zeros: bool) -> list[float]:
    w = [rng.random() ** 2 for _ in range(V)]
    if zeros:  # a top-k drafter: some tokens impossible
        w[rng.randrange(V)] = 0.0
    return [x / sum(w) for x in w]


class World:
    """The target p(x | two previous tokens) and, per source d and index j, the drafter's law
    q[d][j][previous token in the row] (the same for every previous token when independent)."""

    def __init__(self, seed: int, sources: int, sequential: bool, zeros: bool):
        rng = random.Random(seed)
        self.p = {(a, b): rand_law(rng, False) for a in range(V) for b in range(V)}
        self.q = [[None] + [[rand_law(rng, zeros)] * V if not sequential else
                            [rand_law(rng, zeros) for _ in range(V)] for _ in range(1, L)]
                  for _ in range(sources)]
        self.anchors = [ANCHOR] + [rng.choice([ANCHOR, ANCHOR, 2]) for _ in range(1, sources)]

    def rows(self):
        """Every realisation of the drafted rows with its probability."""
        per_row = []
        for d, a in enumerate(self.anchors):
            opts = []
            for toks in itertools.product(range(V), repeat=L - 1):
                w, prev = 1.0, a
                for j, t in enumerate(toks, 1):
                    w, prev = w * self.q[d][j][prev][t], t
                if w > 0:
                    opts.append(([a] + list(toks), w))
            per_row.append(opts)
        for combo in itertools.product(*per_row):
            w = 1.0
            for _, x in combo:
                w *= x
            yield [r for r, _ in combo], w

    def seq_prob(self, before: tuple, seq) -> float:
        a, b, w = before[0], before[1], 1.0
        for t in seq:
            w, a, b = w * self.p[(a, b)][t], b, t
        return w


def round_law(world: World, mode: str, rule: str, max_nodes=None, lawless=()) -> dict:
    """P(the round commits this token tuple), exactly. `lawless`: sources handed over as
    deterministic (law None) although they were sampled."""
    total = defaultdict(float)
    for rows, w in world.rows():
        baseline, shifted = rows[0], {d: r for d, r in enumerate(rows) if d}
        paths, _, trie = proposal(baseline, shifted, mode, rule, random.Random(0), None,
                                  None if isinstance(max_nodes, str) else max_nodes)
        if max_nodes == "best":  # the auto budget: the best-scoring nodes by the drafted tokens' q
            trie = best_scored(world, rows, paths, trie)

        def target(node):
            up = [node]
            while len(up) < 2:
                up.append(trie.parents[up[-1]])
            prev = BEFORE if up[1] < 0 else trie.tokens[up[1]]
            return world.p[(prev, trie.tokens[node])]

        def law_of(d, j):
            return None if d in lawless else world.q[d][j][rows[d][j - 1]]

        def walk(laws):
            chain, bonus = speculative_accept(trie, [p.source for p in paths], [p.draws for p in paths],
                                              target, law_of, laws)
            return tuple(trie.tokens[n] for n in chain[1:]) + (bonus,)

        for out, x in enumerate_walk(walk).items():
            total[out] += w * x
    return total


class KeepHalf:
    """The auto budget's node choice (engine.decode.cost.Budget.nodes), fixed: the better half."""

    def nodes(self, scores: list[float], drafted: int) -> dict:
        return {"nodes": 1 + len(scores) // 2}


def best_scored(world: World, rows, paths, trie):
    """The trie cut as the auto node budget cuts it (round.fit_nodes): by the drafted tokens' scores,
    so which draws are verified depends on the draws."""
    lq = [0.0] * len(trie)
    for p, nodes in zip(paths, trie.path_nodes):
        for k in range(1, len(nodes)):
            d, j = p.draws[k]
            lq[nodes[k]] = math.log(world.q[d][j][rows[d][j - 1]][rows[d][j]] or 1e-9)
    score = [0.0] * len(trie)
    for n in range(1, len(trie)):
        score[n] = score[trie.parents[n]] + lq[n]
    return fit_nodes(KeepHalf(), paths, trie, {"score": score}, 1)[0]


def assert_target_law(world: World, law: dict) -> None:
    assert abs(sum(law.values()) - 1) < 1e-9
    M = max(map(len, law))
    got = defaultdict(float)
    for out, x in law.items():  # complete every output to M tokens with the target itself
        for tail in itertools.product(range(V), repeat=M - len(out)):
            got[out + tail] += x * world.seq_prob(((BEFORE, ANCHOR) + out)[-2:], tail)
    worst = max(abs(got[w] - world.seq_prob((BEFORE, ANCHOR), w))
                for w in itertools.product(range(V), repeat=M))
    assert worst < 1e-9, worst


CASES = [  # (mode, rule, shifted blocks, sequential laws, zeros, max_nodes, lawless sources)
    ("dflash", "earliest", 0, False, False, None, ()),
    ("dflash", "earliest", 0, True, True, None, ()),
    ("reanchor", "earliest", 2, False, True, None, ()),
    ("reanchor", "latest", 2, True, False, None, ()),
    ("reanchor", "all", 1, False, False, None, ()),
    ("reanchor", "all", 2, True, True, None, (0,)),
    ("reanchor", "random", 2, True, False, None, (2,)),
    ("reanchor", "earliest", 2, False, False, 4, ()),
    ("shifted-fixed", "fixed", 2, True, True, None, ()),
    ("in-block", "all", 2, False, False, None, ()),
    ("extension", "all", 1, True, False, None, ()),
    ("extension", "latest", 2, True, True, 6, ()),
    ("reanchor", "earliest", 2, True, False, "best", ()),
    ("dflash", "earliest", 0, False, False, "best", ()),
    ("dflash", "earliest", 0, True, True, 2, ()),        # a cap below the block: the baseline cut short
    ("reanchor", "latest", 2, True, False, 2, ()),
]


@pytest.mark.parametrize("mode,rule,k,seq,zeros,max_nodes,lawless", CASES)
def test_speculative_sampling_is_exact(mode, rule, k, seq, zeros, max_nodes, lawless):
    for seed in range(2):
        world = World(seed * 7 + k, 1 + k, seq, zeros)
        assert_target_law(world, round_law(world, mode, rule, max_nodes, lawless))


def test_a_node_cap_below_the_block_keeps_the_baseline_law():
    """The first path's tokens are all new, so a node cap cuts it at a fixed depth: its draws keep
    their laws (Trie.whole). With room for one draft it passes with sum_x min(p, q)(x), DFlash's
    rejection sampling, not sum_x p(x) q(x) (sample-and-match, as point masses would give)."""
    for seed in range(3):
        world = World(seed, 1, False, False)
        law = round_law(world, "dflash", "earliest", 2)
        assert_target_law(world, law)
        p, q = world.p[(BEFORE, ANCHOR)], world.q[0][1][ANCHOR]
        accepted = sum(x for out, x in law.items() if len(out) == 2)
        assert accepted == pytest.approx(sum(map(min, p, q)), abs=1e-12)
        assert accepted > sum(a * b for a, b in zip(p, q)) + 1e-3


def test_tiny_temperatures_decode_greedily():
    """A temperature too small for logits / T (1e-40, the smallest double) is the greedy limit, in
    every kind of drafter: no nan law, no crash."""
    from engine.decode import DecodeConfig, Engine
    from tiny import dflash2_models, tiny_models, tiny_variant_models
    for models in (tiny_models("llama", 3, block_size=5), dflash2_models(1), tiny_variant_models("domino")):
        eng = Engine(models)
        ids = eng.encode_prompt("ab")
        greedy = eng.run(ids, DecodeConfig(mode="ar", max_new_tokens=12, ignore_eos=True)).finish()["output_ids"]
        for T in (1e-40, 5e-324):
            for mode in ("ar", "reanchor"):
                run = eng.run(ids, DecodeConfig(mode=mode, temperature=T, max_new_tokens=12, ignore_eos=True))
                assert run.finish()["output_ids"] == greedy, (models.drafter_name, T, mode)


def test_torch_laws_do_the_exact_arithmetic():
    """The engine's TorchLaws (values looked up in a batch before the walk, point-mass residuals' values
    carried over without their rows, coins from a pool) give what ScriptLaws computes exactly."""
    import torch

    from engine.decode.laws import Law, TorchLaws
    rng = random.Random(3)
    exact = ScriptLaws(())
    for _ in range(20):
        p, q = rand_law(rng, True), rand_law(rng, True)
        tp = torch.tensor(p, dtype=torch.float64)
        laws = TorchLaws(torch.Generator().manual_seed(0), 4)
        tok, other = rng.randrange(V), rng.randrange(V)
        law = Law(lambda: tp, {x: p[x] for x in (tok, other)})
        for q_ in (None, q):
            r = laws.residual(law, None if q_ is None else Law(lambda: torch.tensor(q_, dtype=torch.float64)), tok)
            want = exact.residual(p, q_, tok)
            assert all(abs(laws.prob(r, x) - want[x]) < 1e-12 for x in range(V)), (p, q_, tok)
            assert torch.allclose(r.row(), torch.tensor(want, dtype=torch.float64), atol=1e-12)
        assert laws.prob(law, other) == p[other]
    coins = TorchLaws(torch.Generator().manual_seed(1), 3)
    flips = [coins.bernoulli(0.5) for _ in range(4000)]   # refills its pool past 3
    assert abs(sum(flips) / len(flips) - 0.5) < 0.05 and not any(coins.bernoulli(0.0) for _ in range(50))

"""Greedy ReAnchor in one screen: the plain `reanchor` mode, rule `earliest`, T=0, no caps, no trace, no timings.

A reading of docs/algorithm.md in code, as gpt-fast's `speculative_decode` is of speculative decoding: one round as a
function, the loop apart. The model calls are the Engine's (prefill, draft, verify, compact) and the trie is
engine/trie.py's; attaching, accepting and retaining are written out here. tests/test_reference_loop.py checks it
against greedy decoding and, round for round, against round.py's `decode_round`.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..trie import Trie, build_trie
from .kv import ContextKV
from .round import ModelCalls


class Round(NamedTuple):
    new: list[int]            # committed: the accepted drafts, then the bonus (the next anchor)
    sites: dict[int, int]     # d -> the baseline index t that g(d) attached at (no site: not attached)
    trie: Trie


def reanchor_round(eng: ModelCalls, x: list[int], cache, ctx: ContextKV, F: torch.Tensor, R: torch.Tensor,
                   a: list[int]) -> tuple[Round, torch.Tensor, torch.Tensor, list[int]]:
    """One round at anchor x[s], s = len(x) - 1. The target's `cache` holds positions < s and the drafter's `ctx`
    the features it has seen; F: the committed features it has not (positions up to s-1); R: the retained
    features of positions s .. s+m-1 and a[d-1] = a_d, the target's token after retained node d. `cache` and
    `ctx` advance in place; returns the round and the next round's F, R and a."""
    s, B = len(x) - 1, eng.block_size
    # 1. draft, one batched call. Row 0, g(0): context F[<s], block [x_s, MASK..] at s..s+B-1.
    #    Row d, g(d): context F[<s] ++ R[<d], block [a_d, MASK..] at its native position s+d .. s+d+B-1.
    blocks = eng.draft(ctx, F, R, [x[s]] + a, s, B, 0.0, None, False).tokens
    g0 = blocks[0]
    # 2. attach: g(d) joins g(0) at the earliest site t with g(0)[t] == g(d)[0] = a_d; its path is
    #    g(0)[0..t] ++ g(d)[1..], the overlap token kept once, so its drafts land at s+t+1.. whatever its d.
    sites = {d: g0.index(g[0]) for d, g in enumerate(blocks[1:], 1) if g[0] in g0}
    paths = [g0] + [g0[: t + 1] + blocks[d][1:] for d, t in sites.items()]
    # 3. merge: common prefixes share nodes; node i sits at position s + depth(i). The baseline is the chain 0..B-1.
    trie = build_trie(paths)
    # 4. verify: one target pass; node i sees the cache and its own ancestors, as if its path were committed.
    logits, feats = eng.verify(trie, s, cache)
    y = logits.argmax(-1).tolist()            # y[i]: the target's greedy token after node i
    # 5. accept: from the root, step into the child carrying y; where none does, y is the bonus.
    #    Every committed token is the target's own greedy choice under committed text: lossless.
    child = {(p, tok): i for i, (p, tok) in enumerate(zip(trie.parents, trie.tokens)) if p >= 0}
    chain = [0]
    while (chain[-1], y[chain[-1]]) in child:
        chain.append(child[chain[-1], y[chain[-1]]])
    eng.compact(cache, s, chain)              # the cache keeps the accepted nodes: positions < s' = s + a + 1
    # 6. retain: P* = the first path (baseline first) through the whole chain; its nodes past the chain sit at
    #    s' .. s'+m'-1: their features are R' and y after each is a'_d, g(d)'s anchor in the next round.
    rest = next(p for p in trie.path_nodes if p[: len(chain)] == chain)[len(chain):]
    new = [trie.tokens[i] for i in chain[1:]] + [y[chain[-1]]]
    return Round(new, sites, trie), feats[chain], feats[rest], [y[i] for i in rest]


@torch.inference_mode()
def reanchor_greedy(eng: ModelCalls, prompt: list[int], n_new: int) -> tuple[list[int], list[Round]]:
    """The first `n_new` tokens greedy ReAnchor writes after `prompt` (stop tokens ignored), and its rounds."""
    logits, F, cache = eng.prefill(prompt)   # F = F[0..s-1]; the cache holds positions < s
    x = list(prompt) + [int(logits[-1].argmax())]   # the target's first token is the first anchor
    ctx, R, a, rounds = ContextKV(), F[:0], [], []
    while len(x) - len(prompt) < n_new:
        r, F, R, a = reanchor_round(eng, x, cache, ctx, F, R, a)
        x += r.new
        rounds.append(r)
    return x[len(prompt):][:n_new], rounds

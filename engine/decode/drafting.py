"""From the drafter's block hidden states to draft tokens: the one place that knows how each kind of
drafter picks its tokens, so a round never branches on the drafter.

    DFlash      every position at once: logits = head(h_j); argmax, or a sample at temperature T
    DFlash 2    the `dflash` package's candidate selector: a sequential pick among each position's top-k
    variants    a drafter class with `propose_blocks` (sequential heads such as Domino's GRU or DSpark's
                Markov correction) decides for itself, with the same signature and result

Whatever the kind, a call returns Drafts: the tokens, the drafter's logits at every position (what
tree modes rank), and the distribution each sampled token was drawn from (what speculative sampling
at T > 0 needs); argmax drafts have no such distribution (a point mass: `probs` is None). A drafter
with a confidence head (DSpark) adds its per-position acceptance estimates, and a sequential head
the backbone's own tokens (what it corrected).
"""
from __future__ import annotations

import itertools
import math
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from ..models.variants import Proposal, draft_logits, draw
from ..trace import rounded
from ..tree import head_logq, path_scores


@dataclass
class Drafts:
    """One drafter call: row 0 the baseline g(0), row i the i-th shifted block."""
    tokens: list[list[int]]          # [rows][L]; tokens[r][0] is the row's anchor
    logits: torch.Tensor             # [rows, L-1, V] float: position j+1's logits (after any correction)
    probs: torch.Tensor | None       # [rows, L-1, V]: the law tokens[r][j+1] was drawn from; None: argmax
    confidence: torch.Tensor | None = None  # [rows, L-1]: the drafter's P(draft j+1 accepted | the ones before were)
    backbone: list[list[int]] | None = None  # [rows][L]: a sequential head's backbone argmax (anchor at 0)
    argmax: bool = False             # every token is its logits' argmax: rank 0 without a pass over the vocabulary

    def q(self) -> list[list[float]] | None:
        """Per drafted token, its probability under the law it was drawn from (None: argmax drafts)."""
        if self.probs is None:
            return None
        ids = torch.tensor([row[1:] for row in self.tokens], device=self.probs.device)
        return self.probs.gather(-1, ids[..., None])[..., 0].tolist()


class SequentialHead(Protocol):
    """What a drafter with its own token choice (a sequential correction head) provides
    (engine/models/variants.py: Domino, DSpark).

    Speculative sampling (engine/sampling.py) trusts `probs` to be the law each token was drawn
    from: rows drawn independently of one another, position j from probs[r, j] given the row's
    tokens before j (so a sequential head returns the conditional it sampled from); None when the
    tokens are chosen deterministically (point masses)."""

    block_offset: int   # 1: block slot k predicts position k (DFlash); 0: slot k predicts k+1 (shift-label)

    def propose_blocks(self, hidden: torch.Tensor, anchors: torch.Tensor, output_head: Callable,
                       temperature: float, generator: torch.Generator | None, argmax: bool) -> Proposal:
        """hidden [rows, L-1, H] (the states predicting positions 1..L-1), anchors [rows] -> Proposal."""


def _dflash(drafter, hidden, head, T: float, gen, argmax: bool) -> Proposal:
    logits = draft_logits(drafter, hidden, head).float()
    toks, probs = draw(logits, T, gen, argmax)
    return Proposal(toks, logits, probs, argmax=probs is None)


_GLOBAL_RNG = threading.Lock()   # one run at a time may borrow the process-wide RNG


@contextmanager
def _global_rng_from(gen: torch.Generator):
    """The global RNG of `gen`'s device, seeded from `gen` for the block and restored after: the
    draws of code that samples with the global RNG follow the run's seed, and nothing else's.
    Held under a lock: runs on other threads would otherwise reseed it mid-block."""
    dev = gen.device
    rng = (torch.cuda.default_generators[dev.index if dev.index is not None else torch.cuda.current_device()]
           if dev.type == "cuda" else torch.default_generator)
    with _GLOBAL_RNG:
        state = rng.get_state()
        rng.manual_seed(int(torch.randint(2**62, (), generator=gen, device=dev)))
        try:
            yield
        finally:
            rng.set_state(state)


def _dflash2(drafter, hidden, anchors, head, T: float, gen, argmax: bool) -> Proposal:
    """The package's selector: tokens chosen among each position's top-k given the previous token;
    its q (the law given that token) is over those k candidates, scattered back onto the vocabulary
    here. It samples with the global RNG, seeded from the run's generator."""
    logits = draft_logits(drafter, hidden, head).float()
    T = 0.0 if argmax else T
    with _global_rng_from(gen) if T > 0 else nullcontext():
        toks, candidates, q = drafter.candidate_selector.select(hidden, logits, anchors, T)
    probs = None
    if q is not None:
        probs = torch.zeros_like(logits).scatter_(-1, candidates, q.float())
    return Proposal(toks, logits, probs)


def propose(drafter, hidden: torch.Tensor, anchors: torch.Tensor, head: Callable, T: float, gen,
            argmax: bool) -> Proposal:
    """Draft positions 1..L-1 of every row. The drafter's kind is looked up once (a failed hasattr on a module
    raises inside nn.Module.__getattr__: two cost a small model's round a few us)."""
    kind = drafter.__dict__.get("_draft_kind")
    if kind is None:
        kind = drafter.__dict__["_draft_kind"] = (
            "sequential" if hasattr(drafter, "propose_blocks") else
            "dflash2" if hasattr(drafter, "candidate_selector") else "dflash")
    if kind == "dflash":
        return _dflash(drafter, hidden, head, T, gen, argmax)
    if kind == "sequential":
        return drafter.propose_blocks(hidden, anchors, head, T, gen, argmax)
    return _dflash2(drafter, hidden, anchors, head, T, gen, argmax)


def block_offset(drafter) -> int:
    """1 when the drafter's block slot k predicts position k (DFlash: the anchor's slot drafts nothing),
    0 when slot k predicts position k+1 (shift-label variants): a block of n inputs drafts n - offset."""
    return int(getattr(drafter, "block_offset", 1))


def ranked(drafts: Drafts, k: int) -> list[list[list[tuple[int, float]]]]:
    """Per row and position, the drafter's k best (token, log-probability at temperature 1), the
    drafted token first (a selector or a sequential head may not draft its logits' argmax). A
    sequential head's logits are its corrected ones, given the row's drafted tokens before."""
    lp = torch.log_softmax(drafts.logits.float(), -1)
    k = min(k, lp.shape[-1])
    top_lp, top_ids = lp.topk(k, -1)
    drafted, top_lp = [row[1:] for row in drafts.tokens], top_lp.tolist()
    if drafts.argmax:  # the drafted token has the best log-probability (a tie has the same one)
        own = [[x[0] for x in row] for row in top_lp]
    else:
        own = lp.gather(-1, torch.tensor(drafted, device=lp.device)[..., None])[..., 0].tolist()
    out = []
    for ids_r, lps_r, d_r, own_r in zip(top_ids.tolist(), top_lp, drafted, own):
        # where the drafted token leads the top-k (every argmax draft but a tie's), the list is the top-k as is
        out.append([list(zip(ids, lps)) if ids[0] == d else
                    [(d, o)] + [(t, x) for t, x in zip(ids, lps) if t != d][: k - 1]
                    for ids, lps, d, o in zip(ids_r, lps_r, d_r, own_r)])
    return out


def confidences(drafts: Drafts | None) -> list[list[float]] | None:
    """Per row and drafted position, a confidence head's acceptance estimate (None: no head)."""
    return None if drafts is None or drafts.confidence is None else drafts.confidence.float().tolist()


def node_facts(drafts: Drafts, trie, paths, offsets: list[int]) -> dict[str, list]:
    """Per trie node of a chain-mode round: the block that proposed it (its first path's source: 0 or
    d), its rank and probability in the distribution of the draw it is (temperature 1), and its score:
    log w (the sum of log-probabilities from the anchor), or for a drafter with a confidence head the sum
    of log c (the head's estimate that the path survives: every chain node is its row's drafted token).
    The anchor gets block 0, rank 0, probability 1. One pass over the vocabulary per node (its
    log-softmax), and a second for the rank unless the drafts are their logits' argmax (rank 0)."""
    n = len(trie) - 1
    if n and not offsets and drafts.argmax and drafts.confidence is None and trie.depths[-1] == n:
        # g(0) alone and a chain (a node at depth n has n ancestors): node k is g(0)[k] (a dflash round)
        return _argmax_chain_facts(drafts.logits[0, :n], [0] * (n + 1))
    row_of = {0: 0, **{d: i for i, d in enumerate(offsets, start=1)}}
    block, rows, pos = [0], [], []
    for n in range(1, len(trie)):
        p = paths[min(trie.provenance[n])]
        d, j = p.draws[trie.depths[n]]      # node n is g(d)[j]: the drafter's logits row j - 1 of block d
        block.append(p.source)
        rows.append(row_of[d])
        pos.append(j - 1)
    if not rows:
        return {"block": block, "rank": [0], "prob": [1.0], "score": [0.0]}
    # few ops, each fused (logsumexp is a composite of ten on the CPU): a chain's nodes are usually
    # one row's first positions, a slice
    n, dev = len(rows), drafts.logits.device
    conf = confidences(drafts)
    if rows == [0] * n and pos == list(range(n)):
        logits = drafts.logits[0, :n]
        if drafts.argmax and conf is None and trie.parents == list(range(-1, n)):
            return _argmax_chain_facts(logits, block)
        tok = torch.tensor(trie.tokens[1:], device=dev)[:, None]
    else:
        ix = torch.tensor([rows, pos, trie.tokens[1:]], device=dev)
        logits, tok = drafts.logits[ix[0], ix[1]], ix[2][:, None]     # [nodes, V] float, [nodes, 1]
    lq = torch.log_softmax(logits, -1).gather(-1, tok)[:, 0]
    if drafts.argmax:
        lq, rank = lq.tolist(), [0] * n
    else:
        lq, rank = torch.stack([lq, (logits > logits.gather(-1, tok)).sum(-1).to(lq.dtype)]).tolist()
        rank = [int(r) for r in rank]
    est = lq if conf is None else [head_logq(0.0, 0.0, conf[r][j], True) for r, j in zip(rows, pos)]
    scores = path_scores(trie.parents, [0.0] + est)
    return {"block": block, "rank": [0] + rank, "prob": [1.0] + rounded([math.exp(x) for x in lq], 6),
            "score": rounded(scores, 4)}


def _argmax_chain_facts(logits: torch.Tensor, block: list[int]) -> dict[str, list]:
    """node_facts of g(0)'s own chain of argmax drafts (a `dflash` round): node k is position k's argmax, so
    its log q is its row's largest log-probability, read without the tokens (two ops: on a small model each
    op costs as much as the arithmetic), and its score the running sum along the chain."""
    lq = torch.log_softmax(logits, -1).amax(-1).tolist()
    scores = [0.0, *itertools.accumulate(lq)]   # path_scores along a chain, summed in the same order
    exp = math.exp
    return {"block": block, "rank": [0] * len(block), "prob": [1.0, *rounded([exp(x) for x in lq], 6)],
            "score": rounded(scores, 4)}

"""From the drafter's block hidden states to draft tokens: the one place that knows how each kind of
drafter picks its tokens, so a round never branches on the drafter.

    DFlash      every position at once: logits = head(h_j); argmax, or a sample at temperature T
    DFlash 2    the `dflash` package's candidate selector: a sequential pick among each position's top-k
    variants    a drafter class with `propose_blocks` (sequential heads such as Domino's GRU or DSpark's
                Markov correction) decides for itself, with the same signature and result

Whatever the kind, a call returns Drafts: the tokens, the drafter's logits at every position (what
tree modes rank), and the distribution each sampled token was drawn from (what speculative sampling
at T > 0 needs); argmax drafts have no such distribution (a point mass: `probs` is None).
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Protocol

import torch


@dataclass
class Drafts:
    """One drafter call: row 0 the baseline g(0), row i the i-th shifted block."""
    tokens: list[list[int]]          # [rows][L]; tokens[r][0] is the row's anchor
    logits: torch.Tensor             # [rows, L-1, V] float: position j+1's logits (after any correction)
    probs: torch.Tensor | None       # [rows, L-1, V]: the law tokens[r][j+1] was drawn from; None: argmax

    def q(self) -> list[list[float]] | None:
        """Per drafted token, its probability under the law it was drawn from (None: argmax drafts)."""
        if self.probs is None:
            return None
        ids = torch.tensor([row[1:] for row in self.tokens], device=self.probs.device)
        return self.probs.gather(-1, ids[..., None])[..., 0].tolist()


class SequentialHead(Protocol):
    """What a drafter with its own token choice (a sequential correction head) provides.

    Speculative sampling (engine/sampling.py) trusts `probs` to be the law each token was drawn
    from: rows drawn independently of one another, position j from probs[r, j] given the row's
    tokens before j (so a sequential head returns the conditional it sampled from); None when the
    tokens are chosen deterministically (point masses)."""

    def propose_blocks(self, hidden: torch.Tensor, anchors: torch.Tensor, output_head: Callable,
                       temperature: float, generator: torch.Generator | None, argmax: bool
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """hidden [rows, L-1, H] (positions 1..L-1), anchors [rows] -> (tokens [rows, L-1],
        logits [rows, L-1, V], probs [rows, L-1, V] or None)."""


def _dflash(drafter, hidden, head, T: float, gen, argmax: bool):
    logits = drafter.compute_logits(hidden, head).float()
    if T > 0 and not argmax:
        probs = torch.softmax(logits / T, -1)
        toks = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=gen).view(probs.shape[:-1])
        return toks, logits, probs
    return logits.argmax(-1), logits, None


@contextmanager
def _global_rng_from(gen: torch.Generator):
    """The global RNG of `gen`'s device, seeded from `gen` for the block and restored after: the
    draws of code that samples with the global RNG follow the run's seed, and nothing else's."""
    dev = gen.device
    rng = (torch.cuda.default_generators[dev.index if dev.index is not None else torch.cuda.current_device()]
           if dev.type == "cuda" else torch.default_generator)
    state = rng.get_state()
    rng.manual_seed(int(torch.randint(2**62, (), generator=gen, device=dev)))
    try:
        yield
    finally:
        rng.set_state(state)


def _dflash2(drafter, hidden, anchors, head, T: float, gen, argmax: bool):
    """The package's selector: tokens chosen among each position's top-k given the previous token;
    its q (the law given that token) is over those k candidates, scattered back onto the vocabulary
    here. It samples with the global RNG, seeded from the run's generator."""
    logits = drafter.compute_logits(hidden, head).float()
    T = 0.0 if argmax else T
    with _global_rng_from(gen) if T > 0 else nullcontext():
        toks, candidates, q = drafter.candidate_selector.select(hidden, logits, anchors, T)
    probs = None
    if q is not None:
        probs = torch.zeros_like(logits).scatter_(-1, candidates, q.float())
    return toks, logits, probs


def propose(drafter, hidden: torch.Tensor, anchors: torch.Tensor, head: Callable, T: float, gen,
            argmax: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Draft positions 1..L-1 of every row: (tokens, logits, probs or None)."""
    if hasattr(drafter, "propose_blocks"):
        return drafter.propose_blocks(hidden, anchors, head, T, gen, argmax)
    if hasattr(drafter, "candidate_selector"):
        return _dflash2(drafter, hidden, anchors, head, T, gen, argmax)
    return _dflash(drafter, hidden, head, T, gen, argmax)

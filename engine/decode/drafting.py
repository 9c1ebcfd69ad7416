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

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from ..models.variants import Proposal, draw


@dataclass
class Drafts:
    """One drafter call: row 0 the baseline g(0), row i the i-th shifted block."""
    tokens: list[list[int]]          # [rows][L]; tokens[r][0] is the row's anchor
    logits: torch.Tensor             # [rows, L-1, V] float: position j+1's logits (after any correction)
    probs: torch.Tensor | None       # [rows, L-1, V]: the law tokens[r][j+1] was drawn from; None: argmax
    confidence: torch.Tensor | None = None  # [rows, L-1]: the drafter's P(draft j+1 accepted | the ones before were)
    backbone: list[list[int]] | None = None  # [rows][L]: a sequential head's backbone argmax (anchor at 0)

    def q(self) -> list[list[float]] | None:
        """Per drafted token, its probability under the law it was drawn from (None: argmax drafts)."""
        if self.probs is None:
            return None
        ids = torch.tensor([row[1:] for row in self.tokens], device=self.probs.device)
        return self.probs.gather(-1, ids[..., None])[..., 0].tolist()


class SequentialHead(Protocol):
    """What a drafter with its own token choice (a sequential correction head) provides
    (engine/models/variants.py: Domino, DSpark)."""

    block_offset: int   # 1: block slot k predicts position k (DFlash); 0: slot k predicts k+1 (shift-label)

    def propose_blocks(self, hidden: torch.Tensor, anchors: torch.Tensor, output_head: Callable,
                       temperature: float, generator: torch.Generator | None, argmax: bool) -> Proposal:
        """hidden [rows, L-1, H] (the states predicting positions 1..L-1), anchors [rows] -> Proposal."""


def _dflash(drafter, hidden, head, T: float, gen, argmax: bool) -> Proposal:
    logits = drafter.compute_logits(hidden, head).float()
    toks, probs = draw(logits, T, gen, argmax)
    return Proposal(toks, logits, probs)


def _dflash2(drafter, hidden, anchors, head, T: float, argmax: bool) -> Proposal:
    """The package's selector: tokens chosen among each position's top-k given the previous token;
    its q is over those k candidates (scattered back onto the vocabulary here)."""
    logits = drafter.compute_logits(hidden, head).float()
    toks, candidates, q = drafter.candidate_selector.select(hidden, logits, anchors, 0.0 if argmax else T)
    probs = None
    if q is not None:
        probs = torch.zeros_like(logits).scatter_(-1, candidates, q.float())
    return Proposal(toks, logits, probs)


def propose(drafter, hidden: torch.Tensor, anchors: torch.Tensor, head: Callable, T: float, gen,
            argmax: bool) -> Proposal:
    """Draft positions 1..L-1 of every row."""
    if hasattr(drafter, "propose_blocks"):
        return drafter.propose_blocks(hidden, anchors, head, T, gen, argmax)
    if hasattr(drafter, "candidate_selector"):
        return _dflash2(drafter, hidden, anchors, head, T, argmax)
    return _dflash(drafter, hidden, head, T, gen, argmax)


def block_offset(drafter) -> int:
    """1 when the drafter's block slot k predicts position k (DFlash: the anchor's slot drafts nothing),
    0 when slot k predicts position k+1 (shift-label variants): a block of n inputs drafts n - offset."""
    return int(getattr(drafter, "block_offset", 1))

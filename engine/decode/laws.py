"""Laws on torch rows for speculative sampling (engine/sampling.py), and the target's law at T.

The walk reads a probability per proposal and flips a coin per proposal. Read one at a time from a
device tensor, each is a host sync (on a GPU a stall per proposal), so a round does both in batches:
the values the walk reads first (the target's law at each node of its child's token, each draft's law
of its own token) are gathered in one call before the walk (Law.known), and the coins come from a
pool of uniforms drawn in one call. A value not gathered (a residual's, after a rejection) is read
from its row when asked; a point-mass residual's values follow from its parent's without the row.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..models.variants import tempered


def target_law(logits: torch.Tensor, T: float) -> torch.Tensor:
    """p at temperature T > 0: what the target alone would sample from (no top-k / top-p)."""
    return tempered(logits, T)


class Law:
    """A probability row, made when first needed, with the values of it already known by token."""
    __slots__ = ("_row", "_make", "known")

    def __init__(self, make: Callable[[], torch.Tensor], known: dict[int, float] | None = None):
        self._row, self._make, self.known = None, make, known if known is not None else {}

    def row(self) -> torch.Tensor:
        if self._row is None:
            self._row = self._make()
        return self._row


def _normalised(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """r / sum(r), or `fallback` where r sums to 0 (law == q: rejected with probability 0), without a sync."""
    total = r.sum()
    return torch.where(total > 0, r / torch.where(total > 0, total, 1.0), fallback)


class TorchLaws:
    """engine.sampling.Laws on Law rows; every coin and sample comes from `gen`. Coins are uniforms
    drawn `batch` at a time (each used once: a fresh coin per test, as exactness needs)."""

    def __init__(self, gen: torch.Generator, batch: int = 32):
        self.gen, self.batch, self.pool = gen, max(int(batch), 1), []

    def prob(self, law: Law, token: int) -> float:
        v = law.known.get(token)
        if v is None:
            v = law.known[token] = float(law.row()[token])
        return v

    def residual(self, law: Law, q: Law | None, token: int) -> Law:
        if q is None:  # law with `token` removed: the other values scale by 1 / (1 - p(token))
            rest = 1.0 - self.prob(law, token)
            if rest <= 0:
                return law
            known = {x: v / rest for x, v in law.known.items() if x != token}

            def make() -> torch.Tensor:
                r = law.row().clone()
                r[token] = 0
                return _normalised(r, law.row())
            return Law(make, known)
        return Law(lambda: _normalised((law.row() - q.row()).clamp_(min=0), law.row()))

    def sample(self, law: Law) -> int:
        return int(torch.multinomial(law.row(), 1, generator=self.gen))

    def bernoulli(self, prob: float) -> bool:
        if not self.pool:
            self.pool = torch.rand(self.batch, generator=self.gen, device=self.gen.device).tolist()
        return self.pool.pop() < prob

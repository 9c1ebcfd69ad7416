"""Laws on torch rows for speculative sampling (engine/sampling.py), and the target's law at T."""
from __future__ import annotations

import torch

from ..models.variants import tempered


def target_law(logits: torch.Tensor, T: float) -> torch.Tensor:
    """p at temperature T > 0: what the target alone would sample from (no top-k / top-p)."""
    return tempered(logits, T)


class TorchLaws:
    """engine.sampling.Laws on probability vectors; every coin and sample comes from `gen`."""

    def __init__(self, gen: torch.Generator):
        self.gen = gen

    def prob(self, law: torch.Tensor, token: int) -> float:
        return float(law[token])

    def residual(self, law: torch.Tensor, q: torch.Tensor | None, token: int) -> torch.Tensor:
        if q is None:
            r = law.clone()
            r[token] = 0
        else:
            r = (law - q).clamp_(min=0)
        total = r.sum()
        return r / total if total > 0 else law  # total 0: law == q, rejected with probability 0

    def sample(self, law: torch.Tensor) -> int:
        return int(torch.multinomial(law, 1, generator=self.gen))

    def bernoulli(self, prob: float) -> bool:
        return bool(torch.rand((), generator=self.gen, device=self.gen.device) < prob)

"""The drafter's context K/V cache, shared by every block of a batched drafter call."""
from __future__ import annotations

import torch


class ContextKV:
    """The drafter's context K/V (batch 1, positions < s), shared by every block of a batched call.

    DFlash layers call `update(k, v, layer)` with the new context and block K/V; we prepend the
    stored context (expanded over the batch) and keep the first `keep` new rows of batch row 0:
    the committed context features. Block K/V never persist (they depend on draft tokens).
    """

    def __init__(self):
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.keep = 0

    def __len__(self) -> int:
        return self.k[0].shape[2] if 0 in self.k else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int, *args, **kwargs):
        if layer in self.k:
            n, m = k.shape[0], self.k[layer].shape[2] + self.keep
            if n == 1:  # the baseline alone (a dflash round): no expand, one narrow (each op costs on a small model)
                k_all, v_all = torch.cat([self.k[layer], k], dim=2), torch.cat([self.v[layer], v], dim=2)
                self.k[layer], self.v[layer] = k_all.narrow(2, 0, m), v_all.narrow(2, 0, m)
                return k_all, v_all
            k_all = torch.cat([self.k[layer].expand(n, -1, -1, -1), k], dim=2)
            v_all = torch.cat([self.v[layer].expand(n, -1, -1, -1), v], dim=2)
            self.k[layer], self.v[layer] = k_all[:1, :, :m], v_all[:1, :, :m]
        else:
            k_all, v_all = k, v
            self.k[layer], self.v[layer] = k[:1, :, : self.keep], v[:1, :, : self.keep]
        return k_all, v_all

    def copy(self) -> "ContextKV":
        """A cache that a drafter call can extend without touching this one: update() and crop() replace its
        tensors, never write into them, so new dicts suffice."""
        out = ContextKV()
        out.k, out.v, out.keep = dict(self.k), dict(self.v), self.keep
        return out

    def crop(self, n: int) -> None:
        """Keep the first n context positions."""
        for layer in self.k:
            self.k[layer], self.v[layer] = self.k[layer][:, :, :n], self.v[layer][:, :, :n]

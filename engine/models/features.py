"""The drafter's context features: one definition for decoding (engine/decode/engine.py) and training
(engine/train/recipe.py).

Feature l is what Hugging Face returns as hidden_states[l + 1], the convention of the `dflash` package and of
the released DFlash drafters: the output of decoder layer l, and for the last layer that output after the
model's final norm. It is read with forward hooks on the requested layers only (a 36-layer target would
otherwise keep every layer's states alive in a training batch). tests/test_features.py checks it against
hidden_states[l + 1] for every layer a drafter's config may name.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


def _body(target):
    """The decoder stack of a causal LM (`target.model`) or the stack itself."""
    return getattr(target, "model", target)


class _Tap:
    """Forward hooks on the requested layers of one target, registered once and kept: a hook does nothing
    unless its thread is inside `context_features` (registering and removing hooks for every call
    cost a decoding round on a small model as much as its bookkeeping). One Engine serves runs from
    several threads, and the hooks on the shared target see every thread's forwards: each thread
    records into its own dict."""

    def __init__(self, target, layer_ids: tuple[int, ...]):
        body = _body(target)
        last = len(body.layers) - 1
        self.local = threading.local()

        def keep(l: int):
            def hook(_module, _args, out):
                got = getattr(self.local, "got", None)
                if got is not None:
                    h = out[0] if isinstance(out, tuple) else out
                    got[l] = body.norm(h) if l == last else h   # hidden_states[-1] is the normed output
            return hook

        self.handles = {l: body.layers[l].register_forward_hook(keep(l)) for l in layer_ids}
        self.body = body
        self.keep = keep


def _tap(target, layer_ids: tuple[int, ...]) -> _Tap:
    taps = target.__dict__.setdefault("_feature_taps", {})   # one per layer set, for the target's lifetime
    if layer_ids not in taps:
        taps[layer_ids] = _Tap(target, layer_ids)
    return taps[layer_ids]


@contextmanager
def untapped(target) -> Iterator[None]:
    """The target without its feature hooks for the block (the bench runs the authors' loops on it, which
    should not pay for them). Not for a target that a run is decoding with at the time."""
    taps = list(target.__dict__.get("_feature_taps", {}).values())
    for tap in taps:
        for h in tap.handles.values():
            h.remove()
    try:
        yield
    finally:
        for tap in taps:
            tap.handles = {l: tap.body.layers[l].register_forward_hook(tap.keep(l)) for l in tap.handles}


class context_features:
    """Within the block, forwards of `target` on this thread record the requested layers' outputs; the
    yielded function returns them concatenated (the last dimension), or `like[..., :0]` when no layer
    is requested. A class, not a generator context manager: every verify enters one."""

    __slots__ = ("ids", "local", "got")

    def __init__(self, target, layer_ids: list[int]):
        self.ids = tuple(layer_ids)
        self.local = _tap(target, self.ids).local

    def __enter__(self) -> Callable[[torch.Tensor], torch.Tensor]:
        self.got = self.local.got = {}
        return self.features

    def __exit__(self, *exc) -> None:
        self.local.got = None

    def features(self, like: torch.Tensor) -> torch.Tensor:
        got, ids = self.got, self.ids
        return torch.cat([got[l] for l in ids], -1) if ids else like[..., :0]

"""The drafter's context features: one definition for decoding (engine/decode/engine.py) and training
(engine/train/main.py).

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


@contextmanager
def context_features(target, layer_ids: list[int]) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
    """Within the block, forwards of `target` record the requested layers' outputs; the yielded function
    returns them concatenated (the last dimension), or `like[..., :0]` when no layer is requested. Only this
    thread's forwards are recorded: one Engine serves runs from several threads, and a hook on the shared
    target sees every thread's forwards."""
    body = _body(target)
    layers, got = body.layers, {}
    last = len(layers) - 1
    owner = threading.get_ident()

    def keep(l: int):
        def hook(_module, _args, out):
            if threading.get_ident() != owner:
                return
            h = out[0] if isinstance(out, tuple) else out
            got[l] = body.norm(h) if l == last else h   # hidden_states[-1] is the normed output
        return hook

    hooks = [layers[l].register_forward_hook(keep(l)) for l in layer_ids]

    def features(like: torch.Tensor) -> torch.Tensor:
        return torch.cat([got[l] for l in layer_ids], -1) if layer_ids else like[..., :0]

    try:
        yield features
    finally:
        for h in hooks:
            h.remove()

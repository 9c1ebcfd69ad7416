"""Rotary tables: a model's cos and sin looked up per position, where Hugging Face's rotary modules compute them
again at every model call (a dozen ops: 21 us of a small model's call on this CPU; the lookup is two ops, 4 us).

Static RoPE (STATIC: inv_freq and the attention scaling never change with the sequence) gives position p the
same cos and sin whatever else is in the call: each angle is one product inv_freq[i] * p. So a table the module
itself computes over positions 0..P-1 holds exactly what it would return for any of them; the first build checks
that on scattered positions, and a module that disagrees keeps its own forward.

A table is read only inside `tabled(upto)`, where the caller (the Engine) vouches that every position in the
block's model calls is below `upto`: a lookup past the table faults on a GPU. Everywhere else (training, the
reference loops, a user's own calls) the module's own forward runs.
"""
from __future__ import annotations

import contextlib
import inspect
import threading
import types

import torch

from ..threadvar import setting

STATIC = frozenset({"default", "linear", "llama3", "yarn"})   # dynamic and longrope rescale with the length
_local = threading.local()


def tabled(upto: int) -> setting:
    """Rotary modules called on this thread inside the block look their cos and sin up: every position < upto."""
    return setting(_local, "upto", upto)


def _static(m: torch.nn.Module) -> bool:
    if not type(m).__name__.endswith("RotaryEmbedding"):
        return False
    kind = getattr(m, "rope_type", "default")
    return (isinstance(getattr(m, "inv_freq", None), torch.Tensor) and isinstance(kind, str) and kind in STATIC
            and list(inspect.signature(type(m).forward).parameters) == ["self", "x", "position_ids"])


def install(*models) -> None:
    """Give each static rotary module of these models a table (built at its first use inside `tabled`); once per
    module."""
    for model in models:
        if model is None:
            continue
        for m in model.modules():
            if "_rotary_table" not in m.__dict__ and _static(m):
                m.__dict__["_rotary_table"] = None
                m.forward = types.MethodType(_forward, m)


@contextlib.contextmanager
def untabled(*models):
    """The models' rotary modules with their own forward for the block (the bench runs the authors' loops on them,
    which should not pay for the check)."""
    mods = [m for model in models if model is not None for m in model.modules() if "_rotary_table" in m.__dict__]
    for m in mods:
        del m.forward
    try:
        yield
    finally:
        for m in mods:
            m.forward = types.MethodType(_forward, m)


def _forward(self, x: torch.Tensor, position_ids: torch.Tensor):
    upto = getattr(_local, "upto", None)
    tab = self.__dict__["_rotary_table"]
    if upto and tab is not False:
        if tab is None or tab[0] is not self.inv_freq or tab[1].shape[0] < upto:
            tab = _build(self, upto)
        if tab:
            emb = torch.nn.functional.embedding
            return emb(position_ids, tab[1]).to(x.dtype), emb(position_ids, tab[2]).to(x.dtype)
    return type(self).forward(self, x, position_ids)


def _build(m: torch.nn.Module, upto: int):
    """(inv_freq, cos, sin) over positions 0..n-1 (fp32, as the module computes them before its cast), or False for
    a module whose lookup would not return what it does (it then keeps its own forward)."""
    old = m.__dict__["_rotary_table"]
    n = max(upto, 256, 2 * old[1].shape[0] if old else 0)
    dev = m.inv_freq.device
    with torch.inference_mode(False), torch.no_grad():   # plain tensors: usable outside inference mode
        probe = torch.zeros(1, 1, dtype=torch.float32, device=dev)
        cos, sin = type(m).forward(m, probe, torch.arange(n, device=dev)[None])
        some = torch.tensor([[n - 1, 0, n // 3, 1, n // 2, n - 1]], device=dev)
        c, s = type(m).forward(m, probe, some)
    ok = torch.equal(c[0], cos[0, some[0]]) and torch.equal(s[0], sin[0, some[0]])
    tab = (m.inv_freq, cos[0], sin[0]) if ok else False
    m.__dict__["_rotary_table"] = tab
    return tab

"""oneDNN linears: inside the Engine's model calls, a CPU model's large fp32 Linear layers multiply through oneDNN.

torch's fp32 `F.linear` on a CPU goes to MKL, which for an input of two rows or more packs the weight afresh at every
call: for a model whose weights do not fit in the cache that is one more pass over them. oneDNN's inner product reads
the same dense weight as it is (no copy is kept: training and `.to()` see nothing). On this project's 2-core CPU,
one verify of the embedded SmolLM2-135M at a 256-token context (Engine.time_calls; docs/performance.md):

    nodes         1     2     16    32
    F.linear    40.5  68.7  72.8  110.8  ms
    oneDNN      28.5  38.9  51.1   66.0  ms

and whole runs of `ddtree` 1.65x faster, of `ar` 1.09x (a plain step's one row was never repacked). bf16 already
goes through oneDNN, and on a GPU nothing changes. A small weight (a tiny model's) stays with F.linear: there
oneDNN's fixed cost per call (about 10 us here) is more than the multiplication.

The product is not bit-identical to MKL's (about 1e-6 relative); the Engine's every call (a plain step and a
tree alike) uses it, so decoding stays token-for-token the target's as the Engine computes it. The first call of
a module checks it against F.linear on its own input (a module that disagrees keeps its own forward). Read only
inside `linears()`: training, the user's own calls and Hugging Face's `generate` run the module's own forward.
"""
from __future__ import annotations

import threading
import types

import torch

from ..threadvar import setting

MIN_WEIGHT = 1 << 16      # elements: a 256 x 256 fp32 weight (256 KiB) and up
_local = threading.local()


def linears() -> setting:
    """Large fp32 CPU linears called on this thread inside the block multiply through oneDNN."""
    return setting(_local, "on", True)


def available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _eligible(m: torch.nn.Module) -> bool:
    w = getattr(m, "weight", None)
    return (type(m) is torch.nn.Linear and isinstance(w, torch.Tensor) and w.device.type == "cpu"
            and w.dtype == torch.float32 and w.numel() >= MIN_WEIGHT
            and not (m._forward_hooks or m._forward_pre_hooks))


def install(*models) -> int:
    """Route each eligible Linear of these models through oneDNN inside `linears()`; the number routed."""
    if not available():
        return 0
    n = 0
    for model in models:
        if model is None:
            continue
        for m in model.modules():
            if "_onednn" not in m.__dict__ and _eligible(m):
                m.__dict__["_onednn"] = None        # None: not checked yet; True / False: checked
                m.forward = types.MethodType(_forward, m)
                n += 1
    return n


def uninstall(*models) -> None:
    """The modules' own forward again (the eligible ones keep no state but the check's outcome)."""
    for model in models:
        if model is None:
            continue
        for m in model.modules():
            if "_onednn" in m.__dict__:
                del m.forward, m.__dict__["_onednn"]


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    ok = self.__dict__["_onednn"]
    if getattr(_local, "on", None) and ok is not False and x.dtype == torch.float32 and not (
            torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
        y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        if ok is None:
            ok = _check(self, x, y)
        if ok:
            return y
    return type(self).forward(self, x)


def _check(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> bool:
    """oneDNN's product against F.linear's on the first input: the same up to fp32 rounding, or never used."""
    ref = torch.nn.functional.linear(x, m.weight, m.bias)
    scale = ref.abs().amax().clamp_min(1e-30)
    ok = y.shape == ref.shape and bool(((y - ref).abs().amax() / scale) < 1e-4)
    m.__dict__["_onednn"] = ok
    return ok

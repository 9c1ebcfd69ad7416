"""Stop inside a model call: Run.stop() takes effect at the next layer of the call under way, not at the end
of the round (a round of engine.options.MAX_TRIE_NODES nodes takes seconds on 2 CPU cores).

Each layer of a model's layer lists checks, before its forward, the stop event of the run its thread is
decoding (thread-local: one Engine serves several runs from several threads). A run's state is dropped
with the round it cuts short, so a half-updated cache is never read. The check wraps the layer's forward
rather than being a forward pre-hook: a hook sends every layer call down nn.Module's slow path (its hook
dispatch), which cost 0.7% of a tiny model's round; the wrapper costs 0.06%.
"""
from __future__ import annotations

import signal
import sys
import threading
import types
from contextlib import contextmanager

import torch

from ..threadvar import setting

_local = threading.local()
_lock = threading.Lock()
_ctrl_c = threading.Event()   # the CLI's Ctrl-C, once pressed (catch_ctrl_c)


class Interrupted(Exception):
    """The run's stop() was called during a model call."""


def _check() -> None:
    if _ctrl_c.is_set():
        raise KeyboardInterrupt
    stop = getattr(_local, "stop", None)
    if stop is not None and stop.is_set():
        raise Interrupted


def _checked_forward(self, *args, **kwargs):
    """A layer's forward after the stop check. The forward it wraps (one set on the instance, as accelerate's
    device hooks set one, else the class's) is kept on the instance, so a deep copy calls its own."""
    _check()
    inner = self.__dict__["_unchecked_forward"]
    return inner(*args, **kwargs) if inner is not None else type(self).forward(self, *args, **kwargs)


def catch_ctrl_c() -> None:
    """Ctrl-C ends a command even when Python drops its KeyboardInterrupt: raised inside a weakref callback or
    a finalizer (a thread pool of the model loader collected then), it is printed as "Exception ignored" and the
    decode went on. The press is remembered and raised again at the next model layer. Main thread only; a
    SIGINT that is ignored (a background job) or handled by someone else is left so."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def on_sigint(signum, frame):
        _ctrl_c.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    before = sys.unraisablehook

    def unraisable(u) -> None:  # the dropped one is raised again: no traceback for it
        if not (isinstance(u.exc_type, type) and issubclass(u.exc_type, KeyboardInterrupt)):
            before(u)

    sys.unraisablehook = unraisable


def make_interruptible(*models) -> None:
    """Check for a stop before every layer of each model's layer lists (once per model)."""
    with _lock:
        for model in models:
            if model is None or getattr(model, "_stop_checks", False):
                continue
            for lists in model.modules():
                if isinstance(lists, torch.nn.ModuleList):
                    for layer in lists:
                        if "_unchecked_forward" not in layer.__dict__:
                            layer._unchecked_forward = layer.__dict__.get("forward")
                            layer.forward = types.MethodType(_checked_forward, layer)
            model._stop_checks = True


@contextmanager
def unchecked(*models):
    """The models' layers without the stop check for the block (the bench runs the authors' loops on them,
    which should not pay for it). Not for a model that a run is decoding with at the time."""
    layers = [m for model in models if model is not None for m in model.modules()
              if "_unchecked_forward" in m.__dict__]
    for m in layers:   # back to the forward it wrapped: the class's, or one set on the instance (accelerate's)
        if m.__dict__["_unchecked_forward"] is None:
            del m.forward
        else:
            m.forward = m.__dict__["_unchecked_forward"]
    try:
        yield
    finally:
        for m in layers:
            m.forward = types.MethodType(_checked_forward, m)


def watching(stop: threading.Event) -> setting:
    """Model calls in this block raise Interrupted once `stop` is set."""
    return setting(_local, "stop", stop)

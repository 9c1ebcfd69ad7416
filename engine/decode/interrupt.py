"""Stop inside a model call: Run.stop() takes effect at the next layer of the call under way, not at the end
of the round (a round of engine.options.MAX_TRIE_NODES nodes takes seconds on 2 CPU cores).

Each layer of a model's layer lists gets a forward pre-hook reading the stop event of the run its thread is
decoding (thread-local: one Engine serves several runs from several threads). A run's state is dropped
with the round it cuts short, so a half-updated cache is never read.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

import torch

_local = threading.local()
_lock = threading.Lock()
_ctrl_c = threading.Event()   # the CLI's Ctrl-C, once pressed (catch_ctrl_c)


class Interrupted(Exception):
    """The run's stop() was called during a model call."""


def _check(module, args) -> None:
    if _ctrl_c.is_set():
        raise KeyboardInterrupt
    stop = getattr(_local, "stop", None)
    if stop is not None and stop.is_set():
        raise Interrupted


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
    """Hook every layer of each model's layer lists (once per model)."""
    with _lock:
        for model in models:
            if model is None or getattr(model, "_stop_hooks", False):
                continue
            for lists in model.modules():
                if isinstance(lists, torch.nn.ModuleList):
                    for layer in lists:
                        layer.register_forward_pre_hook(_check)
            model._stop_hooks = True


@contextmanager
def watching(stop: threading.Event):
    """Model calls in this block raise Interrupted once `stop` is set."""
    before = getattr(_local, "stop", None)
    _local.stop = stop
    try:
        yield
    finally:
        _local.stop = before

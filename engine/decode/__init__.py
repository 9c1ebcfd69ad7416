"""Decoding: the Engine's model calls (engine.py), one round (round.py), the run loop (run.py), the
cost budget (cost.py), and greedy ReAnchor in one screen, to read (reference_loop.py). The pure core they
use is engine/attach.py, engine/trie.py and engine/sampling.py."""
from .config import DecodeConfig, validate

__all__ = ["DecodeConfig", "Engine", "Run", "validate"]


def __getattr__(name: str):
    # Engine and Run import torch and transformers (4 s); the app's page needs only DecodeConfig, so they load on
    # first use and the page comes up while the model loader imports them.
    if name == "Engine":
        from .engine import Engine
        return Engine
    if name == "Run":
        from .run import Run
        return Run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

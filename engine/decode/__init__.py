"""Decoding: the Engine's model calls (engine.py), one round (round.py), the run loop (run.py) and
the cost budget (cost.py). The pure core they use is engine/attach.py, engine/trie.py and
engine/sampling.py."""
from .config import DecodeConfig, validate
from .engine import Engine
from .run import Run

__all__ = ["DecodeConfig", "Engine", "Run", "validate"]

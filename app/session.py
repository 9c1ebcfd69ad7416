"""Per-session state (kept in gr.State, never at module level) and trace bookkeeping for the UI."""
from __future__ import annotations

import os
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from engine.paths import TRACES as TRACES_DIR
from engine.trace import load_trace, run_stats, save_trace

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
APP_MAX_NEW_TOKENS = 2048
MAX_PROMPT_CHARS = 20000
FIELD_LABELS = {"prompt": "Prompt", "mode": "Mode", "rule": "Attachment rule", "temperature": "Temperature",
                "seed": "Seed", "max_new_tokens": "Max new tokens", "max_shifted": "Shifted blocks",
                "trace": "Load trace", "schema": "Load trace", "target": "Target", "drafter": "Drafter", "device": "Device"}


def new_state() -> dict:
    """One browser session: the trace shown, the comparison, the running run's stop handle, view flags."""
    return {"trace": None, "compare": None, "run": None, "follow": True, "view": 0, "playing": False,
            "trace_file": None}


def field_label(field: str) -> str:
    f = str(field)
    if f in FIELD_LABELS:
        return FIELD_LABELS[f]
    if f.startswith(("rounds", "stats", "config", "token_texts", "prompt_ids", "output_ids", "text")):
        return "Load trace"
    return f


def example_traces() -> list[tuple[str, str]]:
    if not TRACES_DIR.is_dir():
        return []
    return [(p.stem, str(p)) for p in sorted(TRACES_DIR.glob("*.json"))]


def load_trace_file(path: str) -> dict:
    """Size-limited, JSON-only, validated by engine.trace.load_trace; raises ValueError naming the field."""
    if not path or not os.path.isfile(path):
        raise ValueError("Load trace: no file")
    try:
        return load_trace(path, max_bytes=MAX_UPLOAD_BYTES)
    except ValueError as e:
        raise ValueError(f"Load trace: {e}") from None
    except OSError as e:
        raise ValueError(f"Load trace: cannot read the file ({e.strerror})") from None


@lru_cache(maxsize=8)
def load_example(path: str) -> dict:
    """A shipped example trace, loaded once and shared read-only by every session."""
    return load_trace_file(path)


def export_trace(trace: dict) -> str:
    """Write the trace to a fresh temp file for the download button."""
    cfg = trace.get("config") or {}
    name = f"reanchor-trace-{cfg.get('mode', 'run')}-{cfg.get('rule', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path = Path(tempfile.mkdtemp(prefix="reanchor-app-")) / name
    save_trace(path, trace)
    return str(path)


def stats_of(trace: dict | None) -> dict | None:
    if not trace:
        return None
    if trace.get("stats") and trace.get("complete", True):
        return trace["stats"]
    return run_stats(trace.get("rounds", []), wall_s=trace.get("elapsed_s"))


def clamp_round(trace: dict | None, i) -> int:
    n = len(trace.get("rounds", [])) if trace else 0
    try:
        i = int(i)
    except (TypeError, ValueError):
        i = 0
    return max(0, min(i, n - 1)) if n else 0

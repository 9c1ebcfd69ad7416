"""A trace's files: JSON only (never pickle), loaded within a size and a nesting bound, keys it does not know
dropped (TRACE_KEYS) before validation, saved validated and atomically."""
from __future__ import annotations

import json
import math
import os
import re
import stat

from .records import CONFIG_TYPES, STAGES, STATS_KEYS
from .validation import EXPLORE, WRITE, Limits, TraceError, fail, validate_trace

MAX_TRACE_BYTES = 50 * 1024 * 1024
MAX_NESTING = 32          # JSON levels; ours has 6 (trace > rounds > round > trie > provenance > ids)

# A JSON string; an unclosed one runs to the end (the parser stops there anyway). Without that end, every
# quote after an unclosed string started a new scan to the end: 64 KB of \" took seconds.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_OPEN_CLOSE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def check_nesting(data: bytes, limit: int = MAX_NESTING) -> None:
    """Refuse JSON nested deeper than `limit` before parsing it (the parser recurses once per level).
    Strings out, brackets only; every pass drops the innermost pairs, so after `limit` passes a pair
    left means a deeper level. C-speed passes: a 20 MB trace takes ~0.1 s."""
    s = _JSON_STRING.sub(b"", data).translate(_OPEN_CLOSE, _NOT_BRACKET)
    for _ in range(limit):
        if b"[]" not in s:
            return
        s = s.replace(b"[]", b"")
    if b"[]" in s:
        fail("trace", f"nested deeper than {limit} levels")


def _no_constant(name: str):
    fail("trace", f"not valid JSON ({name} is not a JSON number)")


# What a loaded trace keeps, by where: the keys the engine writes (docs/trace-format.md). Any other key is dropped at
# load, so what a trace holds is what was validated: an unknown key padded with 6.5 M empty objects (19.5 MB) held
# +420 MiB a session, and a number in one (1e400) was written out again as Infinity. A key mapped to None is kept
# as it is (validate_trace checks it); SCALAR (known, read by nothing that checks it): kept only if a string,
# number, true/false or null; a dict: its own keys; a one-item list: each item's keys.
SCALAR = "scalar"
_TRIE_KEYS = {"tokens": None, "parents": None, "depths": None, "provenance": None, "block": None, "rank": None,
              "prob": None, "score": None, "ddtree": {"tokens": None, "parents": None, "score": None}}
_ROUND_KEYS = {
    **dict.fromkeys(("round", "anchor_pos", "anchor", "block_size", "baseline", "baseline_q", "accepted_nodes",
                     "accepted", "bonus", "new_tokens", "target_top1", "retained", "confidence", "draft_ms",
                     "verify_ms", "round_ms")),
    "shifted": [dict.fromkeys(("d", "tokens", "q", "sites", "chosen", "attached", "confidence"))],
    "paths": [dict.fromkeys(("source", "site", "tokens"))], "trie": _TRIE_KEYS,
    "stages_ms": dict.fromkeys(STAGES), "backbone": [dict.fromkeys(("d", "j", "token"))],
    "budget": {**dict.fromkeys(("available", "shifted", "nodes", "expected_tokens", "expected_ms")), "plain": SCALAR}}
TRACE_KEYS = {
    **dict.fromkeys(("schema", "prompt_ids", "output_ids", "first_token", "text", "prompt_text", "token_texts",
                     "prompt_pieces", "output_pieces", "complete", "elapsed_s")),
    "config": {**dict.fromkeys(CONFIG_TYPES), **dict.fromkeys(("argmax_drafts", "ignore_eos"), SCALAR)},
    "stats": {**dict.fromkeys(STATS_KEYS), **dict.fromkeys(("draft_calls", "target_calls"), SCALAR)},
    "rounds": [_ROUND_KEYS]}


def drop_unknown(obj, keys=TRACE_KEYS):
    """`obj` with only the keys `keys` names (TRACE_KEYS), in place; a value of the wrong kind is left for
    validate_trace to refuse."""
    if isinstance(keys, list):
        if isinstance(obj, list):
            keys = keys[0]
            if any(sub is not None for sub in keys.values()):
                for item in obj:
                    drop_unknown(item, keys)
            else:   # objects of ids only (paths, backbone entries: hundreds of thousands a trace): the key check
                allowed = keys.keys()
                for item in obj:
                    if isinstance(item, dict) and not item.keys() <= allowed:
                        drop_unknown(item, keys)
        return obj
    if not isinstance(obj, dict):
        return obj
    if not obj.keys() <= keys.keys():
        for k in [k for k in obj if k not in keys]:
            del obj[k]
    for k, sub in keys.items():
        v = obj.get(k) if sub is not None else None
        if v is None:
            continue
        if sub == SCALAR:
            if isinstance(v, (list, dict)) or (isinstance(v, float) and not math.isfinite(v)):   # 1e400: inf
                del obj[k]
        else:
            drop_unknown(v, sub)
    return obj


def parse_trace(data: bytes, limits: Limits = EXPLORE) -> dict:
    """A validated trace from JSON bytes (UTF-8, or UTF-16/32 as JSON allows: the nesting check reads the
    decoded text; a byte scan of UTF-16, where U+0122 holds a quote byte, missed its brackets)."""
    try:
        text = data.decode(json.detect_encoding(data), "surrogatepass")  # as json.loads(bytes) decodes
    except UnicodeDecodeError as e:
        fail("trace", f"not valid JSON (not {e.encoding} text at byte {e.start})")
    check_nesting(text.encode("utf-8", "surrogatepass"))
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        fail("trace", f"nested deeper than {MAX_NESTING} levels")
    except ValueError as e:  # bad JSON, bad UTF-8, an integer of thousands of digits
        if isinstance(e, TraceError):
            raise
        fail("trace", f"not valid JSON ({str(e)[:200]})")
    return validate_trace(drop_unknown(obj), limits)


def save_trace(path: str | os.PathLike, trace: dict) -> None:
    """Validated first (a broken trace is not written; a long run's may be over what loading explores),
    then atomic: a file at `path` is always a whole trace (an interrupted bench or sweep, resumed,
    trusts what it finds)."""
    validate_trace(trace, WRITE)
    tmp = f"{os.fspath(path)}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            # dumps, not dump: dump encodes in Python, piece by piece (a 13 MB trace: 2.1 s against 0.8 s)
            f.write(json.dumps(trace, ensure_ascii=False, separators=(",", ":"), allow_nan=False))   # never Infinity
        os.replace(tmp, path)
    except BaseException:  # a full disk, a folder of that name, Ctrl-C: no NAME.tmp left behind
        if os.path.isfile(tmp):
            os.unlink(tmp)
        raise


def load_trace(path: str | os.PathLike, max_bytes: int = MAX_TRACE_BYTES, limits: Limits = EXPLORE) -> dict:
    """JSON only (never pickle), size-limited, nesting-limited, validated. A regular file only: a folder, a
    FIFO (whose read would wait forever) or a device is refused, and so is a file that cannot be read
    (/proc/self/mem), naming "trace". A missing file stays FileNotFoundError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once; its kind is checked below
    except FileNotFoundError:
        raise
    except OSError as e:
        fail("trace", f"cannot be opened ({e.strerror or e})")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        fail("trace", "is not a regular file (a folder, FIFO or device)")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:
            fail("trace", f"file is {st.st_size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB limit")
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            fail("trace", f"cannot be read ({e.strerror or e})")
    if len(data) > max_bytes:
        fail("trace", f"file is over the {max_bytes / 2**20:.0f} MiB limit")
    return parse_trace(data, limits)


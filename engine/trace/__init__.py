"""Traces: a run as JSON (schema "reanchor-trace/1"), saved, loaded (JSON only) and validated.

The app and the benchmark read only these records; a trace carries the text of every token it
mentions, so it is explorable without the model or its tokenizer.

A trace file is untrusted input. `load_trace` bounds its size and its nesting before parsing;
`validate_trace` checks types and consistency: every index within its list, depths and sites within
the round's block and trie, parents before children, the accepted chain matching `accepted`,
positions following the committed tokens, integers within 64 bits, every string the page shows Unicode
text (no lone surrogate) and each token's text bounded, and the total work (trie nodes and
drafted tokens over all rounds) within a bound. Whatever reads a valid trace may index it without
guards, and a figure drawn from a round is no bigger than the lists the round holds. Keys it does not
know are dropped at load (TRACE_KEYS), so a loaded trace holds only what was validated.

The rooms: records.py (what a run writes, and the engine's builders of it), validation.py (the checks and
their Limits), io.py (the files: parse, load, save, the keys a loaded trace keeps) and tiled.py (a long
trace from a short one, for memory and time figures). Callers import from here.
"""
from __future__ import annotations

from .io import MAX_NESTING, MAX_TRACE_BYTES, SCALAR, TRACE_KEYS, check_nesting, drop_unknown, load_trace, \
    parse_trace, save_trace
from .records import CONFIG_TYPES, MAX_CHAR_TOKENS, NO_DRAFTER, SCHEMA, STAGES, STATS_KEYS, TextPieces, \
    add_round, add_token_texts, make_trace, new_trace, round_ids, round_record, rounded, run_stats, text_pieces, \
    token_sources, trace_config, trace_drafter
from .tiled import tiled_trace
from .validation import EXPLORE, INT_MAX, INT_MIN, ROUND_CHECKS, TOKEN_MAX, TRACE_CHECKS, WRITE, Limits, \
    TraceError, round_work, unicode_problem, validate_trace

__all__ = ["CONFIG_TYPES", "EXPLORE", "INT_MAX", "INT_MIN", "MAX_CHAR_TOKENS", "MAX_NESTING", "MAX_TRACE_BYTES",
           "NO_DRAFTER", "ROUND_CHECKS", "SCALAR", "SCHEMA", "STAGES", "STATS_KEYS", "TOKEN_MAX", "TRACE_CHECKS",
           "TRACE_KEYS", "WRITE", "Limits", "TextPieces", "TraceError", "add_round", "add_token_texts",
           "check_nesting", "drop_unknown", "load_trace", "make_trace", "new_trace", "parse_trace", "round_ids",
           "round_record", "round_work", "rounded", "run_stats", "save_trace", "text_pieces", "tiled_trace",
           "token_sources", "trace_config", "trace_drafter", "unicode_problem", "validate_trace"]

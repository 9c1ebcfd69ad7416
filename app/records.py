"""Pure helpers over trace round records (the schema in engine/CONTRACT.md); no model, no UI.

The engine owns the definitions (engine.trace, engine.analyses); these are the views the figures need.
"""
from __future__ import annotations

from typing import Any

from engine.analyses import baseline_accepted, round_gain
from engine.trace import token_sources

Round = dict[str, Any]


def path_sources(rec: Round) -> list[int]:
    """Source of every path of the round: 0 for the baseline, d for g(d)."""
    return [int(p["source"]) for p in rec.get("paths", [])]


def node_sources(rec: Round) -> list[list[int]]:
    """For every trie node, the sorted distinct sources (0 = baseline, d = g(d)) of the paths through it."""
    srcs = path_sources(rec)
    out = []
    for prov in rec["trie"]["provenance"]:
        out.append(sorted({srcs[i] for i in prov if 0 <= i < len(srcs)}))
    return out


def node_category(sources: list[int]) -> str:
    """'baseline' (baseline paths only), 'shared' (baseline and a shifted block) or 'd<k>' (shifted only)."""
    if not sources:
        return "baseline"
    if sources == [0]:
        return "baseline"
    if 0 in sources:
        return "shared"
    return f"d{min(sources)}"


def round_lengths(rec: Round) -> dict[str, int]:
    """Accepted length split: baseline-alone drafts, the gain through other branches of g(0)'s own
    ranking (tree modes), the gain through shifted blocks, and the bonus (1 unless the round was cut)."""
    a = int(rec.get("accepted", 0))
    base = min(baseline_accepted(rec), a)
    committed = len(rec.get("new_tokens", [])) or a + 1
    d, extra = round_gain(rec)
    branches = extra if d == 0 else 0
    return {"baseline": base, "branches": branches, "shifted": a - base - branches,
            "bonus": max(0, committed - a), "accepted": a}


def token_rounds(trace: dict) -> list[int]:
    """For every generated token k (output_ids index), the round that produced it (-1: the prefill)."""
    out = [-1]
    for rec in trace.get("rounds", []):
        out.extend([int(rec["round"])] * len(rec.get("new_tokens", [])))
    return out

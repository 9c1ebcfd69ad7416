"""Pure helpers over trace round records (the schema in engine/CONTRACT.md); no model, no UI."""
from __future__ import annotations

from typing import Any

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


def token_sources(rec: Round) -> list[str]:
    """Provenance of each token the round commits: 'baseline', 'd<k>' or 'bonus' (the engine's rule)."""
    from engine.trace import token_sources as engine_sources
    return engine_sources(rec)


def baseline_alone(rec: Round) -> int:
    """Accepted drafts the baseline alone would have given (the analyses' definition)."""
    from engine.analyses import baseline_accepted
    return baseline_accepted(rec)


def round_lengths(rec: Round) -> dict[str, int]:
    """Accepted length split: baseline-alone drafts, shifted gain, bonus (1 unless the round was cut)."""
    a = int(rec.get("accepted", 0))
    base = min(baseline_alone(rec), a)
    committed = len(rec.get("new_tokens", [])) or a + 1
    return {"baseline": base, "shifted": a - base, "bonus": max(0, committed - a), "accepted": a}


def round_ids(rec: Round) -> set[int]:
    """Every token id a round record mentions (for token-text maps)."""
    ids = {int(rec["anchor"]), int(rec.get("bonus", rec["anchor"]))}
    ids.update(rec.get("baseline", []))
    for s in rec.get("shifted", []):
        ids.update(s.get("tokens", []))
    ids.update(rec["trie"]["tokens"])
    ids.update(rec.get("target_top1", []))
    ids.update(rec.get("new_tokens", []))
    return {int(i) for i in ids}


def summary(rounds: list[Round], wall_s: float | None = None, new_tokens: int | None = None) -> dict:
    """tau, rounds, tokens, tokens/s from round records (for a run in progress)."""
    n = len(rounds)
    tau = sum(int(r.get("accepted", 0)) + 1 for r in rounds) / n if n else 0.0
    toks = new_tokens if new_tokens is not None else 1 + sum(len(r.get("new_tokens", [])) for r in rounds)
    if wall_s is None:
        wall_s = sum(float(r.get("round_ms", 0.0)) for r in rounds) / 1000.0
    return {"tau": tau, "rounds": n, "new_tokens": toks, "wall_s": wall_s,
            "tokens_per_s": toks / wall_s if wall_s and wall_s > 0 else 0.0, "target_calls": n + 1}


def token_rounds(trace: dict) -> list[int]:
    """For every generated token k (output_ids index), the round that produced it (-1: the prefill)."""
    out = [-1]
    for rec in trace.get("rounds", []):
        out.extend([int(rec["round"])] * len(rec.get("new_tokens", [])))
    return out

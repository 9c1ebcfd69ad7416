"""A long trace from a short one (tiled_trace): for memory and time figures at any size, in the app's memory
cycle and the tests."""
from __future__ import annotations

import json


def _relabeled_round(r: dict, swap: dict[int, int], shift: int, index: int) -> dict:
    """A copy of round r with token ids swapped (a bijection), positions shifted and a new index."""
    def m(tokens):
        return [swap.get(t, t) for t in tokens]

    out = json.loads(json.dumps(r))
    out.update(round=index, anchor_pos=r["anchor_pos"] + shift, anchor=swap.get(r["anchor"], r["anchor"]),
               bonus=swap.get(r["bonus"], r["bonus"]), baseline=m(r["baseline"]), new_tokens=m(r["new_tokens"]),
               target_top1=m(r["target_top1"]))
    for b in out["shifted"]:
        b["tokens"] = m(b["tokens"])
    for p in out["paths"]:
        p["tokens"] = m(p["tokens"])
    out["trie"]["tokens"] = m(r["trie"]["tokens"])
    return out


def tiled_trace(trace: dict, copies: int) -> dict:
    """A valid trace `copies` times as long: the rounds again and again, each copy continuing the last.

    Every other copy swaps two token ids (the first token and the last one), so each copy's first
    anchor is the token the copy before committed last: positions, anchors and the output chain stay
    consistent and the result passes validate_trace. For memory and time figures at any size."""
    first, last = trace["first_token"], trace["output_ids"][-1]
    swap = {first: last, last: first} if first != last else {}
    rounds, out = [], [first]
    step = len(trace["output_ids"]) - 1
    for c in range(copies):
        for r in trace["rounds"]:
            rec = _relabeled_round(r, swap if c % 2 else {}, c * step, len(rounds))
            rounds.append(rec)
            out += rec["new_tokens"]
    tiled = {k: v for k, v in trace.items() if k not in ("output_pieces",)}
    tiled.update(rounds=rounds, output_ids=out, text=trace["text"] * copies)
    tiled["stats"] = {**trace["stats"], "rounds": len(rounds), "new_tokens": len(out)}
    return tiled

"""Traces: a run as JSON (schema "reanchor-trace/1"), saved, loaded (JSON only) and validated.

The app and the benchmark read only these records; a trace carries the text of every token it
mentions, so it is explorable without the model or its tokenizer.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict

SCHEMA = "reanchor-trace/1"
MAX_TRACE_BYTES = 50 * 1024 * 1024

ROUND_KEYS = {"round": int, "anchor_pos": int, "anchor": int, "block_size": int, "baseline": list,
              "shifted": list, "paths": list, "trie": dict, "accepted_nodes": list, "accepted": int,
              "bonus": int, "new_tokens": list, "target_top1": list, "retained": int,
              "draft_ms": (int, float), "verify_ms": (int, float), "round_ms": (int, float)}
TOP_KEYS = {"schema": str, "config": dict, "prompt_ids": list, "output_ids": list, "text": str,
            "stats": dict, "rounds": list, "token_texts": dict}
STATS_KEYS = ("tau", "rounds", "new_tokens", "wall_s", "tokens_per_s")


class TraceError(ValueError):
    """A trace file that is not a valid reanchor trace; the message says where."""


def round_record(i: int, s: int, L: int, baseline: list[int], shifted: dict[int, list[int]], info: dict,
                 paths: list, trie, chain: list[int], bonus: int, new: list[int], top1: list[int], m: int,
                 draft_ms: float, verify_ms: float, round_ms: float) -> dict:
    """One round as the schema above (engine/CONTRACT.md) records it."""
    return {
        "round": i, "anchor_pos": s, "anchor": baseline[0], "block_size": L,
        "baseline": baseline,
        "shifted": [{"d": d, "tokens": shifted[d], "sites": info[d]["sites"],
                     "chosen": info[d]["attached"][0] if info[d]["attached"] else None,
                     "attached": info[d]["attached"]} for d in sorted(shifted)],
        "paths": [{"source": p.source, "site": p.site, "tokens": p.tokens} for p in paths],
        "trie": {"tokens": trie.tokens, "parents": trie.parents, "depths": trie.depths,
                 "provenance": trie.provenance},
        "accepted_nodes": chain, "accepted": len(chain) - 1, "bonus": bonus,
        "new_tokens": new, "target_top1": top1, "retained": m,
        "draft_ms": round(draft_ms, 3), "verify_ms": round(verify_ms, 3), "round_ms": round(round_ms, 3),
    }


def run_stats(rounds: list[dict], new_tokens: int | None = None, wall_s: float | None = None) -> dict:
    """tau, rounds, tokens, time and model calls of a run (or of its rounds so far): `new_tokens`
    defaults to the prefill's token plus every round's, `wall_s` to the rounds' own times."""
    n = len(rounds)
    if new_tokens is None:
        new_tokens = 1 + sum(len(r.get("new_tokens", [])) for r in rounds)
    if wall_s is None:
        wall_s = sum(float(r.get("round_ms", 0.0)) for r in rounds) / 1000.0
    return {"tau": sum(int(r.get("accepted", 0)) + 1 for r in rounds) / n if n else 0.0,
            "rounds": n, "new_tokens": new_tokens, "wall_s": wall_s,
            "tokens_per_s": new_tokens / wall_s if wall_s and wall_s > 0 else 0.0,
            "target_calls": n + 1, "draft_calls": sum(1 for r in rounds if r.get("block_size", 0) >= 2)}


def round_ids(rec: dict) -> set[int]:
    """Every token id a round record mentions."""
    ids = {int(rec["anchor"]), int(rec.get("bonus", rec["anchor"]))}
    ids.update(rec.get("baseline", []))
    for b in rec.get("shifted", []):
        ids.update(b.get("tokens", []))
    ids.update(rec["trie"]["tokens"])
    ids.update(rec.get("target_top1", []))
    ids.update(rec.get("new_tokens", []))
    return {int(i) for i in ids}


def add_token_texts(token_texts: dict, tokenizer, ids) -> dict:
    """The decoded piece of every id not yet in the map (keys are strings, as in JSON)."""
    for i in sorted({int(i) for i in ids}):
        if str(i) not in token_texts:
            token_texts[str(i)] = tokenizer.decode([i])
    return token_texts


def new_trace(config: dict, prompt_ids: list[int], tokenizer) -> dict:
    """A trace of a run in progress: `add_round` appends to it; `complete` is False until the
    run's own trace (make_trace) replaces it."""
    return {"schema": SCHEMA, "config": config, "prompt_ids": list(prompt_ids),
            "token_texts": add_token_texts({}, tokenizer, prompt_ids), "rounds": [], "first_token": None,
            "stats": {}, "complete": False}


def add_round(live: dict, rec: dict, tokenizer) -> None:
    if live["first_token"] is None:
        live["first_token"] = int(rec["anchor"])
    add_token_texts(live["token_texts"], tokenizer, round_ids(rec))
    live["rounds"].append(rec)


def make_trace(run) -> dict:
    """The whole trace of a finished (or stopped) run."""
    eng = run.engine
    m = eng.models
    cfg = asdict(run.cfg)
    cfg.update(target=m.target_name, drafter=m.drafter_name if run.cfg.mode != "ar" else "none",
               device=str(m.device), dtype=str(m.dtype).replace("torch.", ""),
               block_size=run.rounds[0]["block_size"] if run.rounds and run.cfg.mode != "ar"
               else (run.cfg.block_size or (m.drafter.block_size if m.drafter else 1)))
    ids = set(run.prompt_ids) | set(run.output_ids)
    for r in run.rounds:
        ids |= round_ids(r)
    tok = m.tokenizer
    return {"schema": SCHEMA, "config": cfg, "prompt_ids": run.prompt_ids,
            "prompt_text": tok.decode(run.prompt_ids), "first_token": run.output_ids[0],
            "output_ids": run.result["output_ids"], "text": run.result["text"],
            "stats": run.result["stats"], "token_texts": add_token_texts({}, tok, ids), "rounds": run.rounds}


def _check(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise TraceError(f"{where}: {what}")


def _ints(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def validate_trace(obj) -> dict:
    """Check the structure and the internal consistency that the app relies on."""
    _check(isinstance(obj, dict), "trace", "is not a JSON object")
    _check(obj.get("schema") == SCHEMA, "schema", f"expected {SCHEMA!r}, got {obj.get('schema')!r}")
    for k, t in TOP_KEYS.items():
        _check(isinstance(obj.get(k), t), k, f"missing or not a {t.__name__}")
    for k in ("prompt_ids", "output_ids"):
        _check(_ints(obj[k]), k, "must be a list of token ids")
    for k in STATS_KEYS:
        _check(isinstance(obj["stats"].get(k), (int, float)), f"stats.{k}", "missing or not a number")
    for i, r in enumerate(obj["rounds"]):
        w = f"rounds[{i}]"
        _check(isinstance(r, dict), w, "is not an object")
        for k, t in ROUND_KEYS.items():
            _check(isinstance(r.get(k), t) and not isinstance(r.get(k), bool), f"{w}.{k}",
                   "missing or of the wrong type")
        trie = r["trie"]
        for k in ("tokens", "parents", "depths"):
            _check(_ints(trie.get(k)), f"{w}.trie.{k}", "must be a list of integers")
        n = len(trie["tokens"])
        _check(n >= 1 and len(trie["parents"]) == n and len(trie["depths"]) == n
               and len(trie.get("provenance", [])) == n, f"{w}.trie", "lists of unequal length")
        _check(all(-1 <= p < j for j, p in enumerate(trie["parents"])) and trie["parents"][0] == -1,
               f"{w}.trie.parents", "a parent must precede its child")
        _check(len(r["target_top1"]) == n, f"{w}.target_top1", "needs one entry per trie node")
        _check(_ints(r["accepted_nodes"]) and all(0 <= a < n for a in r["accepted_nodes"])
               and len(r["accepted_nodes"]) == r["accepted"] + 1, f"{w}.accepted_nodes",
               "must list the root and the accepted nodes")
        _check(_ints(r["baseline"]) and _ints(r["new_tokens"]), w, "token lists must hold ids")
        for j, b in enumerate(r["shifted"]):
            _check(isinstance(b, dict) and isinstance(b.get("d"), int) and _ints(b.get("tokens"))
                   and _ints(b.get("sites")) and (b.get("chosen") is None or isinstance(b["chosen"], int)),
                   f"{w}.shifted[{j}]", "needs d, tokens, sites, chosen")
        for j, p in enumerate(r["paths"]):
            _check(isinstance(p, dict) and isinstance(p.get("source"), int) and _ints(p.get("tokens")),
                   f"{w}.paths[{j}]", "needs source and tokens")
    return obj


def save_trace(path: str | os.PathLike, trace: dict) -> None:
    """Atomic: a file at `path` is always a whole trace (an interrupted bench or sweep, resumed, trusts
    what it finds)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(trace, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(tmp, path)


def load_trace(path: str | os.PathLike, max_bytes: int = MAX_TRACE_BYTES) -> dict:
    """JSON only (never pickle), size-limited, validated."""
    size = os.path.getsize(path)
    if size > max_bytes:
        raise TraceError(f"trace: file is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB limit")
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"trace: not valid JSON ({e})") from None
    return validate_trace(obj)


def token_sources(rnd: dict) -> list[str]:
    """Per committed token of a round: 'baseline' if the baseline path holds it, else 'd<k>' for
    the first shifted block whose path holds it; the round's last token is the target's 'bonus'."""
    paths, prov = rnd["paths"], rnd["trie"]["provenance"]
    out = []
    for node in rnd["accepted_nodes"][1:len(rnd["new_tokens"]) + 1]:
        srcs = [paths[p]["source"] for p in prov[node]]
        out.append("baseline" if 0 in srcs else f"d{min(srcs)}")
    if len(out) < len(rnd["new_tokens"]):
        out.append("bonus")
    return out

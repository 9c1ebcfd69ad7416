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
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import asdict, dataclass

from .errors import InputError

SCHEMA = "reanchor-trace/1"
MAX_TRACE_BYTES = 50 * 1024 * 1024
MAX_NESTING = 32          # JSON levels; ours has 6 (trace > rounds > round > trie > provenance > ids)
TOKEN_MAX = 2**31 - 1     # token ids are 0..TOKEN_MAX
INT_MIN, INT_MAX = -2**63, 2**63 - 1

STATS_KEYS = ("tau", "rounds", "new_tokens", "wall_s", "tokens_per_s")
# Optional config entries the app reads, and what each must be when present.
CONFIG_TYPES = {"mode": str, "rule": str, "temperature": (int, float), "seed": int, "max_new_tokens": int,
                "block_size": (int, type(None)), "max_shifted": (int, str, type(None)),
                "max_trie_nodes": (int, str, type(None)), "acceptance": str, "target": str, "drafter": str, "device": str, "dtype": str,
                "tree_rank": str, "calibration": str, "draft_dtype": str, "draft_head_dtype": str}
MAX_CHAR_TOKENS = 4       # a UTF-8 character has at most 4 bytes: byte-level tokens split it over at most 4


@dataclass(frozen=True)
class Limits:
    """How big a valid trace may be. EXPLORE, for loading (the app draws and analyses all of a trace, so
    these bound its time and memory); WRITE, for saving (a long run's trace is written whole, and
    `check-trace` says when it is too big to explore)."""
    block_size: int = 128      # tokens per drafted block (the shipped DFlash drafter: 16)
    round_nodes: int = 8192    # trie nodes in one round (a round at the bound draws in ~2 s in Chromium)
    rounds: int = 50_000
    work: int = 8_000_000      # trie nodes, drafted and path tokens, provenance entries: over all rounds
    token_text: int = 1000     # characters of one token's text or piece (a real one has a few dozen at most)
    prompt_tokens: int = 32_768  # prompt ids (7 M fit in 16 MB: 7 s to load, +650 MB, seconds a text jump)
    token_texts: int = 262_144   # entries of token_texts: a vocabulary's worth (the largest are ~256 K)


EXPLORE = Limits()
WRITE = Limits(block_size=2**31, round_nodes=2**31, rounds=2**31, work=2**62, token_text=2**62, prompt_tokens=2**62,
               token_texts=2**62)


class TraceError(InputError):
    """A trace that is not a valid reanchor trace: `field` is where (e.g. "rounds[3].trie.depths[7]")."""


def rounded(values, places: int) -> list[float]:
    """`values` as a record keeps them, to `places` decimals: round(x * 10^p) / 10^p, the double nearest k / 10^p as
    round(x, p) gives (they differ only for a value within an ulp of a half; none in 2 M random log-probabilities)
    at a quarter of its cost: Python's round(x, p) took about 1.3% of a small model's dflash round. Infinities and
    NaN stay as they are."""
    scale = 10.0 ** places
    return [round(x * scale) / scale if -1e15 < x < 1e15 else x for x in values]


def round_record(i: int, s: int, L: int, baseline: list[int], shifted: dict[int, list[int]], info: dict,
                 paths: list, trie, chain: list[int], bonus: int, new: list[int], top1: list[int], m: int,
                 draft_ms: float, verify_ms: float, round_ms: float, facts: dict | None = None,
                 budget: dict | None = None, q: list[list[float]] | None = None, notes: dict | None = None) -> dict:
    """One round as the schema above (docs/trace-format.md) records it; the times (ms) are kept as given (rounded,
    to 3 decimals, by the caller, which sets them again with the record's own). `facts`: per trie node lists
    (block, rank, prob, score) kept in the record's "trie"; `budget`: what the cost budget chose; `q`:
    per drafted row (the baseline, then the shifted blocks by d), each draft's probability under the law
    it was drawn from; None for argmax drafts. `notes` (drafters with a head, round.head_notes):
    "confidence" {row: [L-1 floats]} and "backbone" [{d, j, token}], both optional."""
    qs = [[min(1.0, float(f"{x:.6g}")) for x in row] for row in q] if q is not None else [None] * (1 + len(shifted))
    notes = notes or {}
    conf = notes.get("confidence")
    rec = {
        "round": i, "anchor_pos": s, "anchor": baseline[0], "block_size": L,
        "baseline": baseline, "baseline_q": qs[0],
        "shifted": [{"d": d, "tokens": shifted[d], "q": qs[r], "sites": info[d]["sites"],
                     "chosen": info[d]["attached"][0] if info[d]["attached"] else None,
                     "attached": info[d]["attached"]} | _conf(conf, d) for r, d in enumerate(sorted(shifted), 1)],
        "paths": [{"source": p.source, "site": p.site, "tokens": p.tokens} for p in paths],
        "trie": {"tokens": trie.tokens, "parents": trie.parents, "depths": trie.depths,
                 "provenance": trie.provenance, **(facts or {})},
        "accepted_nodes": chain, "accepted": len(chain) - 1, "bonus": bonus,
        "new_tokens": new, "target_top1": top1, "retained": m,
    }
    if conf:
        rec |= _conf(conf, 0)
    rec["draft_ms"], rec["verify_ms"], rec["round_ms"] = draft_ms, verify_ms, round_ms   # rounded by the caller
    if budget is not None:
        rec["budget"] = budget
    if "backbone" in notes:
        rec["backbone"] = notes["backbone"]
    return rec


def _conf(conf: dict | None, row: int) -> dict:
    return {"confidence": rounded(conf[row], 4)} if conf else {}


def run_stats(rounds: list[dict], new_tokens: int | None = None, wall_s: float | None = None) -> dict:
    """tau, rounds, tokens, time and model calls of a run (or of its rounds so far): `new_tokens`
    defaults to the prefill's token plus every round's, `wall_s` to the rounds' own times."""
    n = len(rounds)
    if new_tokens is None:
        new_tokens = 1 + sum(len(r.get("new_tokens", [])) for r in rounds)
    if wall_s is None:
        wall_s = sum(float(r.get("round_ms", 0.0)) for r in rounds) / 1000.0
    # tau: tokens committed per round, accepted drafts + the bonus, except where the run's end cut the
    # round (max_new_tokens leaves no room for the bonus; drafts past a stop token are dropped)
    return {"tau": sum(len(r.get("new_tokens", [])) for r in rounds) / n if n else 0.0,
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
    ids.update(b["token"] for b in rec.get("backbone", []))
    return {int(i) for i in ids}


def add_token_texts(token_texts: dict, tokenizer, ids) -> dict:
    """The decoded piece of every id not yet in the map (keys are strings, as in JSON)."""
    for i in sorted({int(i) for i in ids}):
        if str(i) not in token_texts:
            token_texts[str(i)] = tokenizer.decode([i])
    return token_texts


class TextPieces:
    """Per token, the characters it completes when its sequence is decoded as a whole.

    Byte-level BPE splits characters over tokens (a Chinese character is 3 UTF-8 bytes, an emoji 4),
    and each part decoded alone is U+FFFD. Here a token ending inside a character gives the characters
    it completes ("" if none) and the token completing it the rest, so the pieces join to the decoded
    text: the text view shows any script as written, each token in its own colour. Feed a sequence's
    tokens in order, in one call or several (a run streams them round by round).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.open: list[int] = []   # tokens since the last character boundary
        self.given = 0              # characters of decode(open) already given out

    def add(self, ids) -> list[str]:
        out = []
        for i in ids:
            self.open.append(int(i))
            text = self.tokenizer.decode(self.open)
            if text.endswith("\ufffd") and len(self.open) < MAX_CHAR_TOKENS:  # inside a character
                done = text.rstrip("\ufffd")
                out.append(done[self.given:])
                self.given = max(self.given, len(done))
            else:  # at a boundary, or bytes that never make a character: give them as they decode
                out.append(text[self.given:])
                self.open, self.given = [], 0
        return out


    def finish(self) -> str:
        """What the tokens still open decode to (U+FFFD for a character cut short), for the last piece."""
        rest = self.tokenizer.decode(self.open)[self.given:] if self.open else ""
        self.open, self.given = [], 0
        return rest


def text_pieces(tokenizer, ids) -> list[str]:
    """The pieces of a whole sequence: they join to tokenizer.decode(ids)."""
    tp = TextPieces(tokenizer)
    out = tp.add(ids)
    if out:
        out[-1] += tp.finish()
    return out


def new_trace(config: dict, prompt_ids: list[int], tokenizer) -> dict:
    """A trace of a run in progress: `add_round` appends to it; `complete` is False until the
    run's own trace (make_trace) replaces it."""
    return {"schema": SCHEMA, "config": config, "prompt_ids": list(prompt_ids),
            "token_texts": add_token_texts({}, tokenizer, prompt_ids), "rounds": [], "first_token": None,
            "prompt_pieces": text_pieces(tokenizer, prompt_ids), "output_pieces": [],
            "stats": {}, "complete": False}


def add_round(live: dict, rec: dict, tokenizer, pieces: TextPieces) -> None:
    """Append a verified round; `pieces` decodes the run's generated tokens (one per run)."""
    new = list(rec["new_tokens"])
    if live["first_token"] is None:
        live["first_token"] = int(rec["anchor"])
        new.insert(0, live["first_token"])
    add_token_texts(live["token_texts"], tokenizer, round_ids(rec))
    live["output_pieces"] += pieces.add(new)
    live["rounds"].append(rec)


NO_DRAFTER = "none"   # the drafter a trace's config names for an `ar` run, which drafts nothing


def trace_drafter(mode: str, drafter: str | None) -> str | None:
    """The drafter a trace of this mode names (config.drafter)."""
    return NO_DRAFTER if mode == "ar" else drafter


def trace_config(settings: dict, *, target: str, drafter: str | None, device: str, dtype: str,
                 block_size: int, draft_dtype: str | None = None, draft_head_dtype: str | None = None) -> dict:
    """A trace's `config` block (docs/trace-format.md): a run's settings (DecodeConfig's fields) and the models
    it ran on, by name. The one builder: finished runs (make_trace), live ones (the app) and the sweep's
    --resume check read their names from it."""
    drafts = {} if settings["mode"] == "ar" or draft_dtype is None else \
        {"draft_dtype": draft_dtype, "draft_head_dtype": draft_head_dtype}   # the drafts depend on both
    return {**settings, "target": target, "drafter": trace_drafter(settings["mode"], drafter),
            "device": device, "dtype": dtype, **drafts, "block_size": block_size}


def make_trace(config: dict, prompt_ids: list[int], result: dict, rounds: list[dict], tokenizer) -> dict:
    """The whole trace of a finished (or stopped) run, from its records: `config` (trace_config), `result`
    ({output_ids, text, stats}: generated ids, the first token first) and the round records."""
    out = result["output_ids"]
    ids = set(prompt_ids) | set(out)
    for r in rounds:
        ids |= round_ids(r)
    return {"schema": SCHEMA, "config": config, "prompt_ids": list(prompt_ids),
            "prompt_text": tokenizer.decode(prompt_ids), "first_token": out[0],
            "output_ids": out, "text": result["text"],
            "stats": result["stats"], "token_texts": add_token_texts({}, tokenizer, ids),
            "prompt_pieces": text_pieces(tokenizer, prompt_ids), "output_pieces": text_pieces(tokenizer, out),
            "rounds": rounds}


# ---------------------------------------------------------------- validation
# Small checks, one concern each; a check raises TraceError naming the field. To check a new optional
# field, add a function and list it in ROUND_CHECKS (per round) or TRACE_CHECKS (whole trace).

def _fail(where: str, what: str):
    raise TraceError(where, what)


def _show(v) -> str:
    """A value as a message shows it: short, and named by kind when it is not a scalar."""
    if isinstance(v, (dict, list)):
        return f"{'an object' if isinstance(v, dict) else 'a list'} of {len(v)}"
    if v is None:
        return "null"
    s = repr(v)
    return s if len(s) <= 40 else f"{s[:37]}..."


def _is_int(v, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _int(v, where: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    if not _is_int(v, lo, hi):
        want = (f"{lo}" if lo == hi else "a whole number within 64 bits" if (lo, hi) == (INT_MIN, INT_MAX)
                else f"a whole number from {lo}, within 64 bits" if hi == INT_MAX
                else f"a whole number from {lo} to {hi}")
        _fail(where, f"must be {want}, got {_show(v)}")
    return v


def _opt_int(v, where: str, lo: int, hi: int) -> int | None:
    return None if v is None else _int(v, where, lo, hi)


def _number(v, where: str) -> float:
    if not ((type(v) is float and math.isfinite(v)) or _is_int(v, INT_MIN, INT_MAX)):
        _fail(where, f"must be a finite number, got {_show(v)}")
    return v


def _list(v, where: str, lo: int = 0, hi: int | None = None) -> list:
    if not isinstance(v, list):
        _fail(where, f"must be a list, got {_show(v)}")
    if len(v) < lo or (hi is not None and len(v) > hi):
        want = f"exactly {lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        _fail(where, f"must hold {want} entries, holds {len(v)}")
    return v


def _ints(v, where: str, lo: int, hi: int, n_lo: int = 0, n_hi: int | None = None) -> list[int]:
    """A list of whole numbers in [lo, hi] with n_lo..n_hi entries (checked at C speed, then located)."""
    _list(v, where, n_lo, n_hi)
    if v and not (set(map(type, v)) == {int} and lo <= min(v) and max(v) <= hi):
        j = next(j for j, x in enumerate(v) if not _is_int(x, lo, hi))
        _int(v[j], f"{where}[{j}]", lo, hi)
    return v


def _ids(v, where: str, n_lo: int = 0, n_hi: int | None = None) -> list[int]:
    return _ints(v, where, 0, TOKEN_MAX, n_lo, n_hi)


def _obj(v, where: str) -> dict:
    if not isinstance(v, dict):
        _fail(where, f"must be an object, got {_show(v)}")
    return v


def _objects(v, where: str, lo: int, hi: int):
    """(name, object) for each entry of a list of objects."""
    for j, b in enumerate(_list(v, where, lo, hi)):
        yield f"{where}[{j}]", _obj(b, f"{where}[{j}]")


def _from_anchor(tokens: list[int], where: str, anchor: int) -> None:
    if tokens[0] != anchor:
        _fail(f"{where}[0]", f"must be the anchor {anchor}, got {tokens[0]}")


def _str(v, where: str) -> str:
    if not isinstance(v, str):
        _fail(where, f"must be a string, got {_show(v)}")
    return v


def _encodes(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unicode_problem(s: str) -> str | None:
    """Why `s` is not Unicode text, or None: JSON's "\\ud800" escape (or an API call) gives a lone surrogate,
    which UTF-8 (a page, a file) cannot carry; left in, the page's answer would fail after the input was taken."""
    if _encodes(s):
        return None
    j = next(j for j, ch in enumerate(s) if 0xD800 <= ord(ch) <= 0xDFFF)
    return f"is not valid Unicode text (a lone surrogate \\u{ord(s[j]):04x} at character {j})"


def _texts(named, where, lim: Limits, n_max: int | None = None) -> None:
    """Strings shown on the page, as (name, string) pairs (all already strings): each Unicode text, and
    at most `n_max` characters. Checked at C speed first (joined), then located."""
    named = list(named)
    strings = [v for _, v in named]
    if n_max is not None and strings and max(map(len, strings)) > n_max:
        name, v = next((name, v) for name, v in named if len(v) > n_max)
        _fail(where(name), f"holds {len(v):,} characters, over the {n_max:,} a token's text may have")
    if not _encodes("".join(strings)):  # a surrogate never pairs across strings here: Python keeps it lone
        name, v = next((name, v) for name, v in named if not _encodes(v))
        _fail(where(name), unicode_problem(v))


def check_round_scalars(r: dict, w: str, lim: Limits) -> None:
    _int(r.get("anchor_pos"), f"{w}.anchor_pos", 0)
    _int(r.get("anchor"), f"{w}.anchor", 0, TOKEN_MAX)
    _int(r.get("bonus"), f"{w}.bonus", 0, TOKEN_MAX)
    _int(r.get("block_size"), f"{w}.block_size", 1, lim.block_size)
    _int(r.get("accepted"), f"{w}.accepted", 0, lim.round_nodes - 1)
    _int(r.get("retained"), f"{w}.retained", 0)
    for k in ("draft_ms", "verify_ms", "round_ms"):
        _number(r.get(k), f"{w}.{k}")


STAGES = ("draft", "build", "verify", "accept", "record")   # a round's stages_ms, in order


def check_stages(r: dict, w: str, lim: Limits) -> None:
    """Optional "stages_ms" (traces from before it have none): milliseconds per stage of the round,
    each a finite number >= 0; keys from STAGES (others are kept, unchecked, as anywhere)."""
    if "stages_ms" not in r:
        return
    st = _obj(r["stages_ms"], f"{w}.stages_ms")
    for k in STAGES:
        if k in st and _number(st[k], f"{w}.stages_ms.{k}") < 0:
            _fail(f"{w}.stages_ms.{k}", f"is negative: {_show(st[k])}")


def check_baseline(r: dict, w: str, lim: Limits) -> None:
    _from_anchor(_ids(r.get("baseline"), f"{w}.baseline", r["block_size"], r["block_size"]), f"{w}.baseline",
                 r["anchor"])


def check_shifted(r: dict, w: str, lim: Limits) -> None:
    """Each g(d): its tokens (a block), its matching sites, the chosen and attached ones among them."""
    L = r["block_size"]
    for wj, b in _objects(r.get("shifted"), f"{w}.shifted", 0, lim.block_size):
        _int(b.get("d"), f"{wj}.d", 1, lim.block_size)
        _ids(b.get("tokens"), f"{wj}.tokens", L, L)
        sites = set(_ints(b.get("sites"), f"{wj}.sites", 0, L - 1, 0, L))
        chosen = _opt_int(b.get("chosen"), f"{wj}.chosen", 0, L - 1)
        attached = _ints(b.get("attached", []), f"{wj}.attached", 0, L - 1, 0, L)
        if (chosen is not None and chosen not in sites) or not sites.issuperset(attached):
            _fail(wj, "chosen and attached sites must be among its matching sites")


def check_paths(r: dict, w: str, lim: Limits) -> None:
    """The proposal's paths: from the anchor, at most a block past the block (an attached g(d))."""
    L = r["block_size"]
    for wj, p in _objects(r.get("paths"), f"{w}.paths", 1, lim.round_nodes):
        _int(p.get("source"), f"{wj}.source", 0, lim.block_size)
        _opt_int(p.get("site"), f"{wj}.site", 0, L - 1)
        _from_anchor(_ids(p.get("tokens"), f"{wj}.tokens", 1, 2 * L), f"{wj}.tokens", r["anchor"])


def check_trie(r: dict, w: str, lim: Limits) -> None:
    """Node 0 is the anchor; a parent precedes its child, one level up; provenance names paths."""
    t = _obj(r.get("trie"), f"{w}.trie")
    w = f"{w}.trie"
    toks = _ids(t.get("tokens"), f"{w}.tokens", 1, lim.round_nodes)
    n = len(toks)
    parents = _ints(t.get("parents"), f"{w}.parents", -1, n - 1, n, n)
    depths = _ints(t.get("depths"), f"{w}.depths", 0, 2 * r["block_size"] - 1, n, n)
    if toks[0] != r["anchor"] or parents[0] != -1 or depths[0] != 0:
        _fail(w, "node 0 must be the anchor: its token, parent -1, depth 0")
    for j in range(1, n):
        p = parents[j]
        if not 0 <= p < j:
            _fail(f"{w}.parents[{j}]", f"must be a node before it (0..{j - 1}), got {p}")
        if depths[j] != depths[p] + 1:
            _fail(f"{w}.depths[{j}]", f"must be its parent's depth + 1 ({depths[p] + 1}), got {depths[j]}")
    prov = _list(t.get("provenance"), f"{w}.provenance", n, n)
    n_paths = len(r["paths"])
    for j, ps in enumerate(prov):
        _ints(ps, f"{w}.provenance[{j}]", 0, n_paths - 1, 1, n_paths)


def check_accepted(r: dict, w: str, lim: Limits) -> None:
    """The accepted chain: the root, then `accepted` nodes, each a child of the one before."""
    parents = r["trie"]["parents"]
    a = r["accepted"]
    chain = _ints(r.get("accepted_nodes"), f"{w}.accepted_nodes", 0, len(parents) - 1, a + 1, a + 1)
    if chain[0] != 0:
        _fail(f"{w}.accepted_nodes[0]", f"must be the root 0, got {chain[0]}")
    for j in range(1, len(chain)):
        if parents[chain[j]] != chain[j - 1]:
            _fail(f"{w}.accepted_nodes[{j}]", f"node {chain[j]} is not a child of node {chain[j - 1]}")


def check_committed(r: dict, w: str, lim: Limits) -> None:
    """new_tokens: the accepted drafts (the chain's tokens), then the bonus, cut at a stop."""
    toks, chain = r["trie"]["tokens"], r["accepted_nodes"]
    new = _ids(r.get("new_tokens"), f"{w}.new_tokens", 0, r["accepted"] + 1)
    for j in range(min(len(new), r["accepted"])):
        if new[j] != toks[chain[j + 1]]:
            _fail(f"{w}.new_tokens[{j}]", f"must be accepted node {chain[j + 1]}'s token {toks[chain[j + 1]]}")
    if len(new) == r["accepted"] + 1 and new[-1] != r["bonus"]:
        _fail(f"{w}.new_tokens[{len(new) - 1}]", f"must be the bonus token {r['bonus']}, got {new[-1]}")
    _ids(r.get("target_top1"), f"{w}.target_top1", len(toks), len(toks))


def check_q(r: dict, w: str, lim: Limits) -> None:
    """Optional q (T > 0 drafts): null (argmax drafts; older traces), or one probability in (0, 1] per
    drafted token of the block."""
    for where, q, n in [(f"{w}.baseline_q", r.get("baseline_q"), r["block_size"] - 1)] + [
            (f"{w}.shifted[{j}].q", b.get("q"), r["block_size"] - 1) for j, b in enumerate(r["shifted"])]:
        if q is None:
            continue
        _list(q, where, n, n)
        for j, x in enumerate(q):
            if not (_number(x, f"{where}[{j}]") > 0 and x <= 1):
                _fail(f"{where}[{j}]", f"must be a probability in (0, 1], got {_show(x)}")


def check_trie_facts(r: dict, w: str, lim: Limits) -> None:
    """Optional per-node drafter facts (engine/tree.py, drafting.node_facts): one entry per node each;
    block an offset, rank a whole number, prob in [0, 1], score a number (log w)."""
    t, n = r["trie"], len(r["trie"]["tokens"])
    for key, lo, hi in (("block", 0, lim.block_size), ("rank", 0, INT_MAX)):
        if key in t:
            _ints(t[key], f"{w}.trie.{key}", lo, hi, n, n)
    for key in ("prob", "score"):
        if key in t:
            for j, x in enumerate(_list(t[key], f"{w}.trie.{key}", n, n)):
                _number(x, f"{w}.trie.{key}[{j}]")
                if key == "prob" and not 0 <= x <= 1:
                    _fail(f"{w}.trie.prob[{j}]", f"must be a probability in [0, 1], got {_show(x)}")


def check_tree_alternative(r: dict, w: str, lim: Limits) -> None:
    """Optional trie.ddtree (reanchor-tree rounds, engine/tree.py): the tree g(0) alone would have grown,
    {tokens, parents, score} of one length, node 0 the anchor, parents before children."""
    alt = r["trie"].get("ddtree")
    if alt is None:
        return
    w = f"{w}.trie.ddtree"
    _obj(alt, w)
    n = len(_ids(alt.get("tokens"), f"{w}.tokens", 1, lim.round_nodes))
    if alt["tokens"][0] != r["anchor"]:
        _fail(f"{w}.tokens[0]", f"must be the anchor {r['anchor']}, got {alt['tokens'][0]}")
    parents = _ints(alt.get("parents"), f"{w}.parents", -1, n - 1, n, n)
    for i, p in enumerate(parents):
        if (p != -1) if i == 0 else not 0 <= p < i:
            _fail(f"{w}.parents[{i}]", f"must be {'-1' if i == 0 else f'a node before {i}'}, got {p}")
    for j, x in enumerate(_list(alt.get("score"), f"{w}.score", n, n)):
        _number(x, f"{w}.score[{j}]")


def check_confidence(r: dict, w: str, lim: Limits) -> None:
    """Optional confidence (a drafter's confidence head, DSpark): one probability in [0, 1] per drafted
    position of the baseline and of each shifted block."""
    for where, c in [(w, r.get("confidence"))] + [(f"{w}.shifted[{j}]", b.get("confidence"))
                                                 for j, b in enumerate(r["shifted"])]:
        if c is None:
            continue
        for j, x in enumerate(_list(c, f"{where}.confidence", r["block_size"] - 1, r["block_size"] - 1)):
            if not 0 <= _number(x, f"{where}.confidence[{j}]") <= 1:
                _fail(f"{where}.confidence[{j}]", f"must be a probability in [0, 1], got {_show(x)}")


def check_backbone(r: dict, w: str, lim: Limits) -> None:
    """Optional backbone (a sequential head, Domino or DSpark): where the head changed the backbone's own
    token, {d: a row of this round (0: the baseline), j: a drafted position of it, token: the backbone's}."""
    rows = {0} | {b["d"] for b in r["shifted"]}
    for wj, b in _objects(r.get("backbone", []), f"{w}.backbone", 0, r["block_size"] * (1 + len(rows))):
        if _int(b.get("d"), f"{wj}.d", 0, lim.block_size) not in rows:
            _fail(f"{wj}.d", f"must be a row of this round (0 or a shifted d), got {b['d']}")
        _int(b.get("j"), f"{wj}.j", 1, r["block_size"] - 1)
        _int(b.get("token"), f"{wj}.token", 0, TOKEN_MAX)


def _estimate(v, where: str, hi: int | None = None) -> float:
    """A finite number from 0 (to hi); numpy floats too (the budget's estimates, in a trace still in memory)."""
    if not (_is_int(v, 0, INT_MAX) or (isinstance(v, float) and math.isfinite(v) and v >= 0)) or \
            (hi is not None and v > hi):
        _fail(where, f"must be a finite number from 0{'' if hi is None else f' to {hi:,}'}, got {_show(v)}")
    return v


def check_budget(r: dict, w: str, lim: Limits) -> None:
    """Optional budget (rounds of a run with an auto budget, engine/decode/cost.py): "available" offsets
    retained (at most a path past the chain: 2 blocks) and "shifted" blocks drafted (this round's); with
    an auto node budget also "nodes" verified (the anchor included; the trie, cut to them, holds no more),
    "expected_tokens" (at most one a node) and "expected_ms". The replay (analyses.round_node_cap) and
    the round's caption read them."""
    if "budget" not in r:
        return
    b, w = _obj(r["budget"], f"{w}.budget"), f"{w}.budget"
    k = _int(b.get("shifted"), f"{w}.shifted", 0, lim.block_size)
    if k != len(r["shifted"]):
        _fail(f"{w}.shifted", f"must be the round's shifted blocks ({len(r['shifted'])}), got {k}")
    _int(b.get("available"), f"{w}.available", k, 2 * lim.block_size)
    if "nodes" in b:
        _int(b["nodes"], f"{w}.nodes", len(r["trie"]["tokens"]), lim.round_nodes)
    if "expected_tokens" in b:
        _estimate(b["expected_tokens"], f"{w}.expected_tokens", lim.round_nodes)
    if "expected_ms" in b:
        _estimate(b["expected_ms"], f"{w}.expected_ms")


ROUND_CHECKS = (check_round_scalars, check_stages, check_baseline, check_shifted, check_q, check_paths, check_trie,
                check_trie_facts, check_tree_alternative, check_accepted, check_committed, check_confidence, check_backbone,
                check_budget)


def round_work(r: dict) -> int:
    """What reading, drawing and analysing a (valid) round costs: its trie nodes and tokens."""
    return (len(r["trie"]["tokens"]) + r["block_size"] * (1 + len(r["shifted"]))
            + sum(len(p["tokens"]) for p in r["paths"]) + sum(map(len, r["trie"]["provenance"])))


def check_work(obj: dict, lim: Limits) -> None:
    work = sum(map(round_work, obj["rounds"]))
    if work > lim.work:
        _fail("rounds", f"{len(obj['rounds']):,} rounds holding {work:,} trie nodes and tokens: over the "
                        f"{lim.work:,} this program explores (record a shorter run)")


def check_rounds(obj: dict, lim: Limits) -> None:
    """Every round, in order: its own checks, and its anchor the last committed token at its position."""
    pos, last = len(obj["prompt_ids"]), obj["first_token"]
    for i, r in enumerate(_list(obj.get("rounds"), "rounds", 0, lim.rounds)):
        w = f"rounds[{i}]"
        _obj(r, w)
        _int(r.get("round"), f"{w}.round", i, i)
        for check in ROUND_CHECKS:
            check(r, w, lim)
        if r["anchor_pos"] != pos or r["anchor"] != last:
            _fail(w, f"its anchor must be the last committed token ({last} at position {pos}), "
                     f"got {r['anchor']} at {r['anchor_pos']}")
        pos += len(r["new_tokens"])
        last = r["new_tokens"][-1] if r["new_tokens"] else last


def check_config(obj: dict, lim: Limits) -> None:
    cfg = _obj(obj.get("config"), "config")
    for k, t in CONFIG_TYPES.items():
        v = cfg.get(k)
        if k not in cfg:
            continue
        if isinstance(v, bool) or not isinstance(v, t):
            _fail(f"config.{k}", f"has the wrong type: {_show(v)}")
        if isinstance(v, (int, float)):
            _number(v, f"config.{k}")
    _texts(((k, v) for k, v in cfg.items() if isinstance(v, str)), lambda k: f"config.{k}", lim)


def check_tokens(obj: dict, lim: Limits) -> None:
    """Prompt and output ids; the output starts with the prefill's token; every text a string."""
    _ids(obj.get("prompt_ids"), "prompt_ids", 0, lim.prompt_tokens)
    out = _ids(obj.get("output_ids"), "output_ids", 1)
    if _int(obj.get("first_token"), "first_token", 0, TOKEN_MAX) != out[0]:
        _fail("first_token", f"must be output_ids[0] ({out[0]}), got {obj['first_token']}")
    _str(obj.get("text"), "text")
    if "prompt_text" in obj:
        _str(obj["prompt_text"], "prompt_text")
    _texts(((k, obj[k]) for k in ("text", "prompt_text") if k in obj), str, lim)
    texts = _obj(obj.get("token_texts"), "token_texts")
    if len(texts) > lim.token_texts:
        _fail("token_texts", f"holds {len(texts):,} entries, over the {lim.token_texts:,} of a vocabulary")
    if set(map(type, texts.values())) - {str}:
        k = next(k for k, v in texts.items() if not isinstance(v, str))
        _str(texts[k], f"token_texts[{k!r}]")
    _texts(((k, k) for k in texts), lambda k: f"token_texts (the key {k!r})", lim)
    _texts(texts.items(), lambda k: f"token_texts[{k!r}]", lim, lim.token_text)


def check_pieces(obj: dict, lim: Limits) -> None:
    """Optional: per token, the characters it completes (TextPieces), one per prompt / output id."""
    for key, ids in (("prompt_pieces", "prompt_ids"), ("output_pieces", "output_ids")):
        if key in obj:
            n = len(obj[ids])
            pieces = _list(obj[key], key, n, n)
            if set(map(type, pieces)) - {str}:
                j = next(j for j, v in enumerate(pieces) if not isinstance(v, str))
                _str(pieces[j], f"{key}[{j}]")
            _texts(enumerate(pieces), lambda j, key=key: f"{key}[{j}]", lim, lim.token_text)


def check_stats(obj: dict, lim: Limits) -> None:
    stats = _obj(obj.get("stats"), "stats")
    for k in STATS_KEYS:
        _number(stats.get(k), f"stats.{k}")


def check_live_keys(obj: dict, lim: Limits) -> None:
    """Optional: what a run in progress carries (new_trace): "complete" (false: the stats are counted from
    the rounds so far) and "elapsed_s" (the wall time those stats use)."""
    if "complete" in obj and not isinstance(obj["complete"], bool):
        _fail("complete", f"must be true or false, got {_show(obj['complete'])}")
    if "elapsed_s" in obj and _number(obj["elapsed_s"], "elapsed_s") < 0:
        _fail("elapsed_s", f"must be a number of seconds from 0, got {_show(obj['elapsed_s'])}")


def check_output_chain(obj: dict, lim: Limits) -> None:
    """The output is the prefill's token, then every round's new tokens."""
    n = 1 + sum(len(r["new_tokens"]) for r in obj["rounds"])
    if n != len(obj["output_ids"]):
        _fail("output_ids", f"must hold the first token and every round's new tokens ({n}), holds "
                            f"{len(obj['output_ids'])}")
    k = 1
    for i, r in enumerate(obj["rounds"]):
        if obj["output_ids"][k:k + len(r["new_tokens"])] != r["new_tokens"]:
            _fail(f"rounds[{i}].new_tokens", f"must be output_ids[{k}:{k + len(r['new_tokens'])}]")
        k += len(r["new_tokens"])


TRACE_CHECKS = (check_config, check_tokens, check_pieces, check_stats, check_live_keys, check_rounds,
                check_output_chain, check_work)


def validate_trace(obj, limits: Limits = EXPLORE) -> dict:
    """`obj` if it is a valid trace (the schema above, consistent, within `limits`); else TraceError."""
    if not isinstance(obj, dict):
        _fail("trace", f"is not a JSON object (got {_show(obj)})")
    if obj.get("schema") != SCHEMA:
        _fail("schema", f"expected {SCHEMA!r}, got {_show(obj.get('schema'))}")
    for check in TRACE_CHECKS:
        check(obj, limits)
    return obj



# ---------------------------------------------------------------- files

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
        _fail("trace", f"nested deeper than {limit} levels")


def _no_constant(name: str):
    _fail("trace", f"not valid JSON ({name} is not a JSON number)")


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
        _fail("trace", f"not valid JSON (not {e.encoding} text at byte {e.start})")
    check_nesting(text.encode("utf-8", "surrogatepass"))
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        _fail("trace", f"nested deeper than {MAX_NESTING} levels")
    except ValueError as e:  # bad JSON, bad UTF-8, an integer of thousands of digits
        if isinstance(e, TraceError):
            raise
        _fail("trace", f"not valid JSON ({str(e)[:200]})")
    return validate_trace(drop_unknown(obj), limits)


def save_trace(path: str | os.PathLike, trace: dict) -> None:
    """Validated first (a broken trace is not written; a long run's may be over what loading explores),
    then atomic: a file at `path` is always a whole trace (an interrupted bench or sweep, resumed,
    trusts what it finds)."""
    validate_trace(trace, WRITE)
    tmp = f"{os.fspath(path)}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(trace, f, ensure_ascii=False, separators=(",", ":"), allow_nan=False)   # never Infinity
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
        _fail("trace", f"cannot be opened ({e.strerror or e})")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        _fail("trace", "is not a regular file (a folder, FIFO or device)")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:
            _fail("trace", f"file is {st.st_size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB limit")
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            _fail("trace", f"cannot be read ({e.strerror or e})")
    if len(data) > max_bytes:
        _fail("trace", f"file is over the {max_bytes / 2**20:.0f} MiB limit")
    return parse_trace(data, limits)


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

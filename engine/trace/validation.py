"""Validating a trace: types and consistency, every list within the Limits that keep the app responsive.

Small checks, one concern each; a check raises TraceError naming the field. To check a new optional field, add
a function and list it in ROUND_CHECKS (per round) or TRACE_CHECKS (whole trace). Whatever reads a valid trace
may index it without guards."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

from ..errors import InputError
from .records import CONFIG_TYPES, SCHEMA, STAGES, STATS_KEYS

TOKEN_MAX = 2**31 - 1     # token ids are 0..TOKEN_MAX
INT_MIN, INT_MAX = -2**63, 2**63 - 1


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


def fail(where: str, what: str) -> NoReturn:
    """Raise TraceError: `where` names the field, `what` what is wrong with it."""
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
        fail(where, f"must be {want}, got {_show(v)}")
    return v


def _opt_int(v, where: str, lo: int, hi: int) -> int | None:
    return None if v is None else _int(v, where, lo, hi)


def _number(v, where: str) -> float:
    if not ((type(v) is float and math.isfinite(v)) or _is_int(v, INT_MIN, INT_MAX)):
        fail(where, f"must be a finite number, got {_show(v)}")
    return v


def _list(v, where: str, lo: int = 0, hi: int | None = None) -> list:
    if not isinstance(v, list):
        fail(where, f"must be a list, got {_show(v)}")
    if len(v) < lo or (hi is not None and len(v) > hi):
        want = f"exactly {lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        fail(where, f"must hold {want} entries, holds {len(v)}")
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
        fail(where, f"must be an object, got {_show(v)}")
    return v


def _objects(v, where: str, lo: int, hi: int):
    """(name, object) for each entry of a list of objects."""
    for j, b in enumerate(_list(v, where, lo, hi)):
        yield f"{where}[{j}]", _obj(b, f"{where}[{j}]")


def _from_anchor(tokens: list[int], where: str, anchor: int) -> None:
    if tokens[0] != anchor:
        fail(f"{where}[0]", f"must be the anchor {anchor}, got {tokens[0]}")


def _str(v, where: str) -> str:
    if not isinstance(v, str):
        fail(where, f"must be a string, got {_show(v)}")
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
        fail(where(name), f"holds {len(v):,} characters, over the {n_max:,} a token's text may have")
    if not _encodes("".join(strings)):  # a surrogate never pairs across strings here: Python keeps it lone
        name, v = next((name, v) for name, v in named if not _encodes(v))
        fail(where(name), unicode_problem(v))


def check_round_scalars(r: dict, w: str, lim: Limits) -> None:
    _int(r.get("anchor_pos"), f"{w}.anchor_pos", 0)
    _int(r.get("anchor"), f"{w}.anchor", 0, TOKEN_MAX)
    _int(r.get("bonus"), f"{w}.bonus", 0, TOKEN_MAX)
    _int(r.get("block_size"), f"{w}.block_size", 1, lim.block_size)
    _int(r.get("accepted"), f"{w}.accepted", 0, lim.round_nodes - 1)
    _int(r.get("retained"), f"{w}.retained", 0)
    for k in ("draft_ms", "verify_ms", "round_ms"):
        _number(r.get(k), f"{w}.{k}")


def check_stages(r: dict, w: str, lim: Limits) -> None:
    """Optional "stages_ms" (traces from before it have none): milliseconds per stage of the round,
    each a finite number >= 0; keys from STAGES (others are kept, unchecked, as anywhere)."""
    if "stages_ms" not in r:
        return
    st = _obj(r["stages_ms"], f"{w}.stages_ms")
    for k in STAGES:
        if k in st and _number(st[k], f"{w}.stages_ms.{k}") < 0:
            fail(f"{w}.stages_ms.{k}", f"is negative: {_show(st[k])}")


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
            fail(wj, "chosen and attached sites must be among its matching sites")


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
        fail(w, "node 0 must be the anchor: its token, parent -1, depth 0")
    for j in range(1, n):
        p = parents[j]
        if not 0 <= p < j:
            fail(f"{w}.parents[{j}]", f"must be a node before it (0..{j - 1}), got {p}")
        if depths[j] != depths[p] + 1:
            fail(f"{w}.depths[{j}]", f"must be its parent's depth + 1 ({depths[p] + 1}), got {depths[j]}")
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
        fail(f"{w}.accepted_nodes[0]", f"must be the root 0, got {chain[0]}")
    for j in range(1, len(chain)):
        if parents[chain[j]] != chain[j - 1]:
            fail(f"{w}.accepted_nodes[{j}]", f"node {chain[j]} is not a child of node {chain[j - 1]}")


def check_committed(r: dict, w: str, lim: Limits) -> None:
    """new_tokens: the accepted drafts (the chain's tokens), then the bonus, cut at a stop."""
    toks, chain = r["trie"]["tokens"], r["accepted_nodes"]
    new = _ids(r.get("new_tokens"), f"{w}.new_tokens", 0, r["accepted"] + 1)
    for j in range(min(len(new), r["accepted"])):
        if new[j] != toks[chain[j + 1]]:
            fail(f"{w}.new_tokens[{j}]", f"must be accepted node {chain[j + 1]}'s token {toks[chain[j + 1]]}")
    if len(new) == r["accepted"] + 1 and new[-1] != r["bonus"]:
        fail(f"{w}.new_tokens[{len(new) - 1}]", f"must be the bonus token {r['bonus']}, got {new[-1]}")
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
                fail(f"{where}[{j}]", f"must be a probability in (0, 1], got {_show(x)}")


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
                    fail(f"{w}.trie.prob[{j}]", f"must be a probability in [0, 1], got {_show(x)}")


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
        fail(f"{w}.tokens[0]", f"must be the anchor {r['anchor']}, got {alt['tokens'][0]}")
    parents = _ints(alt.get("parents"), f"{w}.parents", -1, n - 1, n, n)
    for i, p in enumerate(parents):
        if (p != -1) if i == 0 else not 0 <= p < i:
            fail(f"{w}.parents[{i}]", f"must be {'-1' if i == 0 else f'a node before {i}'}, got {p}")
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
                fail(f"{where}.confidence[{j}]", f"must be a probability in [0, 1], got {_show(x)}")


def check_backbone(r: dict, w: str, lim: Limits) -> None:
    """Optional backbone (a sequential head, Domino or DSpark): where the head changed the backbone's own
    token, {d: a row of this round (0: the baseline), j: a drafted position of it, token: the backbone's}."""
    rows = {0} | {b["d"] for b in r["shifted"]}
    for wj, b in _objects(r.get("backbone", []), f"{w}.backbone", 0, r["block_size"] * (1 + len(rows))):
        if _int(b.get("d"), f"{wj}.d", 0, lim.block_size) not in rows:
            fail(f"{wj}.d", f"must be a row of this round (0 or a shifted d), got {b['d']}")
        _int(b.get("j"), f"{wj}.j", 1, r["block_size"] - 1)
        _int(b.get("token"), f"{wj}.token", 0, TOKEN_MAX)


def _estimate(v, where: str, hi: int | None = None) -> float:
    """A finite number from 0 (to hi); numpy floats too (the budget's estimates, in a trace still in memory)."""
    if not (_is_int(v, 0, INT_MAX) or (isinstance(v, float) and math.isfinite(v) and v >= 0)) or \
            (hi is not None and v > hi):
        fail(where, f"must be a finite number from 0{'' if hi is None else f' to {hi:,}'}, got {_show(v)}")
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
        fail(f"{w}.shifted", f"must be the round's shifted blocks ({len(r['shifted'])}), got {k}")
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
        fail("rounds", f"{len(obj['rounds']):,} rounds holding {work:,} trie nodes and tokens: over the "
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
            fail(w, f"its anchor must be the last committed token ({last} at position {pos}), "
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
            fail(f"config.{k}", f"has the wrong type: {_show(v)}")
        if isinstance(v, (int, float)):
            _number(v, f"config.{k}")
    _texts(((k, v) for k, v in cfg.items() if isinstance(v, str)), lambda k: f"config.{k}", lim)


def check_tokens(obj: dict, lim: Limits) -> None:
    """Prompt and output ids; the output starts with the prefill's token; every text a string."""
    _ids(obj.get("prompt_ids"), "prompt_ids", 0, lim.prompt_tokens)
    out = _ids(obj.get("output_ids"), "output_ids", 1)
    if _int(obj.get("first_token"), "first_token", 0, TOKEN_MAX) != out[0]:
        fail("first_token", f"must be output_ids[0] ({out[0]}), got {obj['first_token']}")
    _str(obj.get("text"), "text")
    if "prompt_text" in obj:
        _str(obj["prompt_text"], "prompt_text")
    _texts(((k, obj[k]) for k in ("text", "prompt_text") if k in obj), str, lim)
    texts = _obj(obj.get("token_texts"), "token_texts")
    if len(texts) > lim.token_texts:
        fail("token_texts", f"holds {len(texts):,} entries, over the {lim.token_texts:,} of a vocabulary")
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
        fail("complete", f"must be true or false, got {_show(obj['complete'])}")
    if "elapsed_s" in obj and _number(obj["elapsed_s"], "elapsed_s") < 0:
        fail("elapsed_s", f"must be a number of seconds from 0, got {_show(obj['elapsed_s'])}")


def check_output_chain(obj: dict, lim: Limits) -> None:
    """The output is the prefill's token, then every round's new tokens."""
    n = 1 + sum(len(r["new_tokens"]) for r in obj["rounds"])
    if n != len(obj["output_ids"]):
        fail("output_ids", f"must hold the first token and every round's new tokens ({n}), holds "
                            f"{len(obj['output_ids'])}")
    k = 1
    for i, r in enumerate(obj["rounds"]):
        if obj["output_ids"][k:k + len(r["new_tokens"])] != r["new_tokens"]:
            fail(f"rounds[{i}].new_tokens", f"must be output_ids[{k}:{k + len(r['new_tokens'])}]")
        k += len(r["new_tokens"])


TRACE_CHECKS = (check_config, check_tokens, check_pieces, check_stats, check_live_keys, check_rounds,
                check_output_chain, check_work)


def validate_trace(obj, limits: Limits = EXPLORE) -> dict:
    """`obj` if it is a valid trace (docs/trace-format.md's schema, consistent, within `limits`); else TraceError."""
    if not isinstance(obj, dict):
        fail("trace", f"is not a JSON object (got {_show(obj)})")
    if obj.get("schema") != SCHEMA:
        fail("schema", f"expected {SCHEMA!r}, got {_show(obj.get('schema'))}")
    for check in TRACE_CHECKS:
        check(obj, limits)
    return obj

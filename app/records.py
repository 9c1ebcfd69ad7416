"""Pure helpers over trace round records (the schema in docs/trace-format.md); no model, no UI.

The engine owns the definitions (engine.trace, engine.analyses); these are the views the figures need.
"""
from __future__ import annotations

from typing import Any

from engine.analyses import baseline_accepted, round_gain

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


# Why a shifted block adds nothing (or less) to the verified trie, in plain words (caption and hover).
FATE_WORDS = {
    "no-site": "no matching site: its first token is nowhere in g(0)",
    "rule": "the rule chose another site",
    "budget": "over the budget: the node budget left no room for its tokens",
    "depth": "past the verify depth: its tokens lie beyond max new tokens",
}
FATE_SHORT = {"no-site": "no site", "rule": "rule", "budget": "budget", "depth": "depth"}


def _path_depths(rec: Round) -> dict[int, int]:
    """For every path, the deepest depth of a trie node it runs through (what was verified of it)."""
    deepest: dict[int, int] = {}
    for depth, prov in zip(rec["trie"]["depths"], rec["trie"]["provenance"]):
        for p in prov:
            deepest[p] = max(deepest.get(p, 0), int(depth))
    return deepest


def block_fates(rec: Round, depth_cap: int | None = None) -> list[dict]:
    """Per shifted block: its native position (s + d), its sites, where it was attached, and what became
    of it: fate "attached", or why it added nothing: "no-site", "rule" (matches, none the rule takes),
    "budget" (the node budget cut it, or in a tree none of its nodes ranked among the best N), "depth"
    (past the deepest verified position, max new tokens). `cut`: the reason an attached block lost part of
    its tokens (None when whole), `verified`: its tokens in the trie past its site. `depth_cap`: the
    deepest depth this round could verify (trace-level: prompt + max_new_tokens - anchor_pos - 1)."""
    s, paths = int(rec["anchor_pos"]), rec.get("paths", [])
    deepest = _path_depths(rec)
    max_depth = max((int(x) for x in rec["trie"]["depths"]), default=0)
    out = []
    for b in rec.get("shifted", []):
        d, sites = int(b["d"]), [int(t) for t in b.get("sites", [])]
        chosen = b.get("chosen")
        attached = [int(t) for t in (b.get("attached") or ([] if chosen is None else [chosen]))]
        f = {"d": d, "native": s + d, "sites": sites, "attached": attached, "site": chosen, "cut": None,
             "verified": 0, "full": 0}
        if chosen is None:
            f["fate"] = "rule" if sites else "no-site"
            out.append(f)
            continue
        mine = [i for i, p in enumerate(paths) if int(p["source"]) == d]
        for i in mine:
            site = int(paths[i]["site"] if paths[i].get("site") is not None else chosen)
            f["full"] += max(0, len(paths[i]["tokens"]) - 1 - site)
            f["verified"] += max(0, deepest.get(i, 0) - site)
        if f["verified"] < f["full"] or not mine:
            at_cap = depth_cap is not None and max_depth >= depth_cap
            f["cut"] = "depth" if at_cap and all(deepest.get(i, 0) >= depth_cap for i in mine) and mine else "budget"
        f["fate"] = f["cut"] if f["cut"] and f["verified"] == 0 else "attached"
        out.append(f)
    return out


def fate_text(f: dict) -> str:
    """One block's fate in words: native position, site, and why it was discarded or cut."""
    d = f["d"]
    head = f"g({d}) (native position {f['native']})"
    if f["fate"] == "rule":
        return (f"{head}: discarded, {FATE_WORDS['rule']}: it attaches only at its native index {d}; "
                f"its first token matches g(0) at {', '.join(map(str, f['sites']))}")
    if f["fate"] != "attached":
        return f"{head}: discarded, {FATE_WORDS[f['fate']]}"
    where = ", ".join(map(str, f["attached"]))
    text = f"{head}: attached at site{'s' if len(f['attached']) > 1 else ''} {where} (position {f['native'] - d + f['attached'][0]})"
    if f["cut"]:
        text += f", cut to {f['verified']} of {f['full']} tokens: {FATE_WORDS[f['cut']]}"
    return text


def depth_cap(trace: dict | None, rec: Round) -> int | None:
    """The deepest depth round `rec` could verify: the run's last position minus its anchor's."""
    cfg = (trace or {}).get("config") or {}
    n, prompt = cfg.get("max_new_tokens"), (trace or {}).get("prompt_ids")
    if not isinstance(n, int) or not isinstance(prompt, list):
        return None
    return len(prompt) + n - int(rec["anchor_pos"]) - 1


def shifted_acceptance(rec: Round) -> list[tuple[int, int, int]]:
    """(d, site, accepted drafts through it) of every shifted block the accepted path ran through past its site:
    the blocks whose own drafts the target accepted."""
    srcs, paths = path_sources(rec), rec.get("paths", [])
    depths, prov = rec["trie"]["depths"], rec["trie"]["provenance"]
    out: dict[int, tuple[int, int, int]] = {}
    for n in [int(x) for x in rec.get("accepted_nodes", [0])[1:]]:
        for p in prov[n]:
            if not 0 <= p < len(srcs) or srcs[p] == 0 or paths[p].get("site") is None:
                continue
            d, site = srcs[p], int(paths[p]["site"])
            if int(depths[n]) > site:
                k = out.get(d, (d, site, 0))[2]
                out[d] = (d, site, k + 1)
    return sorted(out.values())


# What a class can follow on one screen (teach_score): a label wider than LONG_PX at the projector's 14 px cannot
# stand whole in a position's column beside its neighbours; rows and trie slots past these fill the screen.
LONG_PX = 64
EASY_ROWS = 6
EASY_SLOTS = 6
SHORT_BLOCK = 4


def _label_px(token_texts: dict, tok: int) -> float:
    """A token label's width at 14 px (app.tokentext.char_px measures 9 px text)."""
    from .tokentext import _shown, char_px, piece

    return sum(char_px(ch) for ch in _shown(piece(token_texts, int(tok)), 16)) * 14 / 9


def _leaves(rec: Round) -> int:
    parents = rec["trie"]["parents"]
    inner = {int(p) for p in parents[1:] if p is not None and int(p) >= 0}
    return max(1, sum(1 for i in range(1, len(parents)) if i not in inner))


def teach_score(rec: Round, token_texts: dict | None = None) -> float | None:
    """How well round `rec` teaches ReAnchor on one projector screen; higher is better. None: no real accepted shift
    (no shifted block attached off its native index whose own drafts the target accepted), or a block the run's end
    cut to fewer than SHORT_BLOCK tokens (too few to match a_d in). The gain through shifted blocks (up to 5) and the
    drafts accepted through the moved block count for it; the figure's size against it: attached blocks (a grid row
    each), trie nodes and branches (the trie's rows), discarded blocks (folded: a little), and the share of labels
    too long for a column (with `token_texts`). Pure: the round's record (and the trace's token texts) only, so it
    ranks a live run's rounds as well as a shipped trace's."""
    moved = [k for d, site, k in shifted_acceptance(rec) if site != d]
    if not moved or len(rec["baseline"]) < SHORT_BLOCK:  # the run's end cut the block: too few drafts to match in
        return None
    lens = round_lengths(rec)
    fates = block_fates(rec)
    attached = sum(1 for f in fates if f["fate"] == "attached")
    rows = 3 + attached + (1 if attached < len(fates) else 0)  # the strip, g(0), the attached rows, the fold
    score = 2.0 * min(lens["shifted"], 5) + min(max(moved), 5)
    score -= 0.5 * max(0, rows - EASY_ROWS) + 0.1 * attached + 0.05 * (len(fates) - attached)
    score -= 0.02 * len(rec["trie"]["tokens"]) + 0.5 * max(0, _leaves(rec) - EASY_SLOTS)
    if token_texts:
        toks = list(rec["baseline"]) + [t for b in rec.get("shifted", []) if b.get("chosen") is not None
                                        for t in b["tokens"]]
        score -= 6.0 * sum(_label_px(token_texts, t) > LONG_PX for t in toks) / max(len(toks), 1)
    return round(score, 3)


def teachable_rounds(rounds: list[Round], token_texts: dict | None = None, most: int = 8) -> list[tuple[int, float]]:
    """(round, teach_score) of the rounds worth teaching, best first (ties: the earliest), at most `most`."""
    scored = [(i, s) for i, rec in enumerate(rounds) if (s := teach_score(rec, token_texts)) is not None]
    return sorted(scored, key=lambda x: (-x[1], x[0]))[:most]


def most_instructive(rounds: list[Round], token_texts: dict | None = None,
                     ranked: list[tuple[int, float]] | None = None) -> tuple[int, str] | None:
    """(round index, why) of the round a trace opens on: the best by teach_score (a real shift the target
    accepted, on a figure a class can follow); without one, the largest shifted gain, then the largest gain through
    tree branches, then the first round with an attached shifted block. None: no round shows more than round 0
    (ar, dflash). `ranked`: teachable_rounds of these rounds where the caller has them (scoring every round of a
    long trace is most of its first view's time)."""
    ranked = teachable_rounds(rounds, token_texts, 1) if ranked is None else ranked[:1]
    if ranked:
        best = ranked[0][0]
        rec = rounds[best]
        d, site, _ = max((x for x in shifted_acceptance(rec) if x[1] != x[0]), key=lambda x: x[2])
        return best, (f"a real shift the target accepted: g({d}), drafted for index {d}, attached at site {site}; "
                      f"+{round_lengths(rec)['shifted']} accepted through shifted blocks, on a figure a class can "
                      "follow")
    best, best_key = None, (0, 0, 0)
    for i, rec in enumerate(rounds):
        lens = round_lengths(rec)
        attached = any(b.get("chosen") is not None for b in rec.get("shifted", []))
        key = (lens["shifted"], lens["branches"], int(attached))
        if key > best_key:
            best, best_key = i, key
    if best is None:
        return None
    shifted, branches, _ = best_key
    if shifted:
        return best, f"the largest shifted gain in this run (+{shifted}; no accepted block moved off its index)"
    if branches:
        return best, f"no shifted gain in this run; the largest gain through tree branches (+{branches})"
    return best, "no shifted gain in this run; the first round with an attached shifted block"

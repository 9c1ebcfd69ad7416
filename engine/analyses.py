"""The paper's analyses, computed from decoding traces (schema in docs/trace-format.md).

Size: over 500 lines of short functions, one per analysis, over the same round helpers (a split by table would
import them all back).

Every function takes one trace dict or a list of them and pools all their rounds, so combining
prompts, sets or runs is just passing a longer list. Results are plain numbers and dicts (JSON-ready);
a rate with nothing to count is None. The bench, the app and the tests share these definitions.

"Baseline-alone" quantities use one fact about the trie: the baseline path is inserted first and in
full, and acceptance follows the child carrying the target's token, so the number of drafts the
baseline alone would have accepted is the common prefix of the accepted chain and the baseline.
Quantities that need the target's choice off the accepted chain use `target_top1` (exact at T=0).
"""
from __future__ import annotations

import math
import numbers
import random
from collections import Counter
from typing import Iterator

from .attach import proposal
from .errors import InputError
from .options import DEFAULT_RULE, MODES, RULES, TREE_MODES, UNSHIFTED_MODES, parse_max_trie_nodes
from .trie import accept

Traces = dict | list[dict]


def rounds_of(traces: Traces) -> Iterator[dict]:
    for t in [traces] if isinstance(traces, dict) else traces:
        yield from t["rounds"]


def _rate(num: float, den: float) -> float | None:
    return num / den if den else None


def children(rnd: dict) -> dict[tuple[int, int], int]:
    """(parent node, token) -> child node, for every trie node but the root."""
    trie = rnd["trie"]
    return {(p, tok): i for i, (p, tok) in enumerate(zip(trie["parents"], trie["tokens"])) if p >= 0}


def path_nodes(rnd: dict, tokens: list[int], kids: dict | None = None) -> list[int]:
    """Trie node ids along `tokens` (from the anchor, node 0); stops where the trie does (node cap).
    `kids`: children(rnd), when several paths of one round are walked."""
    kids = children(rnd) if kids is None else kids
    nodes = [0]
    for tok in tokens[1:]:
        child = kids.get((nodes[-1], tok))
        if child is None:
            break
        nodes.append(child)
    return nodes


def baseline_accepted(rnd: dict) -> int:
    """Drafts accepted along the baseline g(0): what DFlash alone would have accepted this round."""
    toks = rnd["trie"]["tokens"]
    n = 0
    for node, b in zip(rnd["accepted_nodes"][1:], rnd["baseline"][1:]):
        if toks[node] != b:
            break
        n += 1
    return n


def greedy_accepted(rnd: dict, tokens: list[int], kids: dict | None = None) -> int:
    """Drafts of one path the target's top-1 would accept (its accepted length at T=0)."""
    top1, nodes = rnd["target_top1"], path_nodes(rnd, tokens, kids)
    n = 0
    while n + 1 < len(nodes) and top1[nodes[n]] == tokens[n + 1]:
        n += 1
    return n


def round_gain(rnd: dict) -> tuple[int | None, int]:
    """(d, extra): accepted drafts beyond the baseline-alone length and the offset d credited.

    Credit goes to the smallest d among the paths through the last accepted node: with offsets
    added in ascending order, that is the block whose addition produced the gain. d = 0: the gain
    came through another branch of g(0)'s own ranking (tree modes).
    """
    extra = rnd["accepted"] - baseline_accepted(rnd)
    if extra <= 0:
        return None, 0
    paths, prov = rnd["paths"], rnd["trie"]["provenance"]
    d = min(paths[p]["source"] for p in prov[rnd["accepted_nodes"][-1]])
    return d, extra


# -- per-round-pooled statistics ---------------------------------------------------------------

def tau(traces: Traces) -> float | None:
    """Mean acceptance length over all rounds, as the paper's tau: the tokens each round commits (accepted
    drafts + the bonus; fewer only in a round the run's end cut: no room left for the bonus, or a stop token)."""
    a = [len(r["new_tokens"]) for r in rounds_of(traces)]
    return _rate(sum(a), len(a))


def acceptance_histogram(traces: Traces) -> dict[int, int]:
    """{acceptance length (tokens committed, bonus included, as tau): rounds}; its mean is tau."""
    return dict(sorted(Counter(len(r["new_tokens"]) for r in rounds_of(traces)).items()))


def full_block_share(traces: Traces) -> float | None:
    """Share of rounds (block of >= 2) whose whole baseline block was accepted (Fig. 2): the
    rounds where the block end, not the drafter, limited acceptance."""
    rs = [r for r in rounds_of(traces) if r["block_size"] >= 2]
    return _rate(sum(baseline_accepted(r) == r["block_size"] - 1 for r in rs), len(rs))


def post_rejection_agreement(traces: Traces) -> dict:
    """Baseline drafts after the first rejection equal to the target's top-1 under their own,
    rejected, prefix (Table 1): draft k vs top1 of the baseline node at depth k-1, k > r."""
    agree = total = 0
    for r in rounds_of(traces):
        base, top1 = r["baseline"], r["target_top1"]
        rej = baseline_accepted(r) + 1           # index of the first rejected baseline draft
        nodes = path_nodes(r, base)
        for k in range(rej + 1, min(len(base), len(nodes) + 1)):
            total += 1
            agree += top1[nodes[k - 1]] == base[k]
    return {"agree": agree, "total": total, "rate": _rate(agree, total)}


def alignment_stats(traces: Traces) -> dict:
    """Of shifted blocks matching the baseline somewhere (Table 5): share matching only at t != d
    ("shifted only") and share matching at several sites ("multiple"); the two may overlap."""
    blocks = matched = shifted_only = multiple = 0
    for r in rounds_of(traces):
        for b in r["shifted"]:
            blocks += 1
            if b["sites"]:
                matched += 1
                shifted_only += b["d"] not in b["sites"]
                multiple += len(b["sites"]) > 1
    return {"blocks": blocks, "matched": matched, "shifted_only": shifted_only, "multiple": multiple,
            "shifted_only_rate": _rate(shifted_only, matched), "multiple_rate": _rate(multiple, matched)}


def earliest_win_rate(traces: Traces) -> dict:
    """Rule "all" traces (Table 8): one group per (round, shifted block). A group is eligible when
    one of its attached paths ties the longest accepted length among its paths and the baseline;
    the earliest site wins when its path ties it. Lengths are top-1 acceptance (exact at T=0).

    `groups`/`wins` count blocks with several sites (where the rule matters); `*_all` every block.
    """
    c = Counter()
    for r in rounds_of(traces):
        kids = children(r)  # once per round: a round can hold thousands of paths
        base = greedy_accepted(r, r["baseline"], kids)
        by_d: dict[int, list[tuple[int, int]]] = {}
        for p in r["paths"]:
            if p["source"] > 0 and p.get("site") is not None:
                by_d.setdefault(p["source"], []).append((p["site"], greedy_accepted(r, p["tokens"], kids)))
        for group in by_d.values():
            best = max(n for _, n in group)
            if best < base:
                continue                          # the baseline beat every site: not eligible
            win = min(group)[1] == best
            c["groups_all"] += 1
            c["wins_all"] += win
            if len(group) > 1:
                c["groups"] += 1
                c["wins"] += win
    return {"groups": c["groups"], "wins": c["wins"], "rate": _rate(c["wins"], c["groups"]),
            "groups_all": c["groups_all"], "wins_all": c["wins_all"],
            "rate_all": _rate(c["wins_all"], c["groups_all"])}


def gain_by_offset(traces: Traces) -> dict:
    """Accepted drafts beyond the baseline-alone length, credited to each offset d (round_gain),
    split into positions inside the native block (in-block refinement) and beyond it (extension).
    extra_per_round = gained_share x per_gained_round: how often a round gains, and how far the
    winning path then runs past the baseline (the two move apart between drafters)."""
    by_d: Counter = Counter()
    in_block = beyond = n = gained = 0
    for r in rounds_of(traces):
        n += 1
        d, extra = round_gain(r)
        if not extra:
            continue
        gained += 1
        by_d[d] += extra
        base, end = baseline_accepted(r), r["block_size"] - 1
        in_block += max(0, min(r["accepted"], end) - base)
        beyond += max(0, r["accepted"] - max(end, base))
    return {"by_d": {str(d): v for d, v in sorted(by_d.items())}, "extra": sum(by_d.values()),
            "in_block": in_block, "beyond": beyond, "rounds": n, "gained_rounds": gained,
            "extra_per_round": _rate(sum(by_d.values()), n), "gained_share": _rate(gained, n),
            "per_gained_round": _rate(sum(by_d.values()), gained)}


def round_sizes(traces: Traces) -> dict:
    """Per round means: shifted blocks drafted, offsets available (the previous round's retained
    states), trie nodes verified and drafter / verifier milliseconds: the work a budget saves."""
    drafted = avail = nodes = n = draft_ms = verify_ms = 0
    for t in [traces] if isinstance(traces, dict) else traces:
        prev = 0
        for r in t["rounds"]:
            n += 1
            drafted += len(r["shifted"])
            avail += prev
            nodes += len(r["trie"]["tokens"])
            draft_ms += r["draft_ms"]
            verify_ms += r["verify_ms"]
            prev = r["retained"]
    return {"shifted_drafted": _rate(drafted, n), "shifted_available": _rate(avail, n),
            "trie_nodes": _rate(nodes, n), "draft_ms": _rate(draft_ms, n),
            "verify_ms": _rate(verify_ms, n)}


# -- where a tree's nodes came from (per-node facts: block, rank, score) ---------------------------

SCORE_EDGES = (-0.1, -0.25, -0.5, -1.0, -2.0, -3.0, -5.0, -8.0)   # score (log w) bins, best first
DEPTHS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 10**9))    # depth buckets


def score_bin(score: float) -> str:
    """The SCORE_EDGES bin of a score, named by its bounds ("0..-0.1", ..., "<-8")."""
    b = sum(score < e for e in SCORE_EDGES)
    hi = 0.0 if b == 0 else SCORE_EDGES[b - 1]
    return f"<{SCORE_EDGES[-1]:g}" if b == len(SCORE_EDGES) else f"{hi:g}..{SCORE_EDGES[b]:g}"


def depth_bucket(depth: int) -> str:
    lo, hi = next(b for b in DEPTHS if b[0] <= depth <= b[1])
    return str(lo) if lo == hi else f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}"


def node_kind(block: int, rank: int) -> str:
    """Who proposed a node: g(0) or a shifted block, at its first choice (rank 0) or another rank."""
    return ("shifted" if block else "baseline") + (" rank>0" if rank else "")


def tree_nodes(rnd: dict) -> Iterator[tuple[int, str, int, float, float, bool, bool]]:
    """Per trie node but the anchor, of a round with per-node facts: (node, kind, depth, score, prob,
    accepted, parent accepted). Accepted: on the accepted chain (the target followed its whole path)."""
    t, acc = rnd["trie"], set(rnd["accepted_nodes"])
    for n in range(1, len(t["tokens"])):
        yield (n, node_kind(t["block"][n], t["rank"][n]), t["depths"][n], t["score"][n], t["prob"][n],
               n in acc, t["parents"][n] in acc)


def _cell() -> dict:
    return {"nodes": 0, "accepted": 0, "predicted": 0.0}


def _close(cell: dict, predicted: str | None = None) -> dict:
    n = cell["nodes"]
    out = {"nodes": n, "accepted": cell["accepted"], "rate": _rate(cell["accepted"], n)}
    return out | ({predicted: _rate(cell["predicted"], n)} if predicted else {})


def tree_sources(traces: Traces) -> dict:
    """Where the nodes of rounds with per-node facts came from (g(0) at each rank, or a shifted block)
    and what the target made of them (issue 40, docs/trees.md):

    - `kinds`: per kind, nodes verified and accepted; `shifted_token_share`: accepted drafts a shifted
      block proposed, over all accepted drafts.
    - `equal_score`: per score bin (log w, the drafter's estimate that the node's path is accepted),
      the acceptance of g(0)'s nodes and of shifted nodes; `shifted_rate` vs `baseline_rate_at_equal_score`
      (g(0)'s rate in each bin, weighted by the shifted nodes in it): do shifted nodes beat the
      alternatives of equal score that they compete with for the budget?
    - `calibration`: per kind and depth, the mean predicted path acceptance exp(score) vs the accepted
      share (`path`), and the drafter's own probability q vs the share accepted among nodes whose parent
      was (`step`: what a best-first heap multiplies along a path).
    - `horizon`: rounds whose accepted path reached g(0)'s block end (depth L-1) and ran past it, where
      only a shifted block reaches, and the drafts accepted past it.
    - `retention`: how often the next round's g(1) (anchored at the target's token after the first retained
      node) matched its g(0) somewhere (could attach), against the best choice among every rejected child
      of the last accepted node, whose target token a tree verify also gives (an upper bound: T=0 rounds).
    - `displaced` (reanchor-tree rounds that recorded trie.ddtree, T=0): the tree g(0) alone would have
      grown with the same budget, replayed against the run's own greedy continuation: its accepted
      length vs the run's (rounds better / worse / same, its tau on these states), and the rounds where
      a node the shifted blocks displaced would have been accepted.
    """
    kinds: dict[str, dict] = {}
    eq: dict[str, dict[str, dict]] = {}
    cal: dict[str, dict[str, dict]] = {}
    step: dict[str, dict[str, dict]] = {}
    rounds = full = beyond = beyond_tokens = acc_total = acc_shifted = 0
    for r in rounds_of(traces):
        if "block" not in r["trie"] or "score" not in r["trie"]:
            continue
        rounds += 1
        L = r["block_size"]
        full += r["accepted"] >= L - 1
        beyond += r["accepted"] >= L
        beyond_tokens += max(r["accepted"] - (L - 1), 0)
        for n, kind, depth, score, prob, accepted, parent_ok in tree_nodes(r):
            db, sb, shifted = depth_bucket(depth), score_bin(score), kind.startswith("shifted")
            for c, pred in ((kinds.setdefault(kind, _cell()), math.exp(score)),
                            (eq.setdefault(sb, {}).setdefault("shifted" if shifted else "baseline", _cell()), 0.0),
                            (cal.setdefault(kind, {}).setdefault(db, _cell()), math.exp(score))):
                c["nodes"] += 1
                c["accepted"] += accepted
                c["predicted"] += pred
            if parent_ok:
                c = step.setdefault(kind, {}).setdefault(db, _cell())
                c["nodes"] += 1
                c["accepted"] += accepted
                c["predicted"] += prob
            acc_total += accepted
            acc_shifted += accepted and shifted
    bins = sorted(eq, key=lambda b: -1e9 if b.startswith("<") else -float(b.split("..")[1]))
    weighted = matched = 0.0
    for b in bins:
        s, g = eq[b].get("shifted"), eq[b].get("baseline")
        if s and g and g["nodes"]:
            weighted += s["nodes"] * g["accepted"] / g["nodes"]
            matched += s["nodes"]
    shifted_nodes = sum(c["nodes"] for k, c in kinds.items() if k.startswith("shifted"))
    shifted_acc = sum(c["accepted"] for k, c in kinds.items() if k.startswith("shifted"))
    return {
        "rounds": rounds,
        "kinds": {k: _close(c, "predicted") for k, c in sorted(kinds.items())},
        "shifted_token_share": _rate(acc_shifted, acc_total),
        "equal_score": {"bins": {b: {k: _close(c) for k, c in sorted(eq[b].items())} for b in bins},
                        "shifted_rate": _rate(shifted_acc, shifted_nodes),
                        "baseline_rate_at_equal_score": _rate(weighted, matched), "matched_nodes": int(matched)},
        "calibration": {"path": {k: {d: _close(c, "predicted") for d, c in sorted(v.items(), key=lambda x: _dkey(x[0]))}
                                 for k, v in sorted(cal.items())},
                        "step": {k: {d: _close(c, "q") for d, c in sorted(v.items(), key=lambda x: _dkey(x[0]))}
                                 for k, v in sorted(step.items())}},
        "horizon": {"rounds": rounds, "full_block_rounds": full, "beyond_rounds": beyond,
                    "beyond_share": _rate(beyond, rounds), "beyond_tokens": beyond_tokens},
        "displaced": displaced(traces),
        "retention": retention(traces),
    }


def retention(traces: Traces) -> dict:
    """tree_sources' `retention`: consecutive rounds where the first one retained a node past its chain."""
    c = Counter()
    for t in [traces] if isinstance(traces, dict) else traces:
        rs = t["rounds"]
        for r, nxt in zip(rs, rs[1:]):
            if not r["retained"] or not nxt["shifted"] or nxt["shifted"][0]["d"] != 1:
                continue
            last, tr = r["accepted_nodes"][-1], r["trie"]
            later = set(nxt["baseline"])
            kids = [n for n, p in enumerate(tr["parents"]) if p == last]
            c["rounds"] += 1
            c["attached"] += bool(nxt["shifted"][0]["sites"])
            c["any_child"] += any(r["target_top1"][k] in later for k in kids)
            c["children"] += len(kids)
    n = c["rounds"]
    return {"rounds": n, "g1_matched": c["attached"], "g1_matched_share": _rate(c["attached"], n),
            "best_child_share": _rate(c["any_child"], n), "rejected_children_per_round": _rate(c["children"], n)}


def _dkey(bucket: str) -> int:
    return int(bucket.split("-")[0].rstrip("+"))


def displaced(traces: Traces) -> dict:
    """tree_sources' `displaced`: reanchor-tree rounds (T=0) against the g(0)-alone tree they recorded."""
    c = Counter()
    for t in [traces] if isinstance(traces, dict) else traces:
        if float((t.get("config") or {}).get("temperature") or 0) != 0:
            continue
        committed = committed_tokens(t)
        start = 0
        for r in t["rounds"]:
            left, n_new = len(committed) - start, len(r.get("new_tokens", []))
            alone = tree_alone(r, committed[start:])
            if alone is not None:
                c["rounds"] += 1
                c["better"] += r["accepted"] > alone["accepted"]
                c["worse"] += r["accepted"] < alone["accepted"]
                c["hit"] += alone["displaced_accepted"]
                c["displaced_nodes"] += alone["displaced_nodes"]
                c["tokens"] += n_new
                c["alt_tokens"] += min(alone["accepted"] + 1, left)
            start += n_new
    n = c["rounds"]
    return {"rounds": n, "better": c["better"], "worse": c["worse"], "same": n - c["better"] - c["worse"],
            "displaced_nodes_per_round": _rate(c["displaced_nodes"], n),
            "displaced_accepted_rounds": c["hit"], "displaced_accepted_share": _rate(c["hit"], n),
            "tau": _rate(c["tokens"], n), "ddtree_tau": _rate(c["alt_tokens"], n)}


def committed_tokens(trace: dict) -> list[int]:
    """Every token the rounds committed, in order (output_ids without the prefill's first token)."""
    return [tok for r in trace["rounds"] for tok in r.get("new_tokens", [])]


def tree_alone(r: dict, follow: list[int]) -> dict | None:
    """A reanchor-tree round against the tree g(0) alone would have grown (its recorded trie.ddtree; None without
    one), both walked along `follow`, what the run committed after the anchor: the drafts each accepts, the
    g(0)-alone nodes the shifted blocks displaced (not in the run's trie), and whether one of those lay on `follow`."""
    alt = r["trie"].get("ddtree")
    if alt is None:
        return None
    mine = {tuple(p) for p in token_paths(r["trie"]["tokens"], r["trie"]["parents"])}
    alt_paths = token_paths(alt["tokens"], alt["parents"])
    on = [p for p in alt_paths if list(p[1:]) == follow[: len(p) - 1]]
    return {"accepted": max((len(p) - 1 for p in on), default=0), "nodes": len(alt_paths),
            "displaced_nodes": sum(p not in mine for p in alt_paths),
            "displaced_accepted": any(p not in mine for p in on)}


def token_paths(tokens: list[int], parents: list[int]) -> list[tuple[int, ...]]:
    """Every node's token path from the anchor (parents before children)."""
    out: list[tuple[int, ...]] = []
    for tok, p in zip(tokens, parents):
        out.append((out[p] if p >= 0 else ()) + (tok,))
    return out


# -- counterfactuals: another assembly on the same rounds ------------------------------------------

def counterfactual(trace: dict, mode: str, rule: str, seed: int = 0, sampled: bool = False) -> list[dict]:
    """Per round of a T=0 trace: the drafts another (mode, rule) would have accepted from the same
    state and the same drafted blocks (assembly is all that differs between modes, docs/algorithm.md).

    At T=0 the committed text is the target's greedy continuation (lossless), so a trie's accepted
    length is how far it follows what the run committed after the anchor. `cut` marks rounds where
    the counterfactual reached the end of the run (its length is then a lower bound). `tokens` and
    `counterfactual_tokens` count what each round commits, as tau does: the run's own, and the replay's
    accepted drafts + the bonus, no more than the run committed from that state (its end, max_new_tokens
    or a stop token, cuts the replayed round as it cut the run's). `random` uses
    its own seeded draws, not the engine's. A run with an auto node budget ("auto" trie nodes) is
    replayed under each round's recorded budget (budget.nodes), its trie cut in insertion order (the
    baseline first), where the run kept the best-scored nodes. Raises ValueError when the trace cannot answer.
    `sampled`: a T>0 trace is replayed too, along its realised draw (SAMPLED_NOTE: how far the other assembly's trie
    follows the tokens the run sampled, one draw's outcome, not that assembly's expected length).
    """
    cap = _check_replayable(trace, mode, rule, sampled)
    rounds = trace["rounds"]
    committed = committed_tokens(trace)
    rows, start = [], 0                               # committed[start + k]: position anchor_pos + 1 + k
    for i, r in enumerate(rounds):
        left = len(committed) - start
        a2 = _replay(r, i, committed[start:], mode, rule, seed, cap)[0]
        n = len(r.get("new_tokens", []))
        rows.append({"round": i, "actual": int(r["accepted"]), "counterfactual": a2, "cut": a2 >= left,
                     "tokens": n, "counterfactual_tokens": min(a2 + 1, left)})
        start += n
    return rows


def _replay(r: dict, i: int, after: list[int], mode: str, rule: str, seed: int, cap) -> tuple[int, dict]:
    """(accepted drafts, {d: {"sites", "attached"}}) of round i (record r) assembled with (mode, rule) from its own
    drafts; `after`: the tokens the run committed after its anchor (at T=0, the target's choices)."""
    if mode == "ar":
        return 0, {}
    shifted = {} if mode == "dflash" else {b["d"]: b["tokens"] for b in r["shifted"]}
    _, info, trie = proposal(r["baseline"], shifted, mode, rule, random.Random(seed * 1_000_003 + i),
                             max_nodes=round_node_cap(r, i, cap))
    chain, _ = accept(trie, lambda n: after[trie.depths[n]] if trie.depths[n] < len(after) else -1)  # T=0: the target's pick
    return len(chain) - 1, info


def _check_replayable(trace: dict, mode: str, rule: str, sampled: bool = False):
    """The trace's node cap, or ValueError when (mode, rule) cannot be replayed on it. `sampled`: a T>0 trace is
    replayed along its realised draw (attachment_table), not refused."""
    cfg = trace.get("config") or {}
    if mode not in MODES or rule not in RULES:
        raise ValueError(f"counterfactual: unknown mode {mode!r} or rule {rule!r}")
    if not sampled and is_sampled(trace):
        raise ValueError("counterfactual: needs a T=0 trace (at T>0 acceptance is a draw, not a function of the drafts)")
    if mode in TREE_MODES or cfg.get("mode") in TREE_MODES:
        raise ValueError("counterfactual: tree modes are grown from the drafter's ranking, which a trace does not "
                         "keep, so a tree cannot be replayed or replayed on")
    if mode not in UNSHIFTED_MODES and cfg.get("mode") in UNSHIFTED_MODES:
        raise ValueError(f"counterfactual: a {cfg.get('mode')} trace drafted no shifted blocks, so {mode} "
                         "cannot be replayed on it; make the run with shifted blocks the main run")
    try:
        return parse_max_trie_nodes(cfg.get("max_trie_nodes"))
    except InputError as e:
        raise ValueError(f"counterfactual: config.{e}") from None


def is_sampled(trace: dict) -> bool:
    """Whether the run sampled (T>0): its accepted lengths are then one draw's, not functions of the drafts."""
    return float((trace.get("config") or {}).get("temperature") or 0) != 0


# What a T>0 table's accepted counts are (attachment_text, the page's table, explain --json).
SAMPLED_NOTE = ("T>0: sites and each rule's choices are facts of the drafts; the accepted counts are the realised "
                "draw's: how far each rule's trie follows the tokens this run sampled (another trie would have met "
                "other coins and samples, so they are one draw's outcome, not the rule's expected length)")


def attachment_table(trace: dict, i: int, seed: int = 0, after: list[int] | None = None) -> dict:
    """Why each shifted block of round i attached where it did, from the trace alone (no model): per block its
    native index d (position anchor + d), its first token a_d (and its text, when the trace has token_texts), the
    baseline indices where a_d matches g(0) (its sites) and the site(s) each rule picks; per rule, the drafts the
    round would have accepted with it (as `counterfactual` counts them, from the same drafts; `random` with
    counterfactual's own seeded draws). `ran`: the rule the run used. The run's own assembly (its mode;
    shifted-fixed compares rules under reanchor). At T>0 (`sampled`) sites and choices are as exact as at T=0,
    and the counts follow the run's realised draw (SAMPLED_NOTE): the rule the run used gets its actual count."""
    cfg = trace.get("config") or {}
    run_mode = cfg.get("mode")
    mode = "reanchor" if run_mode == "shifted-fixed" else run_mode
    if run_mode in UNSHIFTED_MODES:
        raise ValueError(f"attachment: a {run_mode} run drafts no shifted blocks: there is no attachment to explain")
    cap = _check_replayable(trace, mode, DEFAULT_RULE, sampled=True)   # any rule: only the mode is checked here
    rounds = trace["rounds"]
    if not 0 <= i < len(rounds):
        raise ValueError(f"round: must be between 0 and {len(rounds) - 1}, got {i}")
    if after is None:  # `after`: what the run committed from round i on (a caller may keep it per trace)
        start = sum(len(r.get("new_tokens", [])) for r in rounds[:i])
        after = committed_tokens(trace)[start:]
    r, texts = rounds[i], trace.get("token_texts") or {}
    rules = {}
    blocks = [{"d": int(b["d"]), "native": int(r["anchor_pos"]) + int(b["d"]), "a_d": int(b["tokens"][0]),
               "a_d_text": texts.get(str(b["tokens"][0])),
               "sites": [int(t) for t in b.get("sites", [])], "choice": {}} for b in r["shifted"]]
    for rule in RULES:
        a, info = _replay(r, i, after, mode, rule, seed, cap)
        rules[rule] = {"accepted": a, "cut": a >= len(after)}
        for b in blocks:
            b["choice"][rule] = list(info.get(b["d"], {}).get("attached", []))
    ran = "fixed" if run_mode == "shifted-fixed" else cfg.get("rule")
    return {"round": i, "anchor_pos": int(r["anchor_pos"]), "mode": mode, "ran": ran,
            "actual": int(r["accepted"]), "sampled": is_sampled(trace), "rules": rules, "blocks": blocks}


def rules_differ(table: dict) -> bool:
    """Whether the rules of an attachment_table would have accepted different numbers of drafts."""
    return len({v["accepted"] for v in table["rules"].values()}) > 1


def disagreements(trace: dict, seed: int = 0) -> dict:
    """The rounds of a whole trace where the rules would differ: where their accepted counts (attachment_table)
    are not all equal. Each listed round keeps its table's counts and only the blocks whose choices differ between
    rules (a_d with its text). `rounds`: the rounds with shifted blocks (the others have no choice to make)."""
    cfg = trace.get("config") or {}
    if cfg.get("mode") in UNSHIFTED_MODES:
        raise ValueError(f"attachment: a {cfg.get('mode')} run drafts no shifted blocks: there is no attachment to "
                         "explain")
    _check_replayable(trace, "reanchor" if cfg.get("mode") == "shifted-fixed" else cfg.get("mode"), "earliest",
                      sampled=True)
    committed, start, out, n = committed_tokens(trace), 0, [], 0
    for i, r in enumerate(trace["rounds"]):
        if r["shifted"]:
            n += 1
            table = attachment_table(trace, i, seed, after=committed[start:])
            if rules_differ(table):
                table["blocks"] = [b for b in table["blocks"] if len({tuple(c) for c in b["choice"].values()}) > 1]
                out.append(table)
        start += len(r.get("new_tokens", []))
    return {"rounds": n, "rounds_in_trace": len(trace["rounds"]), "sampled": is_sampled(trace),
            "ran": "fixed" if cfg.get("mode") == "shifted-fixed" else cfg.get("rule"), "disagree": out}


def disagreements_text(found: dict, token_text=None) -> str:
    """disagreements as plain text (`explain --rounds all`): one line per round, then its differing blocks."""
    show = token_text or str
    rows = found["disagree"]
    lines = [f"{len(rows)} of {found['rounds']} rounds with shifted blocks (of {found['rounds_in_trace']}) where the "
             f"rules would accept different numbers of drafts; the run used rule {found['ran']}"]
    for t in rows:
        counts = ", ".join(f"{rule}{'*' if rule == t['ran'] else ''} {v['accepted']}{'+' if v['cut'] else ''}"
                           for rule, v in t["rules"].items())
        lines.append(f"round {t['round']} (anchor at {t['anchor_pos']}): accepted {counts}")
        for b in t["blocks"]:
            choice = "; ".join(f"{rule} {','.join(map(str, c)) or '–'}" for rule, c in b["choice"].items())
            lines.append(f"    g({b['d']}) a_d {show(b['a_d'])} sites {','.join(map(str, b['sites'])) or 'none'}: "
                         f"{choice}")
    if found["sampled"]:
        lines += ["", SAMPLED_NOTE]
    lines += ["", "* the run's rule; +: reached the run's end (at least); `explain --round N` shows a round in full"]
    return "\n".join(lines)


def attachment_text(table: dict, token_text=None) -> str:
    """attachment_table as plain text, one line per block and a line per rule (the `explain` command's output).
    `token_text(id)`: a token's text (default: its id)."""
    show = token_text or str
    rules = list(table["rules"])
    head = f"round {table['round']} · anchor at position {table['anchor_pos']} · mode {table['mode']}"
    lines = [head + f" · the run used rule {table['ran']} (marked *) and accepted {table['actual']} drafts", ""]
    cols = ["block", "native", "a_d", "sites"] + [r + ("*" if r == table["ran"] else "") for r in rules]
    rows = [cols]
    for b in table["blocks"]:
        rows.append([f"g({b['d']})", str(b["native"]), show(b["a_d"]), ",".join(map(str, b["sites"])) or "none"]
                    + [",".join(map(str, b["choice"][r])) or "–" for r in rules])
    rows.append(["accepted", "", "", ""] + [str(table["rules"][r]["accepted"]) + ("+" if table["rules"][r]["cut"]
                                                                                  else "") for r in rules])
    widths = [max(len(row[k]) for row in rows) for k in range(len(cols))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines += ["", "sites and choices: baseline indices t where g(0)[t] == a_d (native index: d); "
                  "accepted: drafts the round accepts with that rule's choices (+: the run's end, at least)"]
    if table.get("sampled"):
        lines.append(SAMPLED_NOTE)
    return "\n".join(lines)


def tree_round(trace: dict, i: int, after: list[int] | None = None) -> dict:
    """What the shifted blocks of a tree round (reanchor-tree, with a fixed or auto budget) added over the tree g(0)
    alone would have grown with the same budget (its recorded trie.ddtree, tree_alone), both walked along what the run
    committed after the anchor: `accepted` (the run's), `alone` (g(0)'s tree), `gain` (their difference: the
    round's tokens the shifted blocks added, negative where the nodes they took cost an accepted one), the blocks
    drafted and the nodes they put in the trie, and the g(0)-alone nodes they displaced. `why` instead of the
    comparison where the round has none (a ddtree run, no recorded tree, a plain budget step). At T>0 the walk
    follows the realised draw (`sampled`, as attachment_table)."""
    cfg = trace.get("config") or {}
    rounds = trace["rounds"]
    if cfg.get("mode") not in TREE_MODES:
        raise ValueError(f"tree: a {cfg.get('mode')} trace grew no tree (tree modes: {', '.join(TREE_MODES)})")
    if not 0 <= i < len(rounds):
        raise ValueError(f"round: must be between 0 and {len(rounds) - 1}, got {i}")
    if after is None:
        after = committed_tokens(trace)[sum(len(r.get("new_tokens", [])) for r in rounds[:i]):]
    r = rounds[i]
    blocks = r["trie"].get("block") or [0] * len(r["trie"]["tokens"])
    chain = r["accepted_nodes"][1:]
    out = {"round": i, "mode": cfg.get("mode"), "sampled": is_sampled(trace), "accepted": int(r["accepted"]),
           "shifted_drafted": len(r["shifted"]), "shifted_nodes": sum(1 for b in blocks[1:] if b),
           "nodes": len(r["trie"]["tokens"]), "accepted_from_shifted": sum(1 for n in chain if blocks[n])}
    budget = r.get("budget") if isinstance(r.get("budget"), dict) else None
    if cfg.get("mode") == "ddtree":
        return out | {"why": "a ddtree run: g(0)'s tree alone, no shifted blocks"}
    if budget and budget.get("plain"):
        return out | {"why": "the budget made a plain target step (no drafts)"}
    alone = tree_alone(r, after)
    if alone is None:
        return out | {"why": "the round recorded no g(0)-alone tree (trie.ddtree)"}
    return out | {"alone": alone["accepted"], "gain": out["accepted"] - alone["accepted"], "alone_nodes": alone["nodes"],
                  "displaced_nodes": alone["displaced_nodes"], "displaced_accepted": alone["displaced_accepted"]}


def tree_rounds(trace: dict) -> dict:
    """tree_round for every round of a tree trace: totals, and the rounds where the shifted blocks changed the
    accepted length (`changed`: gain != 0)."""
    committed, start, rows = committed_tokens(trace), 0, []
    for i, r in enumerate(trace["rounds"]):
        rows.append(tree_round(trace, i, after=committed[start:]))
        start += len(r.get("new_tokens", []))
    compared = [r for r in rows if "gain" in r]
    return {"rounds_in_trace": len(rows), "compared": len(compared), "sampled": is_sampled(trace),
            "better": sum(r["gain"] > 0 for r in compared), "worse": sum(r["gain"] < 0 for r in compared),
            "gain": sum(r["gain"] for r in compared), "changed": [r for r in compared if r["gain"]]}


def tree_rounds_text(found: dict) -> str:
    """tree_rounds in words (`explain --rounds all` on a tree trace)."""
    head = (f"{found['compared']} of {found['rounds_in_trace']} rounds compared with g(0)'s tree alone (same budget): "
            f"the shifted blocks added drafts in {found['better']}, cost drafts in {found['worse']}, "
            f"{found['gain']:+d} accepted drafts in all")
    return "\n\n".join([head] + [tree_text(r) for r in found["changed"]])


def tree_text(t: dict) -> str:
    """tree_round in words (the `explain` command, the inspector's caption)."""
    head = (f"round {t['round']} · {t['mode']} · accepted {t['accepted']} drafts · {t['shifted_drafted']} shifted "
            f"blocks drafted, {t['shifted_nodes']} of the {t['nodes']} nodes theirs, "
            f"{t['accepted_from_shifted']} of the accepted drafts theirs")
    if "why" in t:
        return f"{head}\n{t['why']}"
    verdict = (f"the shifted blocks added {t['gain']} accepted draft{'s' if t['gain'] != 1 else ''}" if t["gain"] > 0
               else f"the shifted blocks cost {-t['gain']} accepted draft{'s' if t['gain'] != -1 else ''}"
               if t["gain"] < 0 else "the shifted blocks added nothing")
    lines = [head, f"g(0)'s tree alone, same budget ({t['alone_nodes']} nodes): {t['alone']} accepted; {verdict} "
                   f"({t['displaced_nodes']} of its nodes displaced"
                   + (", one of them on the accepted path)" if t["displaced_accepted"] else ")")]
    if t["sampled"]:
        lines.append("T>0: both trees walked along this run's realised draw (the tokens it sampled)")
    return "\n".join(lines)


def round_node_cap(rnd: dict, i: int, cap: int | str | None) -> int | None:
    """The trie node cap of round i under the run's cap (parse_max_trie_nodes): None, a number, or for
    "auto" the nodes the round's budget verified."""
    if cap != "auto":
        return cap
    nodes = (rnd.get("budget") if isinstance(rnd.get("budget"), dict) else {}).get("nodes")
    if not isinstance(nodes, numbers.Integral) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError(f"counterfactual: the run had an auto node budget, but round {i} does not record its "
                         f"nodes (budget.nodes: {repr(nodes)[:20]}), so it cannot be replayed under it")
    return int(nodes)


def counterfactual_summary(rows: list[dict]) -> dict:
    """Totals over rounds: tau actual vs counterfactual (tokens committed a round, as `tau`: the run's own
    tau for its rounds), rounds better / worse / same (accepted drafts)."""
    n = len(rows)
    diff = [r["counterfactual"] - r["actual"] for r in rows]
    return {"rounds": n, "tau": _rate(sum(r["tokens"] for r in rows), n),
            "counterfactual_tau": _rate(sum(r["counterfactual_tokens"] for r in rows), n),
            "better": sum(d > 0 for d in diff), "worse": sum(d < 0 for d in diff),
            "same": sum(d == 0 for d in diff), "extra_drafts": sum(diff), "cut": sum(r["cut"] for r in rows)}


def summarize(traces: Traces) -> dict:
    """Every analysis for one group of traces (one set and mode, or any pooling)."""
    return {"rounds": sum(1 for _ in rounds_of(traces)), "tau": tau(traces),
            "acceptance_histogram": {str(k): v for k, v in acceptance_histogram(traces).items()},
            "full_block_share": full_block_share(traces),
            "post_rejection_agreement": post_rejection_agreement(traces),
            "alignment": alignment_stats(traces), "earliest_win": earliest_win_rate(traces),
            "gain_by_offset": gain_by_offset(traces), "sizes": round_sizes(traces),
            "tree_sources": tree_sources(traces)}

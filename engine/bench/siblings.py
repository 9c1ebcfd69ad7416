"""Re-anchoring from every rejected child of a tree (issue 40): an upper bound, measured with the models.

    python -m engine.bench.siblings --sets humaneval,mtbench,math,chat --n 2 --max-new-tokens 64 --nodes 32

A tree round ends at its last accepted node u. ReAnchor re-anchors the next round from one path past the
accepted chain (round.py, step 5). But every child c of u was verified and rejected, so the target's
features F(c), at the position s' where the bonus now sits, and its next token a_c (the argmax at c) are
there for free. Drafting

    g_c = D(F[<s'] ++ F(c), [a_c, MASK..])   at s'+1 .. s'+L-1   (a shifted block with d = 1, one per child)

and attaching it wherever the next round's tree holds a node carrying a_c (ReAnchor's token match, at any
node of the tree, not only on g(0)'s chain) gives the paths this lever could add. At T = 0 the target
accepts a path as far as it equals the greedy output, so the next round would have accepted
max(what it did, the best such path). With every child's block added and no node displaced from the
budget, that is an upper bound on the tau the lever can add.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import torch

from ..analyses import token_paths
from ..decode import DecodeConfig, Run
from ..decode.kv import ContextKV
from ..decode.round import decode_round, start
from ..options import DEFAULT_TREE_NODES


@dataclass
class Before:
    """What round r+1's drafter call needs, as it stood before that round: committed ids, the drafter's
    context cache (a copy: the round's own call extends it) and the features not yet in it."""
    x: list[int]
    ctx: ContextKV
    ctx_new: torch.Tensor


def watched_run(eng, ids: list[int], cfg: DecodeConfig) -> tuple[list[dict], list[Before], list[torch.Tensor], list[int]]:
    """A run round by round: (records, the state before each round, each verify's per-node features,
    prompt + output ids)."""
    rc = Run(eng, ids, cfg).round_config   # the config checked and resolved as a run resolves it
    feats: list[torch.Tensor] = []
    plain = type(eng).verify

    def verify(trie, s, cache, masks=None):
        logits, f = plain(eng, trie, s, cache, masks)
        feats.append(f)
        return logits, f

    eng.verify = verify   # the instance's verify for this run only
    try:
        with torch.inference_mode():
            first, st = start(eng, ids, rc, cfg.seed)
            out, recs, before = list(ids) + [first], [], []
            while not st.done:
                before.append(Before(list(st.x), st.ctx.copy(), st.ctx_new))
                rec, st = decode_round(eng, st, rc, len(recs))
                recs.append(rec)
                out += rec["new_tokens"]
    finally:
        del eng.verify
    return recs, before, feats, out


def child_block(eng, b: Before, child_features: torch.Tensor, a_c: int, s1: int, L: int) -> list[int]:
    """g_c: the block drafted at s1+1.. from the context before round r+1 plus one rejected child's features
    (at s1, where the bonus sits) and the target's token after it, as the engine drafts a shifted block g(1)."""
    with torch.inference_mode():
        return eng.draft(b.ctx.copy(), b.ctx_new, child_features, [b.x[-1], a_c], s1, L, 0.0, None, True).tokens[1]


def _agree(path: list[int], truth: list[int]) -> int:
    n = 0
    for a, b in zip(path, truth):
        if a != b:
            break
        n += 1
    return n


def sibling_counts(eng, recs: list[dict], before: list[Before], feats: list[torch.Tensor], out: list[int]) -> dict:
    """Per run: rounds r+1 scored, their accepted drafts, and the upper bound's (every rejected child of round
    r's last accepted node drafted and attached at every matching node of round r+1's tree); also the bound
    with the one child ReAnchor retains today (the first path's), and the check that the tree's own best path
    accepts what the round did (the bound's arithmetic on the real rounds)."""
    c = {"rounds": 0, "accepted": 0, "bound": 0, "bound_first_child": 0, "rounds_gaining": 0, "children": 0,
         "blocks_matching": 0, "own_tree_agrees": 0}
    for r in range(len(recs) - 1):
        rec, nxt = recs[r], recs[r + 1]
        if len(nxt["baseline"]) < 2:   # a plain step: no tree to attach to
            continue
        tokens, parents = rec["trie"]["tokens"], rec["trie"]["parents"]
        u = rec["accepted_nodes"][-1]
        kids = [v for v in range(len(tokens)) if parents[v] == u]
        s1, L, b = nxt["anchor_pos"], nxt["block_size"], before[r + 1]
        truth = out[s1 + 1:]
        paths = token_paths(nxt["trie"]["tokens"], nxt["trie"]["parents"])
        own = max(_agree(p[1:], truth) for p in paths)
        c["own_tree_agrees"] += own == nxt["accepted"]
        best = first = nxt["accepted"]
        for k, v in enumerate(kids):
            a_c = rec["target_top1"][v]
            sites = [p for p in paths if p[-1] == a_c]
            if not sites:
                continue
            c["blocks_matching"] += 1
            g = child_block(eng, b, feats[r][v: v + 1], a_c, s1, L)
            got = max(_agree([*p[1:], *g[1:]], truth) for p in sites)
            best = max(best, got)
            first = max(first, got) if k == 0 else first
        c["rounds"] += 1
        c["children"] += len(kids)
        c["accepted"] += nxt["accepted"]
        c["bound"] += best
        c["bound_first_child"] += first
        c["rounds_gaining"] += best > nxt["accepted"]
    return c


def summary(c: dict) -> dict:
    n = max(c["rounds"], 1)
    tau, bound = 1 + c["accepted"] / n, 1 + c["bound"] / n
    return {"rounds": c["rounds"], "tau": round(tau, 3), "tau_bound": round(bound, 3),
            "bound_over_tau": round(bound / tau, 3), "tau_bound_first_child": round(1 + c["bound_first_child"] / n, 3),
            "rounds_gaining": c["rounds_gaining"], "children_per_round": round(c["children"] / n, 2),
            "blocks_matching_per_round": round(c["blocks_matching"] / n, 2),
            "own_tree_agrees": f"{c['own_tree_agrees']}/{c['rounds']}"}


def main(argv: list[str] | None = None) -> int:
    from ..decode import Engine
    from ..models.args import add_model_args, models_from_args
    from ..options import parse_csv
    from ..sets import SETS, load_set

    p = argparse.ArgumentParser(prog="python -m engine.bench.siblings", description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--sets", default="humaneval,mtbench,math,chat", help=f"prompt sets ({', '.join(SETS)})")
    p.add_argument("--n", type=int, default=2, help="prompts per set")
    p.add_argument("--prompt", action="append", default=[], help="a prompt text (repeatable; replaces --sets)")
    p.add_argument("--mode", default="ddtree", choices=("ddtree", "reanchor-tree"))
    p.add_argument("--nodes", type=int, default=DEFAULT_TREE_NODES, help="the tree's node budget")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    eng = Engine(models_from_args(a))
    prompts = [("prompt", t) for t in a.prompt] or \
        [(s, r["prompt"]) for s in parse_csv(a.sets, tuple(SETS), "sets") for r in load_set(s)[: a.n]]
    cfg = DecodeConfig(mode=a.mode, max_new_tokens=a.max_new_tokens, ignore_eos=True, max_trie_nodes=a.nodes)
    per: dict[str, dict] = {}
    for name, text in prompts:
        c = sibling_counts(eng, *watched_run(eng, eng.encode_prompt(text), cfg))
        per[name] = {k: per.get(name, {}).get(k, 0) + v for k, v in c.items()}
        print(f"{name}: {c['rounds']} rounds", file=sys.stderr)
    total = {k: sum(v[k] for v in per.values()) for k in next(iter(per.values()))}
    table = {**{k: summary(v) for k, v in per.items()}, "all": summary(total)}
    print(f"| set | rounds | {a.mode} tau | bound: every child's block | bound / tau | bound: the first child only "
          "| rounds gaining | rejected children a round | their blocks matching a node a round |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, v in table.items():
        print(f"| {k} | {v['rounds']} | {v['tau']} | {v['tau_bound']} | {v['bound_over_tau']}x | "
              f"{v['tau_bound_first_child']} | {v['rounds_gaining']} | {v['children_per_round']} | "
              f"{v['blocks_matching_per_round']} |")
    print(json.dumps(table), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Draft trees from the drafter's own ranking (DDTree) and ReAnchor's shifted blocks grown into the same
tree. Pure Python over ranked lists; no model.

A source is one drafted block: the baseline g(0) (its position j sits at depth j), or a shifted block g(d)
attached at baseline site t (its position i sits at depth t+i, under the baseline prefix g(0)[0..t]). For
every position a source gives the drafter's top-k tokens with their log-probabilities, best first.

A tree node is a token path from the anchor. Its score is the sum of the drafter's log-probabilities along
the path, log w = sum_i log q_i(y_i): the drafter's own estimate that the target follows the path, so the
expected accepted length of a tree is sum over its nodes of w (DDTree's surrogate). A shifted block's nodes
score from the baseline prefix it hangs under: log w(g(0)[..t]) + sum of g(d)'s own log-probabilities.
A drafter with a confidence head (DSpark) has a better estimate: c_j, P(its drafted token at j is accepted
| the ones before were). Nodes then score sum of log e along the path (`head_logq`): e = c_j for the drafted
token, e = (1 - c_j) q / (1 - q_drafted) for another (the drafter's law over the tokens it did not draft).
The tree still grows by log w (the drafter's ranking); the score is what the budget calibrates and cuts by.

Best-first selection: a heap of candidates (score, source, position, rank, parent). Popping the best adds
its node and pushes two candidates: the next sibling (same source, position and parent; rank + 1) and the
first child (same source, next position, rank 0, under the new node). Scores never grow along a path or
down a ranked list, so a node's parent is always popped first and the first N pops are the N best prefixes.
Two sources proposing the same token under the same node meet in one node; the later pop adds no node
(it costs no budget) but still pushes its own candidates, so both sources' continuations compete below.
"""
from __future__ import annotations

import heapq
import math
import operator
import random
from dataclasses import dataclass, field

from .attach import Path, assemble
from .trace import rounded
from .trie import Trie, build_trie


@dataclass
class Source:
    """One drafted block's ranked candidates: top[j] = [(token, log q), ...] best first, for the block's
    positions 1.. (top[0] is position 1). `site`: the baseline depth it hangs under (0 for the baseline)."""
    d: int                                  # 0 = baseline, d = shifted block g(d)
    site: int
    top: list[list[tuple[int, float]]]
    prefix_score: float = 0.0               # log w of the baseline prefix g(0)[..site]
    conf: list[float] | None = None         # a confidence head's c_j per position (top[j][0] is the drafted token)


@dataclass
class Tree:
    """Nodes in the order they were added (node 0 is the anchor); parents precede children. A node's
    source is an index into the sources it was built from (the one that first proposed it)."""
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    scores: list[float]                     # log w (the anchor: 0)
    sources: list[int]                      # index of the source that first proposed the node
    ranks: list[int]                        # its rank there (anchor: 0)
    logq: list[float]                       # its log-probability there (anchor: 0)
    also: list[list[int]] = field(default_factory=list)  # other sources that proposed the same node

    def __len__(self) -> int:
        return len(self.tokens)

    def path(self, node: int) -> list[int]:
        """Node ids from the anchor to `node`."""
        out = [node]
        while self.parents[out[-1]] >= 0:
            out.append(self.parents[out[-1]])
        return out[::-1]


def best_first(anchor: int, sources: list[Source], budget: int, max_depth: int, ranker=None) -> Tree:
    """The `budget` best nodes (the anchor not counted) from every source, by log w, depth <= max_depth.

    sources[0] is the baseline. A shifted source enters the heap once the node it hangs under (the
    baseline's rank-0 prefix to its site) is in the tree. `ranker` (engine/decode/cost.py TreeRanker):
    rank by its calibrated log P(the target accepts the node | it accepts the parent) per source, rank and
    position instead of the drafter's log q; a node's score is then the log of its path's estimated
    acceptance. Both never grow along a path, so parents still precede children."""
    tree = Tree([anchor], [-1], [0], [0.0], [0], [0], [0.0], [[]])
    tokens, parents, depths, scores, owner, ranks, logq, also = (
        tree.tokens, tree.parents, tree.depths, tree.scores, tree.sources, tree.ranks, tree.logq, tree.also)
    merge = len(sources) > 1                     # one source: a position's tokens differ, no two pops meet
    kids: dict[tuple[int, int], int] = {}
    heap: list[tuple] = []
    waiting: dict[int, list[int]] = {}           # site depth -> shifted sources hanging there
    chain = {0: 0}                               # depth -> node of g(0)'s rank-0 prefix
    tops, sites, ds = [src.top for src in sources], [src.site for src in sources], [src.d for src in sources]
    push_ = heapq.heappush

    def push(i: int, pos: int, rank: int, parent: int, base: float) -> None:
        top, depth = tops[i], sites[i] + pos + 1
        if pos < len(top) and rank < len(top[pos]) and depth <= max_depth:
            lq = top[pos][rank][1]
            v = lq if ranker is None else ranker.log_accept(ds[i], rank, depth, lq)
            # best score first; ties: baseline before shifted, shallow first, then rank (deterministic)
            push_(heap, (-(base + v), i, depth, rank, parent, pos, base, v))

    for i, src in enumerate(sources[1:], start=1):
        waiting.setdefault(src.site, []).append(i)
    push(0, 0, 0, 0, 0.0)
    for i in waiting.pop(0, []):                 # shifted blocks attached at the anchor itself
        push(i, 0, 0, 0, 0.0)
    added, pop = 0, heapq.heappop
    while heap and added < budget:
        _, i, depth, rank, parent, pos, base, v = pop(heap)
        tok, lq = tops[i][pos][rank]
        node = kids.get((parent, tok)) if merge else None
        if node is None:
            node = len(tokens)
            if merge:
                kids[(parent, tok)] = node
            tokens.append(tok)
            parents.append(parent)
            depths.append(depth)
            scores.append(base + v)
            owner.append(i)
            ranks.append(rank)
            logq.append(lq)
            also.append([])
            added += 1
        elif i != owner[node] and i not in also[node]:
            also[node].append(i)
        # the baseline's rank-0 chain goes on through its node even where another block made it first
        if merge and i == 0 and rank == 0 and depth not in chain and chain.get(depth - 1) == parent:
            chain[depth] = node
            for j in waiting.pop(depth, []):
                push(j, 0, 0, node, scores[node])
        push(i, pos, rank + 1, parent, base)     # next sibling
        push(i, pos + 1, 0, node, base + v)      # first child
    return tree


def as_trie(tree: Tree) -> tuple[Trie, list[int]]:
    """The tree as the trie of its root-to-leaf paths, and per trie node its tree node. The paths are the
    leaves depth first, children by descending score (ties: the older node first), so the first path through
    any node follows its best-scoring continuation (the path a round retains past the accepted chain);
    nodes are numbered as build_trie numbers them for those paths: depth-first preorder. In preorder a
    node's subtree is the next `size` nodes, so the paths through it are a run of leaves: its provenance is
    a range (one pass, where walking every leaf's path up cost a round's tree as much as growing it)."""
    n, tp, sc = len(tree), tree.parents, tree.scores
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        children[tp[i]].append(i)
    # a node's children in insertion order are in score order already where scores fall along the
    # insertion order (one source ranked by the drafter: the heap pops them so); sort only otherwise
    if not all(map(operator.ge, sc[1:], sc[2:])):
        for kids in children:
            if len(kids) > 1:
                kids.sort(key=lambda c: -sc[c])     # stable: ties keep the older node first
    tokens, parents, depths, of, path_nodes, before = [], [], [], [], [], []
    tt, td = tree.tokens, tree.depths
    stack = [(0, -1, ())]
    while stack:
        node, parent, up = stack.pop()
        k = len(of)
        of.append(node)
        tokens.append(tt[node])
        parents.append(parent)
        depths.append(td[node])
        before.append(len(path_nodes))           # leaves before node k in preorder
        along = up + (k,)
        kids = children[node]
        if kids:
            stack.extend([(c, k, along) for c in reversed(kids)])
        else:
            path_nodes.append(list(along))
    size = [1] * len(of)
    for k in range(len(of) - 1, 0, -1):          # parents precede children
        size[parents[k]] += size[k]
    before.append(len(path_nodes))
    provenance = [list(range(before[k], before[k + size[k]])) for k in range(len(of))]
    return Trie(tokens, parents, depths, provenance, path_nodes, [True] * len(path_nodes), size), of


def tree_proposal(baseline: list[int], shifted: dict[int, list[int]], ranked: list[list[list[tuple[int, float]]]],
                  mode: str, rule: str, rng: random.Random, depth_cap: int, nodes: int,
                  confidence: list[list[float]] | None = None, ranker=None) -> tuple[list[Path], dict[int, dict], Trie, dict]:
    """One round's tree: (paths, per-offset sites, trie, per-node drafter facts).

    ranked[0] is the baseline's ranking, ranked[r] that of the r-th shifted block (offsets ascending).
    ddtree grows the baseline alone; reanchor-tree also hangs every shifted block the rule attaches
    (attach.assemble) under its site. `nodes` caps the trie, the anchor included. The per-node facts,
    aligned with the trie: the block that proposed the node ("block": 0 or d), its rank and drafter
    probability there, and its score: log w, or with `confidence` (per row and position, a confidence
    head's c_j) the log of the head's survival estimate (module docstring), or with a `ranker` the log
    of its calibrated estimate that the target accepts the node's path (best_first).
    A reanchor-tree round also records "ddtree": the tree g(0) alone would have grown with the same
    budget and ranking ({tokens, parents, score}, parents within it), so that an analysis can tell which
    of its nodes the shifted blocks displaced (analyses.tree_sources)."""
    info: dict[int, dict] = {}
    conf = confidence or [None] * len(ranked)
    sources = [Source(0, 0, ranked[0], conf=conf[0])]
    if mode == "reanchor-tree":
        _, info = assemble(baseline, shifted, "reanchor", rule, rng)
        for row, d in enumerate(sorted(shifted), start=1):
            sources += [Source(d, t, ranked[row], conf=conf[row]) for t in info[d]["attached"]]
    tree = best_first(baseline[0], sources, max(nodes - 1, 0), depth_cap, ranker)
    trie, of = as_trie(tree)
    paths = []
    for along in trie.path_nodes:
        src = sources[tree.sources[of[along[-1]]]]
        paths.append(Path(src.d, src.site if src.d else None, [trie.tokens[n] for n in along]))
    scores = tree_scores(tree, sources, ranker)
    facts = {"block": [sources[tree.sources[n]].d for n in of], "rank": [tree.ranks[n] for n in of],
             "prob": rounded([math.exp(tree.logq[n]) for n in of], 6), "score": [scores[n] for n in of]}
    if mode == "reanchor-tree":
        alt = best_first(baseline[0], sources[:1], max(nodes - 1, 0), depth_cap, ranker)
        facts["ddtree"] = {"tokens": alt.tokens, "parents": alt.parents, "score": tree_scores(alt, sources, ranker)}
    return paths, info, trie, facts


def tree_scores(tree: Tree, sources: list[Source], ranker=None) -> list[float]:
    """Every tree node's score (tree_proposal), rounded as a trace keeps it."""
    if ranker is not None or (len(sources) == 1 and sources[0].conf is None):  # one source: no node merged,
        return rounded(tree.scores, 4)     # so the heap's log w is the path's sum of log q already
    return rounded(path_scores(tree.parents, [node_logq(tree, sources, n) for n in range(len(tree))]), 4)


def node_logq(tree: Tree, sources: list[Source], n: int) -> float:
    """A tree node's own log acceptance estimate: log q, or from its source's confidence head."""
    src = sources[tree.sources[n]]
    if n == 0 or src.conf is None:
        return tree.logq[n] if n else 0.0
    pos = tree.depths[n] - src.site - 1
    return head_logq(tree.logq[n], src.top[pos][0][1], src.conf[pos], tree.ranks[n] == 0)


HEAD_FLOOR = 1e-9   # a confidence of exactly 0 or 1 must not make a log infinite


def head_logq(lq: float, lq_drafted: float, c: float, drafted: bool) -> float:
    """log e for a node whose drafter law gives it log q = `lq` at a position where the head's confidence
    in the drafted token (log q = `lq_drafted`) is c: e = c for that token, else (1 - c) q / (1 - q_drafted)."""
    if drafted:
        return math.log(max(c, HEAD_FLOOR))
    share = min(math.exp(lq) / max(1.0 - math.exp(lq_drafted), HEAD_FLOOR), 1.0)
    return math.log(max((1.0 - c) * share, HEAD_FLOOR))


def path_scores(parents: list[int], logq: list[float]) -> list[float]:
    """log w of every node: its log-probability plus its parent's (parents precede children)."""
    out = [0.0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + logq[i]
    return out


def best_nodes(scores: list[float], n: int) -> list[int]:
    """The anchor and the n best nodes by log w, best first. Scores never grow along a path and ties go to
    the lower node id (parents come first), so every prefix of this order is a tree."""
    return [0] + sorted(range(1, len(scores)), key=lambda i: (-scores[i], i))[:n]


PER_NODE = ("block", "rank", "prob", "score")   # the facts aligned with the trie; others are the round's


def prune(paths: list[Path], trie: Trie, facts: dict, keep: set[int]) -> tuple[Trie, dict]:
    """The trie cut to the nodes in `keep` (a tree: every kept node's parent is kept) and its per-node
    facts, re-aligned. Each path stops at its first dropped node; `paths` themselves stay whole, as
    build_trie's max_nodes leaves them. A recorded "ddtree" alternative is cut to as many nodes, its best."""
    cut = [p.tokens[: next((j for j, n in enumerate(nodes) if n not in keep), len(nodes))]
           for p, nodes in zip(paths, trie.path_nodes)]
    new = build_trie(cut)
    old_of = {}
    for nodes_old, nodes_new in zip(trie.path_nodes, new.path_nodes):
        old_of.update(zip(nodes_new, nodes_old))
    out = {k: [v[old_of[i]] for i in range(len(new))] for k, v in facts.items() if k in PER_NODE}
    if "ddtree" in facts:
        out["ddtree"] = cut_tree(facts["ddtree"], len(new))
    return new, out


def cut_tree(alt: dict, n: int) -> dict:
    """A recorded {tokens, parents, score} tree cut to its n best nodes (the anchor included), renumbered."""
    keep = sorted(best_nodes(alt["score"], n - 1))
    new_id = {old: i for i, old in enumerate(keep)}
    return {"tokens": [alt["tokens"][i] for i in keep], "score": [alt["score"][i] for i in keep],
            "parents": [new_id.get(alt["parents"][i], -1) for i in keep]}

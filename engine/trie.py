"""Merge and acceptance (docs/algorithm.md, steps 3 and 5). Pure Python: no model, no torch (reading a trace
needs neither); the verify call builds its tree mask from `parents` on the target's device."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class Trie:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    provenance: list[list[int]]                     # path indices through each node
    path_nodes: list[list[int]] = field(default_factory=list)  # node ids along each path
    # path i's length in the trie does not depend on its tokens (what speculative sampling needs to
    # trust its draws' laws): it had room for all of them even had every one been new, or it is the
    # first path (all its tokens are new: a node cap cuts it at a fixed depth)
    whole: list[bool] = field(default_factory=list)
    # subtree sizes when the nodes are numbered in depth-first preorder (node j's subtree is nodes
    # j .. j + sizes[j] - 1: a tree round's trie, tree.as_trie); None otherwise
    sizes: list[int] | None = None

    def __len__(self) -> int:
        return len(self.tokens)


def build_trie(paths: list[list[int]], max_nodes: int | None = None) -> Trie:
    """Merge token paths (all starting with the same anchor) into a trie; node 0 is the anchor.

    Nodes are numbered in insertion order, so the baseline path (inserted first) is a chain 0..L-1.
    With `max_nodes`, a path stops where it would add a node beyond the budget.
    """
    root = paths[0][0]
    if len(paths) == 1:  # one path (a chain mode's baseline alone): a chain, no merging to do
        n = len(paths[0]) if max_nodes is None else max(1, min(len(paths[0]), max_nodes))
        return Trie(list(paths[0][:n]), list(range(-1, n - 1)), list(range(n)), [[0] for _ in range(n)],
                    [list(range(n))], [True], list(range(n, 0, -1)))
    trie = Trie([root], [-1], [0], [[]])
    children: dict[tuple[int, int], int] = {}
    for i, path in enumerate(paths):
        if path[0] != root:
            raise ValueError("every path must start at the anchor")
        node, nodes = 0, [0]
        trie.whole.append(max_nodes is None or i == 0 or len(trie) + len(path) - 1 <= max_nodes)
        trie.provenance[0].append(i)
        for depth, tok in enumerate(path[1:], start=1):
            child = children.get((node, tok))
            if child is None:
                if max_nodes is not None and len(trie) >= max_nodes:
                    break
                child = len(trie)
                children[(node, tok)] = child
                trie.tokens.append(tok)
                trie.parents.append(node)
                trie.depths.append(depth)
                trie.provenance.append([])
            trie.provenance[child].append(i)
            node = child
            nodes.append(node)
        trie.path_nodes.append(nodes)
    return trie


def accept(trie: Trie, next_token: Callable[[int], int]) -> tuple[list[int], int]:
    """Walk from the root: y = next_token(node) (argmax or a target sample); follow the child
    carrying y, else stop. Returns the accepted node chain (root first) and the bonus token y.

    Each accepted token is what the target itself would emit under its verified prefix: lossless.
    """
    node, chain, tokens = 0, [0], trie.tokens
    if trie.sizes is not None:  # preorder: node k's children are k + 1, then each after its sibling's subtree
        size = trie.sizes
        while True:
            y, c, end = next_token(node), node + 1, node + size[node]
            while c < end and tokens[c] != y:
                c += size[c]
            if c >= end:
                return chain, y
            node = c
            chain.append(node)
    kids: dict[int, dict[int, int]] = {}
    for i, p in enumerate(trie.parents[1:], start=1):
        kids.setdefault(p, {}).setdefault(tokens[i], i)
    while True:
        y = next_token(node)
        child = kids.get(node, {}).get(y)
        if child is None:
            return chain, y
        node = child
        chain.append(node)


def first_path_through(paths: Sequence[Sequence[int]], chain: Sequence[int]) -> int | None:
    """The retained-path rule: P* is the first path (the baseline first) that begins with the accepted chain; the
    next round keeps the drafter's states along its rejected rest. `paths` and `chain` as node ids or as their
    tokens (in a trie both name the same paths, the anchor first). None when no path does."""
    a = len(chain)
    return next((i for i, p in enumerate(paths) if list(p[:a]) == list(chain)), None)


def retained_path(trie: Trie, chain: list[int]) -> int:
    """Index of P* in the trie of a round (first_path_through over its nodes)."""
    i = first_path_through(trie.path_nodes, chain)
    if i is None:
        raise AssertionError("the accepted chain lies on no path")
    return i

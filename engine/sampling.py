"""Speculative sampling over a trie at T > 0: the "speculative" acceptance (engine.options.ACCEPTANCE).

Lossless like sample-and-match (trie.accept), and it accepts more when drafts are sampled: a
single draft from q passes with probability sum_x min(p, q)(x), against sum_x p(x) q(x).
Pure Python. Laws (the target's and the drafter's distributions) are opaque objects here, and a
Laws object does their arithmetic: engine/decode/laws.py on torch rows, the tests on exact lists.

One node u (SpecInfer's multi-step speculative sampling; Leviathan / Chen for one proposal):

    p_1 = p_u, the target's law after u at temperature T. For u's proposals c_1..c_k in order:
        accept c_i with probability min(1, p_i(c_i) / q_i(c_i)) and move into its child;
        else p_{i+1} = norm(max(p_i - q_i, 0)).
    All rejected: the bonus y ~ p_{k+1}. No proposals (a leaf): y ~ p_u.

Exact: if c_i, given all the walk has looked at so far, has law q_i, and its coin is fresh, then
P(emit x) = min(p_i, q_i)(x) + (1 - sum_z min(p_i, q_i)(z)) p_{i+1}(x) = p_i(x). By induction
from the last proposal each node emits p_u, so a round emits the target's law. A point mass
q_i = delta(c_i) (argmax drafts, deterministic trees) accepts with p_i(c_i) and removes c_i from
p_{i+1}; with point masses only this is sample-and-match, the best rule for deterministic drafts.

When may a proposal use the law its token was drawn from? (Otherwise it is a point mass: exact
for any token fixed before the coins, since one may condition on it.)
- A path proposes its own draws (attach.Path.draws). Up to its site a shifted path carries the
  baseline's draws, the same random variables: a draw is proposed at most once per node.
- Paths go in order, the baseline first. The sites are functions of the baseline's draws
  (g(0)[t] == a_d), so a shifted path reveals something of the baseline; but it is looked at
  only after the baseline's draw at that node was rejected, and the walk never returns to the
  baseline afterwards. Likewise a path is looked at only after every earlier path through the
  node was rejected, and those never come back.
- Rows are drawn independently given the round's state, and a row with one path proposes its
  draws in order along it, each looked at once. So q_{d,j} (for sequential drafters: the law
  given the row's tokens before j) is its law given all the walk saw.
- A block attached at several sites (rule "all") puts the same draws on several paths: having
  looked at g(d)[j] on one, the walk could meet it, or a later draw of that row, on another.
  Such rows are point masses.
- Under a trie node cap a path's length in the trie depends on its tokens (a token matching an
  existing node fits, a new one may not): only paths that fit whole (Trie.whole) use their laws.
  The first path (the baseline) is the exception: all its tokens are new, so the cap cuts it at a
  fixed depth, and it keeps its law.
Drafters and tree builders plug in through `law_of(source, j)`: a law, or None for a
deterministic proposal, so sampled and deterministic proposals mix in one trie. A deterministic
proposal (a top-k child, an argmax draft) may depend on the round's state and on the tokens of its
own path before it, never on a sampled draw the walk may still test (tests/test_spec_sampling.py
computes the law of a round exactly: extend it with any new kind of proposal).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Protocol

from .attach import Draw
from .trie import Trie


class Laws(Protocol):
    """The arithmetic on laws (distributions over the vocabulary) the walk needs, and its coins."""

    def prob(self, law: Any, token: int) -> float: ...

    def residual(self, law: Any, q: Any | None, token: int) -> Any:
        """norm(max(law - q, 0)); q None: the point mass at `token` (law with `token` removed)."""

    def sample(self, law: Any) -> int: ...

    def bernoulli(self, prob: float) -> bool: ...


def node_proposals(trie: Trie, draws: list[list[Draw | None]]) -> dict[int, list[tuple[int, Draw]]]:
    """Per node, its proposals in path order: (child node, draw), each distinct draw once."""
    props: dict[int, list[tuple[int, Draw]]] = {}
    for i, nodes in enumerate(trie.path_nodes):
        for k in range(1, len(nodes)):
            here = props.setdefault(nodes[k - 1], [])
            if all(draw != draws[i][k] for _, draw in here):
                here.append((nodes[k], draws[i][k]))
    return props


def lawful_sources(trie: Trie, sources: list[int]) -> set[int]:
    """Sources whose draws may be tested against their own laws: one path, fitting whole."""
    count = Counter(sources)
    return {s for i, s in enumerate(sources) if count[s] == 1 and trie.whole[i]}


def speculative_accept(trie: Trie, sources: list[int], draws: list[list[Draw | None]],
                       target: Callable[[int], Any], law_of: Callable[[int, int], Any | None],
                       laws: Laws) -> tuple[list[int], int]:
    """Walk from the root by recursive rejection sampling. `sources[i]` and `draws[i]` describe
    path i of the trie (attach.Path), `target(node)` is p at that node, `law_of(d, j)` the law
    g(d)[j] was drawn from (None: deterministic). Returns the accepted chain (root first) and
    the bonus token, as trie.accept does."""
    props, lawful = node_proposals(trie, draws), lawful_sources(trie, sources)
    node, chain = 0, [0]
    while True:
        p = target(node)
        for child, (d, j) in props.get(node, []):
            tok = trie.tokens[child]
            q = law_of(d, j) if d in lawful else None
            qx = 1.0 if q is None else laws.prob(q, tok)
            px = laws.prob(p, tok)
            if qx > 0 and laws.bernoulli(min(1.0, px / qx)):
                node = child
                chain.append(node)
                break
            p = laws.residual(p, q, tok)
        else:
            return chain, laws.sample(p)

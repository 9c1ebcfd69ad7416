"""Proposal assembly (docs/algorithm.md, step 2): attach shifted blocks to the baseline by token matching.

Pure functions on token lists; no model. A path is a token list starting at the anchor (depth 0).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .options import mode_rule
from .trie import Trie, build_trie

Draw = tuple[int, int]   # (source d, block index j): the token drafted at g(d)[j], j >= 1


@dataclass
class Path:
    source: int          # 0 = baseline, d = shifted block g(d)
    site: int | None     # baseline index the shifted block was attached at
    tokens: list[int]
    # per depth, the drafted token it is: (0, k) up to the site (the baseline's own), then (d, j);
    # None at depth 0 (the anchor is no draft). Speculative sampling needs each token's law.
    draws: list[Draw | None] = field(default_factory=list)


def match_sites(baseline: list[int], shifted_anchor: int) -> list[int]:
    """Baseline indices t where g(0)[t] == g(d)[0] (positive overlaps)."""
    return [t for t, tok in enumerate(baseline) if tok == shifted_anchor]


def choose_sites(sites: list[int], d: int, rule: str, rng: random.Random) -> list[int]:
    """The attachment site(s) a rule picks among the matching ones (empty: block discarded)."""
    if not sites:
        return []
    if rule == "earliest":
        return [sites[0]]
    if rule == "latest":
        return [sites[-1]]
    if rule == "fixed":
        return [d] if d in sites else []
    if rule == "random":
        return [rng.choice(sites)]
    if rule == "all":
        return list(sites)
    raise ValueError(f"rule: unknown attachment rule {rule!r}")


def attach(baseline: list[int], block: list[int], site: int) -> list[int]:
    """g(0)[0..t*] ++ g(d)[1..]: the overlap token is kept once."""
    return baseline[: site + 1] + block[1:]


def attach_draws(d: int, site: int, n: int) -> list[Draw | None]:
    """The draws along attach(baseline, g(d), site) for a block of n = len(g(d)) tokens."""
    return [None] + [(0, k) for k in range(1, site + 1)] + [(d, j) for j in range(1, n)]


def assemble(baseline: list[int], shifted: dict[int, list[int]], mode: str, rule: str,
             rng: random.Random) -> tuple[list[Path], dict[int, dict]]:
    """The paths Y of one round and, per offset d, its matching and chosen sites.

    Modes change only the assembly: in-block cuts paths to the native block length, extension
    keeps only what a path adds beyond it (grafted after the whole baseline block).
    """
    L = len(baseline)
    base_draws = attach_draws(0, L - 1, 1)
    paths = [Path(0, None, list(baseline), base_draws)]
    info: dict[int, dict] = {}
    rule = mode_rule(mode, rule)
    for d in sorted(shifted):
        block = shifted[d]
        sites = match_sites(baseline, block[0])
        chosen = choose_sites(sites, d, rule, rng)
        info[d] = {"sites": sites, "attached": chosen}
        for t in chosen:
            p, dr = attach(baseline, block, t), attach_draws(d, t, len(block))
            if mode == "in-block":
                p, dr = p[:L], dr[:L]
            elif mode == "extension":
                p, dr = baseline + p[L:], base_draws + dr[L:]
            paths.append(Path(d, t, p, dr))
    return paths, info


def proposal(baseline: list[int], shifted: dict[int, list[int]], mode: str, rule: str,
             rng: random.Random, depth_cap: int | None = None, max_nodes: int | None = None
             ) -> tuple[list[Path], dict[int, dict], Trie]:
    """One round's proposal: the paths Y, per offset its sites, and their trie. `depth_cap` cuts
    every path at that depth (the run's last position), `max_nodes` caps the trie."""
    paths, info = assemble(baseline, shifted, mode, rule, rng)
    cut = None if depth_cap is None else depth_cap + 1
    return paths, info, build_trie([p.tokens[:cut] for p in paths], max_nodes)

"""Proposal assembly (ALGORITHM.md section 2): attach shifted blocks to the baseline by token matching.

Pure functions on token lists; no model. A path is a token list starting at the anchor (depth 0).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .trie import Trie, build_trie


@dataclass
class Path:
    source: int          # 0 = baseline, d = shifted block g(d)
    site: int | None     # baseline index the shifted block was attached at
    tokens: list[int]


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


def assemble(baseline: list[int], shifted: dict[int, list[int]], mode: str, rule: str,
             rng: random.Random) -> tuple[list[Path], dict[int, dict]]:
    """The paths Y of one round and, per offset d, its matching and chosen sites.

    Modes change only the assembly: in-block cuts paths to the native block length, extension
    keeps only what a path adds beyond it (grafted after the whole baseline block).
    """
    L = len(baseline)
    paths = [Path(0, None, list(baseline))]
    info: dict[int, dict] = {}
    if mode == "shifted-fixed":
        rule = "fixed"
    for d in sorted(shifted):
        block = shifted[d]
        sites = match_sites(baseline, block[0])
        chosen = choose_sites(sites, d, rule, rng)
        info[d] = {"sites": sites, "attached": chosen}
        for t in chosen:
            p = attach(baseline, block, t)
            if mode == "in-block":
                p = p[:L]
            elif mode == "extension":
                p = baseline + p[L:]
            paths.append(Path(d, t, p))
    return paths, info


def proposal(baseline: list[int], shifted: dict[int, list[int]], mode: str, rule: str,
             rng: random.Random, depth_cap: int | None = None, max_nodes: int | None = None
             ) -> tuple[list[Path], dict[int, dict], Trie]:
    """One round's proposal: the paths Y, per offset its sites, and their trie. `depth_cap` cuts
    every path at that depth (the run's last position), `max_nodes` caps the trie."""
    paths, info = assemble(baseline, shifted, mode, rule, rng)
    cut = None if depth_cap is None else depth_cap + 1
    return paths, info, build_trie([p.tokens[:cut] for p in paths], max_nodes)

"""One decoding round as a function of (state, config): docs/algorithm.md, steps 0-6.

    draft    g(0) = D(F[<s], [x_s, MASK..]) at s..s+L-1, and g(d) = D(F[<s] ++ R[<d], [a_d, MASK..])
             at s+d..s+d+L-1 for every retained offset d: one batched drafter call
    attach   g(d) joins g(0) where g(0)[t] == g(d)[0]: path g(0)[..t] ++ g(d)[1..] (attach.py)
    verify   all trie nodes in one target call, node at depth k at position s+k (tree mask)
    accept   T = 0: walk from the root along the child carrying the target's argmax y (trie.accept);
             T > 0: speculative sampling against each draft's law q (engine/sampling.py), or
             sample-and-match (trie.accept with target samples) when asked for;
             a = accepted drafts, the last token is the bonus and the next anchor, s' = s+a+1
    retain   the first path through the accepted chain: its nodes past the chain keep their
             features R' and the target's token after each, a'_d, for the next round's g(d)

The model calls are the Engine's; everything else is pure bookkeeping over token lists.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

import torch

from ..attach import proposal
from ..options import DEFAULT_ACCEPTANCE, DEFAULT_TREE_NODES, MAX_TRIE_NODES, TREE_MODES, UNSHIFTED_MODES
from ..sampling import speculative_accept
from ..trace import STAGES, round_record, rounded
from ..tree import best_nodes, prune, tree_proposal
from ..trie import accept, retained_path
from .drafting import confidences, node_facts, ranked
from .kv import ContextKV
from .laws import Law, TorchLaws, target_law

TOP_K = 32            # ranked candidates per position for trees: a rank-r node needs r siblings before it
AUTO_MAX_NODES = 96   # the tree the budget chooses from (the profile measures verify calls up to 128)


class ModelCalls(Protocol):
    """What a round needs of the Engine (engine.py): its model calls and a clock synchronised with them. Named
    here, not imported, so that round.py does not import engine.py, which imports run.py, which imports this module."""
    models: object
    block_size: int | None
    stop_ids: list[int]

    def sync_time(self) -> float: ...
    def prefill(self, prompt_ids: list[int]) -> tuple: ...
    def draft(self, ctx, ctx_new, R, anchors, s: int, L: int, T: float, gen, argmax: bool): ...
    def verify(self, trie, s: int, cache, masks=None) -> tuple: ...
    def compact(self, cache, s: int, chain: list[int]) -> None: ...
    def pick(self, logits: torch.Tensor, T: float, gen) -> int: ...
    def new_context(self, cache): ...
    def new_masks(self): ...


@dataclass
class State:
    """What a round needs from the rounds before it (docs/algorithm.md, steps 0 and 6).

    `cache` (target K/V, positions < s) and `ctx` (drafter context K/V) are updated in place by the
    model calls; every other field is replaced by the round that follows (decode_round names every field when it
    builds the next State: a new field must be passed there too)."""
    x: list[int]                  # committed tokens, prompt included; x[-1] is the anchor x[s]
    cache: object
    ctx: ContextKV
    ctx_new: torch.Tensor         # committed features not yet in ctx (the drafter's next context rows)
    R: torch.Tensor               # retained features of the rejected suffix: positions s .. s+m-1
    a_d: list[int]                # the target's token after each retained node: g(d)'s anchor
    gen: torch.Generator          # target and draft sampling
    rng: random.Random            # the "random" attachment rule
    done: bool = False
    masks: object = None          # the run's verify mask buffer (engine.TreeMask), written in place


@dataclass(frozen=True)
class RoundConfig:
    """The per-run constants a round reads (DecodeConfig resolved against the models)."""
    mode: str
    rule: str
    temperature: float
    argmax_drafts: bool
    block_size: int               # B (1 for ar: no drafts)
    max_len: int                  # prompt + max_new_tokens
    stops: frozenset
    max_shifted: int | None
    max_trie_nodes: int | None
    budget: object = None         # engine.decode.cost.Budget or None: picks (k, nodes) per round
    acceptance: str = DEFAULT_ACCEPTANCE   # at T > 0 (engine.options.ACCEPTANCE)
    auto_shifted: bool = False    # the budget picks the shifted blocks drafted
    auto_nodes: bool = False      # the budget picks the nodes verified


def start(eng: ModelCalls, prompt_ids: list[int], rc: RoundConfig, seed: int) -> tuple[int, State]:
    """Prefill the prompt: (the first generated token, the state before round 0)."""
    gen = torch.Generator(device=eng.models.device).manual_seed(seed)
    logits, feats, cache = eng.prefill(prompt_ids)
    first = eng.pick(logits[-1], rc.temperature, gen)
    done = first in rc.stops or rc.max_len - len(prompt_ids) <= 1
    return first, State(list(prompt_ids) + [first], cache, eng.new_context(cache), feats, feats[:0], [], gen,
                        random.Random(seed), done, eng.new_masks())


def decode_round(eng: ModelCalls, st: State, rc: RoundConfig, index: int) -> tuple[dict, State]:
    """Round `index` from state `st`: (its record, the next state). The record's `stages_ms` says where
    the round's time went: draft, build (attach and merge, or grow the tree), verify, accept (and commit,
    retain), record (this record); `round_ms` is their sum with the gaps between."""
    t0 = eng.sync_time()
    s = len(st.x) - 1
    L = min(rc.block_size, rc.max_len - s)             # the last blocks shrink to max_new_tokens
    plain = rc.auto_nodes and L >= 2 and not rc.budget.drafts()   # no tree has paid lately: a plain step
    L = 1 if plain else L
    offsets = list(range(1, len(st.a_d) + 1)) if rc.mode not in UNSHIFTED_MODES and L >= 2 else []
    m, k_cap, node_cap = len(offsets), rc.max_shifted, rc.max_trie_nodes
    if rc.auto_shifted:  # how many shifted blocks pay, from the run's estimates so far
        k_cap, chain_cap = rc.budget.shifted(m)
        if rc.mode not in TREE_MODES:  # a tree keeps its own node budget (DEFAULT_TREE_NODES)
            node_cap = node_cap or (None if rc.auto_nodes else chain_cap)
    offsets = offsets[:k_cap] if isinstance(k_cap, int) else offsets

    drafts, td = None, t0
    if L >= 2:  # 1. draft: the baseline and every g(d) in one call
        anchors = [st.x[s]] + [st.a_d[d - 1] for d in offsets]
        drafts = eng.draft(st.ctx, st.ctx_new, st.R[: len(offsets)], anchors, s, L, rc.temperature,
                           st.gen, rc.argmax_drafts)
        td = eng.sync_time()
        baseline, shifted = drafts.tokens[0], dict(zip(offsets, drafts.tokens[1:]))
    else:
        baseline, shifted = [st.x[s]], {}
    # 2. attach and merge, or grow one tree; never verify past max_new_tokens: depth k predicts s+k+1
    paths, info, trie, facts = assemble_round(rc, baseline, shifted, drafts, offsets, st.rng,
                                              rc.max_len - s - 1, node_cap)
    chosen = {"available": m, "shifted": len(offsets)} if rc.auto_shifted or rc.auto_nodes else None
    if plain:
        chosen.update(rc.budget.plain())
    elif rc.auto_nodes and drafts is not None:  # verify the nodes that pay: best first, by calibrated score
        trie, facts, why = fit_nodes(rc.budget, paths, trie, facts, 1 + len(offsets))
        chosen.update(why)

    tv = eng.sync_time()  # 3. verify every node in one target call
    logits, feats = eng.verify(trie, s, st.cache, st.masks)
    ta = eng.sync_time()
    top1 = logits.argmax(-1).tolist()
    q = drafts.q() if drafts is not None else None      # the record's, and the walk's first look-ups
    # 4. accept. Drafts without a law (argmax drafts; trees, which are built from the ranking) are
    # point masses, for which speculative sampling is sample-and-match: only sampled drafts use it.
    T, samples = rc.temperature, None

    def target_token(node: int) -> int:  # y at a node: argmax, or at T > 0 one sample per node (all drawn at once)
        nonlocal samples
        if T == 0:
            return top1[node]
        if samples is None:
            samples = torch.multinomial(target_law(logits, T), 1, generator=st.gen)[:, 0].tolist()
        return samples[node]

    if T > 0 and rc.acceptance == "speculative" and drafts is not None and drafts.probs is not None:
        chain, bonus = speculative(paths, trie, logits, drafts, q, [0] + offsets, T, st.gen)
    else:
        chain, bonus = accept(trie, target_token)
    eng.compact(st.cache, s, chain)  # keep only the accepted nodes' K/V
    new, done = commit([trie.tokens[n] for n in chain[1:]] + [bonus], rc, len(st.x))

    # 5. retain: the first path through the accepted chain, its nodes past the chain
    rest = trie.path_nodes[retained_path(trie, chain)][len(chain):]
    a_d = [target_token(n) for n in rest]
    # built directly, not with dataclasses.replace: it reads every field again, twice the cost, and this runs each round
    nxt = State(x=st.x + new, cache=st.cache, ctx=st.ctx, ctx_new=rows(feats, chain), R=rows(feats, rest), a_d=a_d,
                gen=st.gen, rng=st.rng, done=done, masks=st.masks)
    tr = eng.sync_time()
    # the times come last, when the record's own is known: 0.0 until then
    rec = round_record(index, s, L, baseline, shifted, info, paths, trie, chain, bonus, new, top1,
                       len(rest), 0.0, 0.0, 0.0, facts, chosen, q, head_notes(drafts, offsets))
    te = eng.sync_time()
    ms = rounded(((td - t0) * 1e3, (tv - td) * 1e3, (ta - tv) * 1e3, (tr - ta) * 1e3, (te - tr) * 1e3,
                  (te - t0) * 1e3), 3)
    rec["draft_ms"], rec["verify_ms"], rec["round_ms"] = ms[0], ms[2], ms[5]
    rec["stages_ms"] = dict(zip(STAGES, ms))
    return rec, nxt


def assemble_round(rc: RoundConfig, baseline: list[int], shifted: dict[int, list[int]], drafts, offsets, rng,
                   depth_cap: int, node_cap: int | None):
    """(paths, sites per offset, trie, per-node drafter facts or None): the chain modes attach whole
    blocks (attach.proposal); the tree modes grow the best nodes from the drafter's ranking (tree.py),
    as many as `node_cap`, or AUTO_MAX_NODES for the budget to choose from."""
    if drafts is None:
        return (*proposal(baseline, shifted, rc.mode, rc.rule, rng, depth_cap, node_cap), None)
    if rc.mode in TREE_MODES:
        nodes = AUTO_MAX_NODES if rc.auto_nodes else node_cap or DEFAULT_TREE_NODES
        return tree_proposal(baseline, shifted, ranked(drafts, min(nodes, TOP_K)), rc.mode, rc.rule, rng,
                             depth_cap, nodes, confidences(drafts), getattr(rc.budget, "ranker", None))
    # "all" nodes is still bounded: blocks with long paths could fill more than MAX_TRIE_NODES
    paths, info, trie = proposal(baseline, shifted, rc.mode, rc.rule, rng, depth_cap, node_cap or MAX_TRIE_NODES)
    return paths, info, trie, node_facts(drafts, trie, paths, offsets)


def fit_nodes(budget, paths, trie, facts, drafted: int):
    """The trie cut to the nodes the budget finds worth verifying (best drafter score first)."""
    order = best_nodes(facts["score"], len(trie) - 1)
    why = budget.nodes([facts["score"][i] for i in order[1:]], drafted)
    trie, facts = prune(paths, trie, facts, set(order[:why["nodes"]]))
    trie.whole = [False] * len(paths)  # the cut depends on the drafted tokens: point masses at T > 0
    return trie, facts, why


def speculative(paths: list, trie, logits: torch.Tensor, drafts, q: list[list[float]], sources: list[int],
                T: float, gen: torch.Generator) -> tuple[list[int], int]:
    """Speculative sampling with p = the target's law at T at each node and q = the law each draft
    was drawn from (row r of the drafter call drafted g(sources[r]): drafts.probs[r]). What the walk
    reads first is looked up before it in one batch (laws.py): p at each node of its children's tokens,
    and each draft's q of its own token (`q`, the record's)."""
    row = {d: r for r, d in enumerate(sources)}
    P = target_law(logits, T)
    edge = []
    if len(trie) > 1:
        ix = torch.tensor([trie.parents[1:], trie.tokens[1:]], device=P.device)
        edge = P[ix[0], ix[1]].tolist()
    known: dict[int, dict[int, float]] = {}
    for c in range(1, len(trie)):
        known.setdefault(trie.parents[c], {})[trie.tokens[c]] = edge[c - 1]

    def target(node: int) -> Law:
        return Law(lambda: P[node], dict(known.get(node, {})))

    def law_of(d: int, j: int) -> Law:
        r = row[d]
        return Law(lambda: drafts.probs[r, j - 1], {drafts.tokens[r][j]: q[r][j - 1]})

    return speculative_accept(trie, [p.source for p in paths], [p.draws for p in paths], target, law_of,
                              TorchLaws(gen, len(trie)))


def head_notes(drafts, offsets: list[int]) -> dict:
    """What a drafter with a head adds to the record: per row (0: baseline, else d) its confidence,
    and where a sequential head changed the backbone's own token, that token."""
    if drafts is None or (drafts.confidence is None and drafts.backbone is None):
        return {}
    rows = [0] + offsets
    notes = {}
    if drafts.confidence is not None:
        notes["confidence"] = dict(zip(rows, drafts.confidence.tolist()))
    if drafts.backbone is not None:
        notes["backbone"] = [{"d": d, "j": j, "token": b} for d, toks, bb in zip(rows, drafts.tokens, drafts.backbone)
                             for j, (t, b) in enumerate(zip(toks, bb)) if t != b]
    return notes


def rows(t: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """t[idx]: a view when the nodes are consecutive (a chain's usually are), which costs no copy."""
    if idx and idx == list(range(idx[0], idx[0] + len(idx))):
        return t[idx[0]: idx[0] + len(idx)]
    return t[idx]


def commit(new: list[int], rc: RoundConfig, committed: int) -> tuple[list[int], bool]:
    """The round's tokens cut at max_new_tokens and after a stop token; (tokens, run done)."""
    new = new[: rc.max_len - committed]
    for i, tok in enumerate(new):
        if tok in rc.stops:
            return new[: i + 1], True
    return new, committed + len(new) >= rc.max_len

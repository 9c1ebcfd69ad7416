"""A cost budget for ReAnchor (max_shifted="auto"): how many shifted blocks and trie nodes per round.

The paper drafts every retained offset and verifies everything, which is nearly free on a large GPU
at batch one. On a CPU (or any compute-bound setting) each extra drafted block and each extra trie
node costs time, so the best number of shifted blocks depends on the hardware. This module:

1. profiles the running hardware once per engine (`Profile.measure`, through the engine's public
   `time_calls` hook): the wall time of one drafter call vs its batch size n (the baseline plus n-1
   shifted blocks) and of one verify call vs the trie size N, tabulated and read back by
   piecewise-linear interpolation (linear extrapolation past the last point);
2. keeps running estimates from each verified round (`Stats.observe`): the drafts the baseline
   alone accepts (in a tree, along any of g(0)'s own branches), the extra accepted drafts credited to
   each offset d (analyses.round_gain), the trie nodes a round verifies, and calibration factors
   measured time / profiled time;
3. picks, per round (`choose_budget`), the k maximising expected tokens per unit time:

       E(k) = 1 + acc0 + sum_{d<=k} gain[d]        (accepted drafts + the bonus)
       T(k) = c_d * draft(1+k) + c_v * verify(N(k)) + overhead
       k*   = argmax_k E(k) / T(k),   n_nodes = B + 1.5 * k* * nodes_per_block (a cap for outliers)

   N(k), the nodes a round verifies with k shifted blocks (`Stats.trie_nodes`), depends on who sizes
   the trie. A chain (no node budget of its own) verifies g(0)'s nodes plus what each block adds:
   N(k) = base + k * nodes_per_block, both counted from the per-node "block" facts (the block that
   proposed each verified node). A tree is sized by its own node budget, whatever k: a fixed one
   (max_trie_nodes, else DEFAULT_TREE_NODES) verifies exactly that many nodes, and shifted blocks only
   take the place of g(0)'s lower-ranked branches (so the trie's nodes beyond B are not "nodes the
   blocks add": most are g(0)'s own top-k branches); the auto node budget verifies what pays among a
   fixed pool (the running mean of what it picked). The same holds for a chain under the auto node
   budget (`choose_nodes` after drafting): N(k) is then its running mean too.

A drafter with a confidence head (DSpark) estimates, per drafted position, the probability that it is
accepted given the positions before it were. It enters the one model through the per-node scores the
node budget calibrates (`Calibration`): a node's score is then the log of the head's cumulative
confidence (engine/tree.py `head_logq`) instead of the drafter's raw path probability log w.

The auto node budget also decides before drafting (`Budget.drafts`): the node choice comes after the draft,
which is then paid for, so where the rounds that drafted lately found no tree worth more than a plain target
step, the round is one (no draft call; its record's budget says "plain"), every EXPLORE_EVERY-th round
drafting to check.

The engine drafts offsets d = 1..k (the nearest retained states first). Callers build the budget
(`budget_for(engine, cfg)`) and hand it to `engine.run`; the engine never imports this module. Gains start from a
modest prior (PRIOR_GAIN = 0.1 tokens a block, worth PRIOR_WEIGHT rounds), near the gains the shipped drafter
has (0.03 tokens a drafted d=1 row inside a tree, 0.1-0.2 in a chain): a prior far above them makes every run pay
about ten rows per offset in its first rounds before the evidence pulls the estimate down. Unexplored offsets still get tried: every EXPLORE_EVERY-th round drafts every offset, so estimates
stay fresh and an offset that gains there is drafted after it. An exploring round's extra rows do not count
against drafting in the plain-or-draft edge: they are the price of exploring. None of this touches verification: any budget is
lossless; it only changes which proposals are verified.
"""
from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..analyses import baseline_accepted, round_gain
from ..options import DEFAULT_TREE_NODES, DEFAULT_TREE_RANK, TREE_MODES, parse_max_trie_nodes
from .config import auto_fields

DRAFT_SIZES = (1, 2, 4, 8, 16)            # beyond: linear extrapolation (rarely needed on a CPU)
VERIFY_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)   # 2 and 4: on a CPU in fp32, 2 rows cost about
                                                       # what 8 do (1.5x one row): no line through 1 and 8
EXPLORE_EVERY = 8
PRIOR_GAIN, PRIOR_WEIGHT = 0.1, 2.0   # 0.1 extra tokens per block, worth 2 rounds (module doc)
NODE_MARGIN = 1.5
PLAIN_EMA = 0.5      # the weight of the last drafted round in Budget.edge


@dataclass
class Profile:
    """Measured milliseconds per call: drafter vs batch size, verifier vs trie size."""
    block_size: int
    draft_n: list[int]
    draft_ms: list[float]
    verify_n: list[int]
    verify_ms: list[float]
    context: int = 0
    device: str = "cpu"
    profile_s: float = 0.0       # how long measuring took

    @staticmethod
    def _interp(x: float, xs: list[int], ys: list[float]) -> float:
        if x > xs[-1] and len(xs) > 1:  # extrapolate with the last segment's slope
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + slope * (x - xs[-1])
        return float(np.interp(x, xs, ys))

    def draft(self, n: float) -> float:
        return self._interp(n, self.draft_n, self.draft_ms)

    def verify(self, n: float) -> float:
        return self._interp(n, self.verify_n, self.verify_ms)

    def as_dict(self) -> dict:
        return {"block_size": self.block_size, "context": self.context, "device": self.device,
                "profile_s": self.profile_s,
                "draft": dict(zip(map(str, self.draft_n), self.draft_ms)),
                "verify": dict(zip(map(str, self.verify_n), self.verify_ms))}

    @classmethod
    def measure(cls, engine, context: int = 256, reps: int = 3,
                draft_sizes=DRAFT_SIZES, verify_sizes=VERIFY_SIZES, progress=None) -> "Profile":
        """Time the engine's own draft and verify calls (Engine.time_calls), after one prefill.
        `progress(done, total)`, when given, is called before the first size and after each, so that a
        page can say how far it is. One prefill for all the sizes: on the embedded model a 256-token
        prefill costs more than the calls a size times."""
        t0 = time.perf_counter()
        if progress is not None:
            progress(0, len(verify_sizes) + len(draft_sizes))
        t = engine.time_calls(draft_sizes, verify_sizes, context, reps, progress=progress)
        # a bigger call never costs less: a running max removes timing noise that would invert it
        d_ms = np.maximum.accumulate(t["draft_ms"]).tolist()
        v_ms = np.maximum.accumulate(t["verify_ms"]).tolist()
        return cls(engine.block_size, list(draft_sizes), d_ms, list(verify_sizes), v_ms, t["context"],
                   t["device"], time.perf_counter() - t0)


@dataclass
class Stats:
    """Running estimates from verified rounds (means with an optimistic prior for the gains)."""
    rounds: int = 0
    acc0_sum: float = 0.0
    gain_sum: dict[int, float] = field(default_factory=dict)
    gain_n: dict[int, int] = field(default_factory=dict)
    nodes_sum: float = 0.0       # verified nodes shifted blocks proposed (chains), over the blocks drafted
    blocks_sum: float = 0.0
    base_sum: float = 0.0        # verified nodes g(0) proposed, anchor included (chains), over base_n rounds
    base_n: int = 0
    size_sum: float = 0.0        # verified nodes, over rounds (a trie its node budget sizes)
    fixed_nodes: int | None = None   # a tree's fixed node budget: verified whatever k
    sized: bool = False          # a node budget (a tree's own, or the auto one) sizes the trie, not k
    draft_scale: float = 1.0     # measured / profiled time, exponential moving averages
    verify_scale: float = 1.0
    overhead_ms: float = 0.0
    fixed_costs: bool = False    # calibration "fixed": the profile's costs as measured, never the round times

    def acc0(self) -> float:
        return self.acc0_sum / self.rounds if self.rounds else 0.0

    def gain(self, d: int) -> float:
        return (self.gain_sum.get(d, 0.0) + PRIOR_GAIN * PRIOR_WEIGHT) / \
            (self.gain_n.get(d, 0) + PRIOR_WEIGHT)

    def nodes_per_block(self, B: int) -> float:
        """Verified nodes one shifted block adds to a chain (prior: half a block)."""
        return (self.nodes_sum + B / 2) / (self.blocks_sum + 1)

    def trie_nodes(self, k: int, B: int) -> float:
        """N(k): the nodes a round verifies, anchor included, when it drafts k shifted blocks."""
        if self.fixed_nodes is not None:
            return float(self.fixed_nodes)
        if self.sized:
            return (self.size_sum + B) / (self.rounds + 1)                 # prior: one block
        return (self.base_sum + B) / (self.base_n + 1) + k * self.nodes_per_block(B)   # prior: g(0)'s chain

    def observe(self, rnd: dict, profile: Profile, ema: float = 0.2) -> None:
        self.rounds += 1
        k = len(rnd["shifted"])
        credited, extra = round_gain(rnd)
        # d = 0: a branch of g(0)'s own ranking (tree modes) carried the gain: the baseline's
        self.acc0_sum += baseline_accepted(rnd) + (extra if credited == 0 else 0)
        for b in rnd["shifted"]:
            self.gain_n[b["d"]] = self.gain_n.get(b["d"], 0) + 1
            self.gain_sum[b["d"]] = self.gain_sum.get(b["d"], 0.0) + (extra if b["d"] == credited else 0)
        trie = rnd["trie"]
        N = len(trie["tokens"])
        self.size_sum += N
        # who proposed each verified node (round.py always records it); without: whole baseline chain
        by_shifted = sum(b != 0 for b in trie["block"]) if "block" in trie else max(N - rnd["block_size"], 0)
        self.base_sum += N - by_shifted
        self.base_n += 1
        if k:
            self.nodes_sum += by_shifted
            self.blocks_sum += k
        if self.fixed_costs:   # repeatable: no decision depends on this run's timings
            return
        # calibrate the synthetic profile against real calls (context length, mask building...)
        if rnd["draft_ms"] > 0:
            self.draft_scale += ema * (rnd["draft_ms"] / profile.draft(1 + k) - self.draft_scale)
        self.verify_scale += ema * (rnd["verify_ms"] / profile.verify(len(rnd["trie"]["tokens"]))
                                    - self.verify_scale)
        other = rnd["round_ms"] - rnd["draft_ms"] - rnd["verify_ms"]
        self.overhead_ms += ema * (max(other, 0.0) - self.overhead_ms)


def choose_budget(profile: Profile, stats: Stats, m_available: int) -> tuple[int, int | None]:
    """(k shifted blocks, trie node cap) maximising expected accepted tokens per millisecond."""
    if m_available <= 0:
        return 0, None
    B = profile.block_size
    npb = stats.nodes_per_block(B)
    best_k, best_rate, expect = 0, -1.0, 1.0 + stats.acc0()
    for k in range(m_available + 1):
        if k:
            expect += stats.gain(k)
        t = (stats.draft_scale * profile.draft(1 + k) + stats.verify_scale * profile.verify(stats.trie_nodes(k, B))
             + stats.overhead_ms)
        if expect / max(t, 1e-6) > best_rate:
            best_k, best_rate = k, expect / max(t, 1e-6)
    return best_k, (None if best_k == 0 else math.ceil(B + NODE_MARGIN * best_k * npb))


# log w bin edges for the calibration (w: the drafter's own probability of a node's path)
CALIB_EDGES = (-0.1, -0.25, -0.5, -0.75, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, -9.0)
CALIB_PRIOR = 4.0          # pseudo-observations at the raw estimate w per bin


class Calibration:
    """P(the target accepts a node | its drafter score log w), learnt per run from verified rounds.

    The drafter's path probability w is over-confident (its blocks repeat one token with high
    probability). Each verified node is one observation: accepted (on the accepted chain) or not,
    binned by log w. A bin's estimate is (accepted + CALIB_PRIOR * w) / (seen + CALIB_PRIOR), then made
    non-increasing from the most to the least likely bin. For a drafter with a confidence head (DSpark) the
    raw score is the log of its cumulative confidence (drafting.node_facts, tree.head_logq), calibrated alike."""

    def __init__(self):
        n = len(CALIB_EDGES) + 1
        self.seen, self.hits = [0] * n, [0] * n

    @staticmethod
    def bin(score: float) -> int:
        return sum(score < e for e in CALIB_EDGES)

    def observe(self, scores: list[float], accepted: list[int]) -> None:
        acc = set(accepted)
        for i in range(1, len(scores)):
            b = self.bin(scores[i])
            self.seen[b] += 1
            self.hits[b] += i in acc

    def table(self) -> list[float]:
        # bin b holds scores in [CALIB_EDGES[b], CALIB_EDGES[b-1]) (bin 0 up to 0); the last one is open
        mids = [(a + b) / 2 for a, b in zip((0.0,) + CALIB_EDGES, CALIB_EDGES)] + [CALIB_EDGES[-1] - 1]
        est = [(h + CALIB_PRIOR * math.exp(m)) / (n + CALIB_PRIOR) for h, n, m in zip(self.hits, self.seen, mids)]
        return list(np.minimum.accumulate(est))

    def estimates(self, scores: list[float]) -> list[float]:
        t = self.table()
        return [t[self.bin(x)] for x in scores]


RANK_Q_EDGES = (-0.05, -0.2, -0.5, -1.0, -2.0, -3.0, -5.0)   # log q bins of the tree ranker
RANK_DEPTHS = (1, 2, 4, 8)                                    # depth buckets: 1, 2-3, 4-7, 8+
RANK_PRIOR = 4.0                                              # pseudo-observations at the drafter's own q
RANK_FLOOR = 1e-6


class TreeRanker:
    """P(the target accepts a tree node | it accepts the node's parent), learnt per run (tree_rank
    "calibrated", engine/tree.py best_first ranks by it instead of the drafter's q).

    A node's cell: who proposed it (g(0) or a shifted block, at rank 0 or below), its depth bucket and
    its log q bin. Every verified node whose parent was accepted is one observation (accepted or not);
    the others say nothing about this conditional. A cell's estimate for a node of probability q is
    (hits + RANK_PRIOR * q) / (seen + RANK_PRIOR): the drafter's own q until the cell has seen enough."""

    def __init__(self):
        self.seen: dict[tuple, int] = {}
        self.hits: dict[tuple, int] = {}
        self.ranker = self           # what round.py hands the tree (a Budget holds one too)

    @staticmethod
    def cell(block: int, rank: int, depth: int, lq: float) -> tuple:
        return (block > 0, rank > 0, sum(depth >= b for b in RANK_DEPTHS), sum(lq < e for e in RANK_Q_EDGES))

    def log_accept(self, block: int, rank: int, depth: int, lq: float) -> float:
        c = self.cell(block, rank, depth, lq)
        est = (self.hits.get(c, 0) + RANK_PRIOR * math.exp(lq)) / (self.seen.get(c, 0) + RANK_PRIOR)
        return math.log(min(max(est, RANK_FLOOR), 1.0))

    def observe(self, rnd: dict) -> None:
        t = rnd["trie"]
        if "block" not in t:
            return
        acc = set(rnd["accepted_nodes"])
        for n in range(1, len(t["tokens"])):
            if t["parents"][n] in acc:
                c = self.cell(t["block"][n], t["rank"][n], t["depths"][n], math.log(max(t["prob"][n], RANK_FLOOR)))
                self.seen[c] = self.seen.get(c, 0) + 1
                self.hits[c] = self.hits.get(c, 0) + (n in acc)


def choose_nodes(profile: Profile, stats: Stats, est: list[float], drafted: int) -> tuple[int, float, float]:
    """How many of the candidate nodes (best first, with their acceptance estimates `est`) to verify,
    after a draft call of `drafted` blocks: (n, expected tokens, expected ms) maximising

        E(n) = 1 + sum_{i<n} est[i]        (expected accepted drafts + the bonus)
        T(n) = c_d * draft(drafted) + c_v * verify(1 + n) + overhead

    n = 0 verifies the anchor alone (a plain target step)."""
    base = stats.draft_scale * profile.draft(drafted) + stats.overhead_ms
    best = (0, 1.0, base + stats.verify_scale * profile.verify(1))
    expect = 1.0
    for n, e in enumerate(est, start=1):
        expect += e
        t = base + stats.verify_scale * profile.verify(1 + n)
        if expect / t > best[1] / best[2]:
            best = (n, expect, t)
    return best


class Budget:
    """Per run, per round: `shifted(m_available)` picks k before drafting; `nodes(scores, drafted)` picks
    how many of the drafted nodes (best first) to verify; `observe(round_record)` after verifying.
    Build one with `budget_for(engine, cfg)`: the hardware profile is measured once per engine."""

    def __init__(self, profile: Profile, tree_nodes: int | str | None = None, auto_nodes: bool = False,
                 fixed_costs: bool = False, ranker: "TreeRanker | None" = None):
        """`tree_nodes`: in a tree mode, its node budget (an int, or "auto"); None for a chain.
        `auto_nodes`: the node budget (`nodes`) sizes the verified trie. Either way k no longer does.
        `fixed_costs`: costs are the profile's alone (calibration "fixed"): every choice then follows from
        the profile and the tokens, so the same prompt takes the same rounds on every run of this engine.
        `ranker`: a tree's calibrated ranking (tree_rank "calibrated"), observed with the rest."""
        self.ranker = ranker
        self.prof = profile
        self.stats = Stats(fixed_nodes=tree_nodes if isinstance(tree_nodes, int) else None,
                           sized=tree_nodes is not None or auto_nodes, fixed_costs=fixed_costs)
        self.calib = Calibration()
        self.picks: list[tuple[int, int, int | None]] = []   # (m, k, n_nodes) per round
        self.edge = 0.0     # log(best tree's expected rate / a plain step's), a moving average over drafted rounds
        self.asked = 0      # rounds that asked `drafts`
        self.usual = 0      # shifted blocks the budget chose this round before any exploring
        self.explored: set[int] = set()   # the indices in picks of the rounds that explored

    def shifted(self, m_available: int) -> tuple[int, int | None]:
        """(k shifted blocks, a node cap for chain modes without a node budget of their own)."""
        k, n = choose_budget(self.prof, self.stats, m_available)
        self.usual = k                    # what a round drafts when it does not explore (Budget.nodes' edge)
        if m_available and len(self.picks) % EXPLORE_EVERY == EXPLORE_EVERY - 1:
            k, n = m_available, None      # explore: keep every offset's estimate honest
            self.explored.add(len(self.picks))
        self.picks.append((m_available, k, n))
        return k, n

    def nodes(self, scores: list[float], drafted: int) -> dict:
        """The node budget for candidates with drafter scores `scores` (best first): {"nodes" (anchor
        included), "expected_tokens", "expected_ms"}."""
        est = self.calib.estimates(scores)
        n, e, t = choose_nodes(self.prof, self.stats, est, drafted)
        # the plain-or-draft edge weighs a round as the budget drafts it, not an exploring round's extra rows:
        # those are the price of fresh estimates, not evidence that drafting loses to a plain step
        ue, ut = (e, t) if drafted <= 1 + self.usual else choose_nodes(self.prof, self.stats, est, 1 + self.usual)[1:]
        self.edge += PLAIN_EMA * (math.log(ue / ut * self.plain_ms()) - self.edge)
        return {"nodes": n + 1, "expected_tokens": round(e, 3), "expected_ms": round(t, 2)}

    def plain_ms(self) -> float:
        """A plain target step: one token verified, no draft call."""
        return self.stats.verify_scale * self.prof.verify(1) + self.stats.overhead_ms

    def drafts(self) -> bool:
        """Before a round's draft (auto node budget): whether to draft at all. The node budget chooses
        after the draft, which by then is paid for: where the rounds that drafted lately found no tree worth
        more than a plain target step (a CPU whose verify of a few nodes costs twice one token's, and a
        drafter the target seldom follows), a plain step without the draft call is faster. Every
        EXPLORE_EVERY-th round drafts anyway, so that the estimate can recover."""
        self.asked += 1
        return self.edge >= 0 or self.asked % EXPLORE_EVERY == 0

    def plain(self) -> dict:
        """The record of a plain step the budget chose (`drafts` said no)."""
        return {"nodes": 1, "expected_tokens": 1.0, "expected_ms": round(self.plain_ms(), 2), "plain": True}

    def observe(self, round_record: dict) -> None:
        if self.ranker is not None:
            self.ranker.observe(round_record)
        self.stats.observe(round_record, self.prof)
        trie = round_record["trie"]
        if "score" in trie:
            self.calib.observe(trie["score"], round_record["accepted_nodes"])


_PROFILES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PROFILING = threading.Lock()


def engine_profile(engine, progress=None, **kw) -> Profile:
    """The engine's hardware profile, measured on first use (~12 s for the embedded model on a 2-core
    CPU) and kept with it. A front end calls it when the model loads, with `progress(done, total)` to
    show the steps, so that no run waits for it (app/loader.py). A measured engine's profile returns
    at once, also while another engine (the same models in another dtype) is being measured."""
    if engine in _PROFILES:
        return _PROFILES[engine]
    with _PROFILING:
        if engine not in _PROFILES:
            _PROFILES[engine] = Profile.measure(engine, progress=progress, **kw)
        return _PROFILES[engine]


def profiled(engine) -> Profile | None:
    """The engine's profile if it has been measured, else None (measures nothing)."""
    return _PROFILES.get(engine)


def budget_for(engine, cfg) -> Budget | TreeRanker | None:
    """A fresh per-run budget when `cfg` asks for one ("auto" shifted blocks in a mode that drafts
    them, or "auto" trie nodes in any speculative mode), else None; a tree mode ranked "calibrated"
    gets its TreeRanker (inside the budget when there is one)."""
    auto_k, auto_n = auto_fields(cfg)
    ranker = TreeRanker() if cfg.mode in TREE_MODES and getattr(cfg, "tree_rank", DEFAULT_TREE_RANK) == "calibrated" else None
    if not (auto_k or auto_n):
        return ranker
    nodes = parse_max_trie_nodes(cfg.max_trie_nodes)
    tree = (nodes or DEFAULT_TREE_NODES) if cfg.mode in TREE_MODES else None   # an int or "auto"
    return Budget(engine_profile(engine), tree, auto_n, fixed_costs=cfg.calibration == "fixed", ranker=ranker)

"""A cost budget for ReAnchor (max_shifted="auto"): how many shifted blocks and trie nodes per round.

The paper drafts every retained offset and verifies everything, which is nearly free on a large GPU
at batch one. On a CPU (or any compute-bound setting) each extra drafted block and each extra trie
node costs time, so the best number of shifted blocks depends on the hardware. This module:

1. profiles the running hardware once per engine (`Profile.measure`, through the engine's public
   `time_calls` hook): the wall time of one drafter call vs its batch size n (the baseline plus n-1
   shifted blocks) and of one verify call vs the trie size N, tabulated and read back by
   piecewise-linear interpolation (linear extrapolation past the last point);
2. keeps running estimates from each verified round (`Stats.observe`): the drafts the baseline
   alone accepts, the extra accepted drafts credited to each offset d (analyses.round_gain), the
   trie nodes a shifted block adds, and calibration factors measured time / profiled time;
3. picks, per round (`choose_budget`), the k maximising expected tokens per unit time:

       E(k) = 1 + acc0 + sum_{d<=k} gain[d]        (accepted drafts + the bonus)
       T(k) = c_d * draft(1+k) + c_v * verify(B + k * nodes_per_block) + overhead
       k*   = argmax_k E(k) / T(k),   n_nodes = B + 1.5 * k* * nodes_per_block (a cap for outliers)

A drafter with a confidence head (DSpark) estimates, per drafted position, the probability that it is
accepted given the positions before it were. Where a round record carries them, the budget takes its
expected accepted lengths from them instead of the running means (`confidence_estimates`; lagged one
round, as DSpark's scheduler does under overlap scheduling): acc0 = sum_j a_j with prefix survival
a_j = prod_{i<=j} c_i, and gain[d] = a_t (1 - c_{t+1}) E_d for g(d) attached at site t (the chain reaches
t, the baseline fails at t+1, g(d) carries on with E_d expected accepted drafts of its own).

The engine drafts offsets d = 1..k (the nearest retained states first). Callers build the budget
(`budget_for(engine, cfg)`) and hand it to `engine.run`; the engine never imports this module. Gains start from an
optimistic prior so that unexplored offsets get tried, and every EXPLORE_EVERY-th round drafts
every offset so that estimates stay fresh. None of this touches verification: any budget is
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

DRAFT_SIZES = (1, 2, 4, 8, 16)            # beyond: linear extrapolation (rarely needed on a CPU)
VERIFY_SIZES = (1, 8, 16, 24, 32, 48, 64, 96, 128)
EXPLORE_EVERY = 8
PRIOR_GAIN, PRIOR_WEIGHT = 0.5, 2.0   # optimistic: 0.5 extra tokens per block, worth 2 rounds
NODE_MARGIN = 1.5


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
                draft_sizes=DRAFT_SIZES, verify_sizes=VERIFY_SIZES) -> "Profile":
        """Time the engine's own draft and verify calls (Engine.time_calls)."""
        t0 = time.perf_counter()
        t = engine.time_calls(draft_sizes, verify_sizes, context, reps)
        # a bigger call never costs less: a running max removes timing noise that would invert it
        d_ms = np.maximum.accumulate(t["draft_ms"]).tolist()
        v_ms = np.maximum.accumulate(t["verify_ms"]).tolist()
        return cls(engine.block_size, list(draft_sizes), d_ms, list(verify_sizes), v_ms, t["context"],
                   t["device"], time.perf_counter() - t0)


def survival(conf: list[float]) -> list[float]:
    """Prefix survival a_j = prod_{i<=j} c_i: the probability that drafts 1..j+1 are all accepted."""
    out, a = [], 1.0
    for c in conf:
        a *= c
        out.append(a)
    return out


def confidence_estimates(rnd: dict) -> tuple[float, dict[int, float]] | None:
    """(expected accepted drafts of the baseline, {d: expected extra drafts of g(d)}) from a round's confidence
    estimates (module docstring); None when the round has none."""
    c0 = rnd.get("confidence")
    if c0 is None:
        return None
    a0 = survival(c0)
    gains = {}
    for b in rnd.get("shifted", []):
        t, c = b.get("chosen"), b.get("confidence")
        if t is None or c is None:
            gains[b["d"]] = 0.0
            continue
        reach = a0[t - 1] if t >= 1 else 1.0
        fail = 1.0 - c0[t] if t < len(c0) else 1.0
        gains[b["d"]] = reach * fail * sum(survival(c))
    return sum(a0), gains


@dataclass
class Stats:
    """Running estimates from verified rounds (means with an optimistic prior for the gains)."""
    rounds: int = 0
    acc0_sum: float = 0.0
    gain_sum: dict[int, float] = field(default_factory=dict)
    gain_n: dict[int, int] = field(default_factory=dict)
    nodes_sum: float = 0.0
    blocks_sum: float = 0.0
    draft_scale: float = 1.0     # measured / profiled time, exponential moving averages
    verify_scale: float = 1.0
    overhead_ms: float = 0.0
    confidence: tuple[float, dict[int, float]] | None = None   # the latest round's confidence_estimates

    def acc0(self) -> float:
        if self.confidence is not None:
            return self.confidence[0]
        return self.acc0_sum / self.rounds if self.rounds else 0.0

    def gain(self, d: int) -> float:
        if self.confidence is not None and d in self.confidence[1]:
            return self.confidence[1][d]
        return (self.gain_sum.get(d, 0.0) + PRIOR_GAIN * PRIOR_WEIGHT) / \
            (self.gain_n.get(d, 0) + PRIOR_WEIGHT)

    def nodes_per_block(self, B: int) -> float:
        return (self.nodes_sum + B / 2) / (self.blocks_sum + 1)  # prior: half a block

    def observe(self, rnd: dict, profile: Profile, ema: float = 0.2) -> None:
        self.rounds += 1
        self.confidence = confidence_estimates(rnd) or self.confidence
        self.acc0_sum += baseline_accepted(rnd)
        k = len(rnd["shifted"])
        credited, extra = round_gain(rnd)
        for b in rnd["shifted"]:
            self.gain_n[b["d"]] = self.gain_n.get(b["d"], 0) + 1
            self.gain_sum[b["d"]] = self.gain_sum.get(b["d"], 0.0) + (extra if b["d"] == credited else 0)
        if k:
            self.nodes_sum += len(rnd["trie"]["tokens"]) - rnd["block_size"]
            self.blocks_sum += k
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
        t = (stats.draft_scale * profile.draft(1 + k) + stats.verify_scale * profile.verify(B + k * npb)
             + stats.overhead_ms)
        if expect / max(t, 1e-6) > best_rate:
            best_k, best_rate = k, expect / max(t, 1e-6)
    return best_k, (None if best_k == 0 else math.ceil(B + NODE_MARGIN * best_k * npb))


class Budget:
    """Per run: `pick(m_available) -> (k, n_nodes)` before drafting, `observe(round_record)` after.
    Build one with `budget_for(engine, cfg)`: the hardware profile is measured once per engine."""

    def __init__(self, profile: Profile):
        self.prof = profile
        self.stats = Stats()
        self.picks: list[tuple[int, int, int | None]] = []   # (m, k, n_nodes) per round

    def pick(self, m_available: int) -> tuple[int, int | None]:
        if m_available and len(self.picks) % EXPLORE_EVERY == EXPLORE_EVERY - 1:
            k, n = m_available, None      # explore: keep every offset's estimate honest
        else:
            k, n = choose_budget(self.prof, self.stats, m_available)
        self.picks.append((m_available, k, n))
        return k, n

    def observe(self, round_record: dict) -> None:
        self.stats.observe(round_record, self.prof)


_PROFILES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PROFILING = threading.Lock()


def engine_profile(engine, **kw) -> Profile:
    """The engine's hardware profile, measured on first use (a few seconds) and kept with it."""
    with _PROFILING:
        if engine not in _PROFILES:
            _PROFILES[engine] = Profile.measure(engine, **kw)
        return _PROFILES[engine]


def budget_for(engine, cfg) -> Budget | None:
    """A fresh per-run budget when `cfg` asks for one (max_shifted "auto" in a mode that drafts
    shifted blocks), else None."""
    if getattr(cfg, "max_shifted", None) != "auto" or getattr(cfg, "mode", "") in ("ar", "dflash"):
        return None
    return Budget(engine_profile(engine))

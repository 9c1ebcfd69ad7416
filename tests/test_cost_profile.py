"""The hardware profile as a step a front end can show and do up front (engine/decode/cost.py
engine_profile(progress=...)), and the repeatable budget (DecodeConfig(calibration="fixed")). Real tiny
engines (tests/tiny.py); the engine's own time_calls is counted, not replaced."""
from __future__ import annotations

import pytest

from engine.decode import DecodeConfig, Engine
from engine.decode import cost
from engine.errors import InputError
from tiny import tiny_models


def _engine(seed: int = 1) -> Engine:
    return Engine(tiny_models("qwen3", seed, block_size=8))


def _counting(eng: Engine, events: list) -> None:
    """Record each of the engine's time_calls (the profile's only model calls) in `events`."""
    real = eng.time_calls

    def timed(*a, **kw):
        events.append("time_calls")
        return real(*a, **kw)

    eng.time_calls = timed


def test_profile_reports_each_step_and_measures_every_size():
    eng, steps, prefills = _engine(), [], []
    real = eng.prefill
    eng.prefill = lambda *a, **kw: prefills.append(1) or real(*a, **kw)
    prof = cost.engine_profile(eng, progress=lambda done, total: steps.append((done, total)), reps=1)
    assert len(prefills) == 1   # one context for every size: a prefill costs more than a size's calls
    total = len(cost.VERIFY_SIZES) + len(cost.DRAFT_SIZES)   # a step a size
    assert steps == [(i, total) for i in range(total + 1)]
    assert prof.verify_n == list(cost.VERIFY_SIZES) and len(prof.verify_ms) == len(cost.VERIFY_SIZES)
    assert prof.draft_n == list(cost.DRAFT_SIZES) and len(prof.draft_ms) == len(cost.DRAFT_SIZES)
    assert all(b >= a > 0 for a, b in zip(prof.verify_ms, prof.verify_ms[1:]))
    assert cost.profiled(eng) is prof


def test_profile_done_at_load_is_reused_by_the_first_auto_run():
    """The order of events, not wall time: once the profile is measured (at model load), the first auto run
    makes no profiling call before its first round (it used to profile there: ~17 s of "processing")."""
    eng, events = _engine(2), []
    _counting(eng, events)
    assert cost.profiled(eng) is None
    cost.engine_profile(eng, progress=lambda done, total: events.append(f"step {done}/{total}"), reps=1)
    events.append("loaded")
    cfg = DecodeConfig(mode="ddtree", max_trie_nodes="auto", max_new_tokens=16, ignore_eos=True)
    for rec in Engine.run(eng, eng.encode_prompt("ab c"), cfg, cost.budget_for(eng, cfg)):
        events.append(f"round {rec['round']}")
    loaded = events.index("loaded")
    assert "time_calls" in events[:loaded]
    assert "time_calls" not in events[loaded:], events[loaded:]
    assert events[loaded + 1] == "round 0"


def _picks(eng: Engine, prof: cost.Profile, calibration: str) -> tuple[list, cost.Budget]:
    cfg = DecodeConfig(mode="reanchor", max_shifted="auto", max_trie_nodes="auto", max_new_tokens=40,
                       ignore_eos=True, calibration=calibration)
    budget = cost.Budget(prof, None, True, fixed_costs=calibration == "fixed")
    rounds = list(eng.run(eng.encode_prompt("ab c"), cfg, budget))
    return [(r["budget"]["shifted"], r["budget"]["nodes"]) for r in rounds], budget


def test_fixed_calibration_decides_from_the_profile_alone():
    """A profile 1000x off this machine's real times: online calibration rescales it by the rounds' measured
    times (run to run, with the machine's load); fixed keeps the profile's costs, so the same prompt takes the
    same rounds every run."""
    eng = _engine(3)
    prof = cost.Profile(eng.block_size, [1, 16], [1e5, 4e5], [1, 128], [1e5, 3e6])  # minutes a call: far off any load
    first, budget = _picks(eng, prof, "fixed")
    assert (budget.stats.draft_scale, budget.stats.verify_scale, budget.stats.overhead_ms) == (1.0, 1.0, 0.0)
    again, _ = _picks(eng, prof, "fixed")
    assert again == first
    _, online = _picks(eng, prof, "online")
    assert online.stats.verify_scale < 0.5   # the real calls are far cheaper than this profile says


def test_calibration_is_checked():
    from engine.decode.config import validate

    with pytest.raises(InputError, match="calibration"):
        validate(DecodeConfig(calibration="sometimes"), 8)
    assert cost.budget_for(_engine(), DecodeConfig(mode="ar", calibration="fixed")) is None


def test_a_measured_profile_returns_while_another_engine_is_measured():
    """The app measures its bfloat16 copy after the float32 engine (app/loader.py): a float32 auto run started
    meanwhile gets its profile at once instead of queueing behind the other measurement."""
    import threading

    eng = _engine(4)
    prof = cost.engine_profile(eng, reps=1)
    got = []
    with cost._PROFILING:   # another engine's measurement holds the lock
        t = threading.Thread(target=lambda: got.append(cost.engine_profile(eng)), daemon=True)
        t.start()
        t.join(10.0)
        assert got == [prof], "a measured engine's profile waited for another engine's measurement"

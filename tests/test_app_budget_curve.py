"""The budget curve (/budget_curve, 11 short runs on one prompt) is one run for the queue: the run limit and
Stop end the whole curve, not only the point under way. Real tiny models, the page's own callback."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("gradio")
import gradio as gr  # noqa: E402

from app import callbacks, session  # noqa: E402
from app_fixtures import TinyLoader, tiny_engine  # noqa: E402


def _curve(cb, st, max_new=64):
    return cb.on_budget_curve("a b c d e f g " * 20, 0.0, 0, max_new, st)


def test_the_run_limit_bounds_the_whole_curve(monkeypatch):
    """Each point alone is within the limit; the curve's 11 together are not. Before: all 11 ran (no limit
    applied to the curve; the page's limit was per streamed run), taking the whole curve's time."""
    cb = callbacks.Callbacks(TinyLoader(tiny_engine("llama")), [], session.Sessions())
    st = session.new_state()
    t0 = time.monotonic()
    whole = list(_curve(cb, st))   # the curve uncut, to set a limit of a third of its time
    whole_s = time.monotonic() - t0
    assert len(whole[-1][1]["budget_curve"]) == callbacks.CURVE_POINTS and st["run"] is None
    monkeypatch.setattr(session, "RUN_SECONDS", whole_s / 3)
    got, t0 = [], time.monotonic()
    with pytest.raises(gr.Error, match=r"Budget curve: stopped at the time limit \(.* s a run\) after \d+ of 11"):
        for _, res in _curve(cb, st):
            got.append(res)
    took = time.monotonic() - t0
    assert got[-1]["stopped"].startswith("stopped at the time limit")
    assert len(got[-1]["budget_curve"]) < callbacks.CURVE_POINTS
    assert took < whole_s / 2, (took, whole_s)   # the limit, and the point under way stopped within a layer
    assert st["run"] is None   # the session can run again


def test_stop_ends_the_whole_curve():
    """Stop pressed as the second point starts: no later point starts. Before: Stop ended only the point under
    way and the curve went on with the next nine."""
    cb = callbacks.Callbacks(TinyLoader(tiny_engine("llama")), [], session.Sessions())
    st = session.new_state()
    gen = _curve(cb, st)
    first = next(gen)[1]["budget_curve"]
    started = []
    real_take = callbacks.CurveRuns.take

    def take_then_stop(self, run):   # the real take, then the user's Stop (the page's on_stop) as the point starts
        ok = real_take(self, run)
        if not started:
            started.append(run)
            cb.on_stop(st)
        return ok

    callbacks.CurveRuns.take = take_then_stop
    try:
        rest = []
        with pytest.raises(gr.Error, match=r"Budget curve: stopped after 1 of 11 points"):
            for _, res in gen:
                rest.append(res)
    finally:
        callbacks.CurveRuns.take = real_take
    assert len(first) == 1 and rest[-1] == {"budget_curve": first, "stopped": "stopped"}
    assert st["run"] is None and not st.get("stopping")

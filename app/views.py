"""What the page shows for a session's state: pure functions from the state (the trace shown, the
comparison) to component values. Figures come from app.plots, HTML from app.render."""
from __future__ import annotations

import json

import gradio as gr

from . import analysis, plots, render, session
from .tokentext import trace_pieces

MAX_PAYLOAD = 50 * 1024     # bytes of figure JSON per round update, the prefetched next round included


def view_key(state: dict) -> int:
    """A number that changes whenever the session shows another trace: the browser's figure-cache key."""
    if state.get("keyed") is not state.get("trace"):
        state["keyed"], state["view_key"] = state.get("trace"), state.get("view_key", 0) + 1
    return state["view_key"]


def round_outputs(state: dict, i: int, prefetch: bool = True):
    """(slider value, caption, round figure payload) for round i of the session's trace; the payload
    also carries round i+1 (prefetch) for the browser's next-round cache."""
    trace = state.get("trace")
    rounds = trace.get("rounds", []) if trace else []
    if not rounds:
        return 0, "No rounds to show.", plots.empty_figure("no round yet").to_json()
    i = session.clamp_round(trace, i)
    texts = trace.get("token_texts", {})

    def part(k: int) -> tuple[str, str]:
        return render.round_caption(rounds[k], k, len(rounds)), plots.round_figure(rounds[k], texts).to_json()

    caption, fig = part(i)
    head = f'{{"key":{view_key(state)},"round":{i},"caption":{json.dumps(caption)},"fig":{fig},"next":'
    if prefetch and i + 1 < len(rounds):
        c2, f2 = part(i + 1)
        payload = f'{head}{{"round":{i + 1},"caption":{json.dumps(c2)},"fig":{f2}}}}}'
        if len(payload) <= MAX_PAYLOAD:  # else "next" asks the server (about 45 ms)
            return i, caption, payload
    return i, caption, head + "null}"


def slider(trace: dict | None, i: int | None = None):
    n = len(trace.get("rounds", [])) if trace else 0
    if i is None:
        return gr.update(maximum=max(n - 1, 1))
    return gr.update(maximum=max(n - 1, 1), value=session.clamp_round(trace, i))


def text(trace: dict | None, tail: int | None = None) -> str:
    if not trace:
        return "<div class='rx-text'></div>"
    prompt, output = trace_pieces(trace)
    return render.text_view(prompt, output, trace.get("rounds", []), tail=tail)


def metrics(state: dict, status: str = "") -> str:
    trace, cmp = state.get("trace"), state.get("compare")
    return render.metrics_view(session.stats_of(trace), session.stats_of(cmp) if cmp else None, status)


def analyses(trace: dict | None):
    if not trace or not trace.get("rounds"):
        return {}, plots.empty_figure("no run"), plots.empty_figure("no run")
    res = analysis.compute(trace)
    h, g = analysis.figures(res)
    return res, h, g


def timeline(trace: dict | None, title: str = "accepted length per round"):
    if not trace or not trace.get("rounds"):
        return plots.empty_figure("no run yet", 200)
    return plots.timeline_figure(trace["rounds"], title)


def timeline_json(trace: dict | None) -> str:
    return timeline(trace).to_json()


def show_trace(state: dict, i: int = 0, status: str = ""):
    """Everything that depends on the shown trace: text, metrics, slider, caption, figures, analyses."""
    trace = state.get("trace")
    i, caption, fig = round_outputs(state, i)
    state["view"] = i
    res, h, g = analyses(trace)
    return (state, text(trace), metrics(state, status), slider(trace, i), caption, fig, timeline_json(trace),
            gr.update(value=state.get("trace_file"), interactive=bool(state.get("trace_file"))), res, h, g)


def run_name(trace: dict) -> str:
    cfg = trace.get("config") or {}
    return f"{cfg.get('mode', '?')} / {cfg.get('rule', '?')}"


def compare_views(state: dict):
    """Side by side: (comparison metrics, its timeline, this run's metrics, its timeline, the comparison's
    assembly on this run's rounds, this run's assembly on the comparison's rounds, counterfactual totals)."""
    a, b = state.get("trace"), state.get("compare")
    an, bn = run_name(a or {}), run_name(b or {})
    b_cfg, a_cfg = (b or {}).get("config") or {}, (a or {}).get("config") or {}
    a_cf, a_sum = analysis.counterfactual(a, b_cfg.get("mode"), b_cfg.get("rule"), f"comparison's {bn}")
    b_cf, b_sum = analysis.counterfactual(b, a_cfg.get("mode"), a_cfg.get("rule"), f"this run's {an}")
    return (render.metrics_view(session.stats_of(b), status=f"comparison: {bn}"),
            timeline(b, f"comparison: {bn}"),
            render.metrics_view(session.stats_of(a), status=f"this run: {an}"),
            timeline(a, f"this run: {an}"),
            a_cf, b_cf, {f"{bn} on this run's rounds": a_sum, f"{an} on the comparison's rounds": b_sum})

"""The app as a teacher shows it on a projector (1024x768) and as a person debugging attachment choices uses it:
defects a user saw, each with a test that failed before its fix (no browser here; tests/test_app_round_inspector.py
looks at the same in Chromium).

- the accepted cells' frames were drawn orange (Plotly's colorway) where the legend says green;
- hovering a grid cell whose label was cut showed the label and the token run together ("␣motiv…␣motivated");
- grid labels of 7 characters ran into their neighbours at 1024 and 1280 px;
- the Analyses figures' titles ended past the figure's edge at 1024 px, the scope ("pooled") cut off;
- the Compare panel's half-width timelines and counterfactuals drew their legend over their title;
- nothing on the page said what the trace shown was run with (mode, rule, drafter): the controls say what the
  next run will use, and a loaded or example trace may differ;
- after "▶ play" (which unticked "follow live"), a new Run streamed with the inspector stuck on the old
  trace's round (its caption and figure) and opened, finished, on that round number clamped, not on its most
  instructive round;
- the timeline did not mark the round in view: stepping through rounds, nothing on it said where one was;
- "Go to round of token #" kept the number typed for the trace shown before a new trace or a new run.
"""
from __future__ import annotations

import html
import json

import pytest

from app import analysis, callbacks, palette, plots, records, render, session, tokentext, views
from app_fixtures import REPO, TinyLoader, all_real_traces, real_rounds, real_trace, tiny_engine

SKIP = {"__type__": "update"}  # gr.skip()


@pytest.fixture(scope="module")
def traces():
    return all_real_traces()


def _figures(traces):
    for t, r in real_rounds(traces):
        yield t, r, plots.round_figure_parts(r, t["token_texts"], None, records.depth_cap(t, r))


def _is_open(symbol) -> bool:
    symbols = symbol if isinstance(symbol, list) else [symbol]
    return any(isinstance(s, str) and s.endswith("-open") for s in symbols)


def test_accepted_cell_frames_are_the_legends_green(traces):
    """An open marker is stroked in marker.color (marker.line.color is ignored): every open marker names its
    colour, and the accepted cells' frames are ACCEPT_COLOR, as render.FIGURE_LEGEND's "□ accepted cell"."""
    assert palette.ACCEPT_COLOR in render.FIGURE_LEGEND
    accepted = 0
    for _, _, fig in _figures(traces):
        for tr in fig["data"]:
            marker = tr.get("marker") or {}
            if tr.get("type") == "scatter" and _is_open(marker.get("symbol")):
                assert marker.get("color"), f"open markers of {tr.get('name')!r} take Plotly's colorway"
            if tr.get("name") == "accepted":
                accepted += 1
                assert marker["color"] == palette.ACCEPT_COLOR, marker
    assert accepted > 10


def test_cut_grid_cell_hover_names_the_token_in_full_once():
    """The hover is "%{text}%{customdata}": a cut label's customdata adds the token in full, set apart."""
    texts = {"1": " motivated", "2": " a", "3": "xyz"}
    rec = real_trace()["rounds"][0]
    rec = json.loads(json.dumps(rec))
    n = len(rec["baseline"])
    rec["baseline"] = [1, 2] * (n // 2) + [1] * (n % 2)
    heat = plots.round_figure_parts(rec, texts, None, None)["data"][0]
    row = 0  # g(0)
    seen = 0
    for label, extra in zip(heat["text"][row], heat["customdata"][row]):
        if label.endswith("…"):
            seen += 1
            hover = label + extra
            assert hover.startswith(label + " (in full: ␣motivated)"), hover
        elif label:
            assert "in full" not in extra, (label, extra)
    assert seen > 0


def test_grid_and_trie_labels_fit_a_1024_px_page(traces):
    """Labels one position apart fit the plot area of a 1024 px page over the figure's x span (its positions and
    the axis's 2.2 more), by their width in 9 px text (app.tokentext.char_px: DejaVu Sans, measured in Chromium),
    and short words show whole: before, grid cells took 7 characters whatever the span, and ran into each other
    (tests/test_app_round_inspector.py measures the overlaps in Chromium)."""
    examples = [session.load_example(path) for _, path in session.example_traces()]  # 16-token blocks, real words
    if not examples:
        pytest.skip("no example traces installed (the tiny models' blocks are too short to crowd a figure)")
    checked = whole = 0
    for _, r, fig in _figures(examples + traces):
        span = fig["layout"]["xaxis2"]["range"][1] - fig["layout"]["xaxis2"]["range"][0]
        cell_px = 838 / span - 2  # a 1024 px page: 960 px of figure less its margins (112 + 10); cells 2 px apart
        labels = [c for row in fig["data"][0]["text"] for c in row if c]
        labels += [c for tr in fig["data"] if tr.get("xaxis") == "x2" and tr.get("mode") == "markers+text"
                   and tr.get("name") != "bonus" for c in tr["text"] if c]
        for c in labels:
            shown = html.unescape(c.replace("&#36;", "$"))
            width = sum(tokentext.char_px(ch) for ch in shown)
            assert width <= max(cell_px, 18) + 0.5, (c, cell_px)
            checked += 1
            whole += not shown.endswith("…")
    assert checked > 1000 and whole > checked / 2


def test_analyses_figure_titles_put_the_scope_on_its_own_line(traces):
    res = analysis.compute(traces[0])
    for fig in analysis.figures(res, "3 example traces pooled"):
        title = fig.layout.title.text
        first, second = title.split("<br>")
        assert second == "3 example traces pooled"
        # a line of 13 px text fits half of a 1024 px page (two figures side by side, ~450 px each)
        assert len(first) * 7 < 450, first
        assert fig.layout.margin.t >= 50  # room for the second line


def test_compare_figures_keep_their_legend_under_their_title(traces):
    t = traces[0]
    tl = views.timeline(t, "this run: reanchor / earliest", narrow=True)
    cf, _ = analysis.counterfactual(t, "dflash", "earliest", "comparison's dflash / earliest")
    for fig, lines in ((tl, 1), (cf, 2)):
        title, legend = fig.layout.title, fig.layout.legend
        assert title.yref == "container" and title.y == 1 and title.yanchor == "top", title
        assert title.pad.t >= 8 + 9 * (lines - 1)  # Plotly lifts a title of several lines: its top was cut off
        assert legend.yanchor == "bottom" and legend.y >= 1.0
        # title lines (16 px), its pad and two legend rows (20 px each: at 1024 px the legend wraps) fit the margin
        assert fig.layout.margin.t >= (title.pad.t or 0) + 16 * lines + 2 * 20, (fig.layout.margin.t, lines)
    # the main timeline (full width) keeps its one-line layout: a 15 px title and no legend row above the bars
    main = views.timeline(t)
    assert main.layout.margin.t < cf.layout.margin.t and main.layout.title.yref != "container"


def test_metrics_say_what_the_trace_shown_was_run_with():
    st = session.new_state()
    found = session.example_traces()
    if found:
        st["trace"] = session.load_example(found[0][1])
        out = views.metrics(st, "example trace")
        cfg = st["trace"]["config"]
        drafter = html.escape(str(cfg["drafter"]).rstrip("/").rsplit("/", 1)[-1])  # the trace's own drafter
        assert f"{cfg['mode']} / {cfg['rule']}" in out and f"drafter {drafter}" in out, out
        assert "assets/" not in out
    st["trace"] = real_trace(mode="ddtree")
    out = views.metrics(st, "loaded trace")
    assert "ddtree" in out and "T 0" in out and " / " not in out.split("ddtree")[1][:3]
    st["trace"] = real_trace(mode="reanchor", rule="all", temperature=1.0, seed=3)
    assert "reanchor / all · T 1, seed 3" in views.metrics(st)
    # a loaded trace's words: unknown modes and rules named so, markup escaped, a folder by its last part only
    hostile = {**real_trace(), "config": {"mode": "<img src=x>", "rule": ["all"], "temperature": 0.0,
                                          "drafter": "/srv/secret/models/<i onclick=x>drafter/"}}
    st["trace"] = hostile
    out = views.metrics(st, "loaded trace").split("rx-settings'>")[1]
    assert out == "unknown / unknown · T 0 · drafter &lt;i onclick=x&gt;drafter</div></div>", out


def _run(cb, st, prompt="hi, j.", max_new=24):
    return list(cb.on_run(prompt, "reanchor", "earliest", 0.0, 0, max_new, "all", "all", None, st))


def test_a_run_after_play_shows_its_own_rounds():
    cb = callbacks.Callbacks(TinyLoader(tiny_engine("llama")), [], session.Sessions())
    st = session.new_state()
    old = real_trace("qwen3", "reanchor", "earliest", "ab. ab. ab.", 48, 0, 1.0)
    st.update(trace=old, view=len(old["rounds"]) - 2)
    cb.on_play(st)                        # ▶ play the old trace to its end
    while st.get("playing"):
        cb.on_tick(st)
    assert st["follow"], "playing a finished trace has no live run to stop following"
    outs = _run(cb, st)
    caption_i = 1 + views.VIEW_OUTPUTS.index("caption")
    streamed = [o[caption_i] for o in outs[1:-1] if o[caption_i] != SKIP]
    assert streamed and streamed[0].startswith("Round 0 (rounds 0–0)"), streamed[:1]
    new = st["trace"]
    best = views.instructive(st)
    assert outs[-1][caption_i].startswith(f"Round {best[0]} (rounds 0–{len(new['rounds']) - 1})")

    # not following (unticked by hand): the inspector leaves the old trace at the run's first round, and the
    # finished run opens on its most instructive round unless the user picked one of its rounds
    st.update(follow=False, view=len(new["rounds"]) - 1)
    outs = _run(cb, st, max_new=20)
    streamed = [o[caption_i] for o in outs[1:-1] if o[caption_i] != SKIP]
    assert streamed == [streamed[0]] and streamed[0].startswith("Round 0 (rounds 0–0)"), streamed
    assert st["view"] == views.instructive(st)[0]

    # a playback still going when Run is pressed stops: its ticks would walk the new run's rounds
    st.update(follow=True, view=0)
    cb.on_play(st)
    _run(cb, st, max_new=8)
    timer = cb.on_tick(st)[-2]
    assert not st["playing"] and timer.active is False


def test_pause_stops_the_player():
    """▶ play, a tick steps a round; ⏸ pause turns the timer off, and a tick still in flight moves nothing (the
    browser test awaits the pause's answer; this is what makes the page hold its round after it)."""
    cb = callbacks.Callbacks(TinyLoader(None), [], session.Sessions())
    st = session.new_state()
    st.update(trace=real_trace("qwen3", "reanchor", "earliest", "ab. ab. ab.", 24, 0, 1.0), view=0)
    timer, button, _ = cb.on_play(st)
    assert timer.active is True and "pause" in button["value"]
    cb.on_tick(st)
    assert st["view"] == 1
    timer, button, _ = cb.on_play(st)
    assert timer.active is False and "play" in button["value"]
    out = cb.on_tick(st)
    assert st["view"] == 1 and out[-2].active is False and all(o == SKIP for o in out[:-2])


def _frames(fig: dict) -> list[dict]:
    return [s for s in fig["layout"].get("shapes", []) if s.get("name") == plots.VIEW_MARK]


def test_the_timeline_frames_the_round_in_view(traces):
    """A frame around the round in view's bar, full height, in the text view's near-black, named in the legend; the
    figure a pure function of the rounds and that round. The page moves it on every round switch (app.page)."""
    t = traces[0]
    n = len(t["rounds"])
    before = json.dumps(t["rounds"])
    for i in (0, n // 2, n - 1):
        fig = json.loads(plots.timeline_figure(t["rounds"], view=i).to_json())
        assert fig == json.loads(plots.timeline_figure(t["rounds"], view=i).to_json())
        frames = _frames(fig)
        where = [(f["x0"], f["x1"], f["y0"], f["y1"], f["yref"]) for f in frames]
        assert where == [(i - 0.5, i + 0.5, 0, 1, "paper")] * 2, where
        above = [f for f in frames if f["layer"] == "above"]
        assert len(above) == 1 and above[0]["line"]["color"] == palette.VIEW_COLOR and above[0]["line"]["width"] >= 2
        assert above[0]["showlegend"] and not above[0].get("fillcolor")  # the bar under it keeps its colours
        assert [f["showlegend"] for f in frames].count(True) == 1
    assert json.dumps(t["rounds"]) == before
    for view in (None, -1, n):
        assert _frames(json.loads(plots.timeline_figure(t["rounds"], view=view).to_json())) == []
    assert palette.VIEW_COLOR in render.CSS  # the colour that outlines the round's tokens in the text view
    # the page's timeline frames the round it shows; Compare's half-width timelines frame none
    st = session.new_state()
    st["trace"] = t
    out = views.show_trace(st, 2)
    assert [f["x0"] for f in _frames(json.loads(out["timeline_plot"]))] == [1.5, 1.5]
    assert not _frames(json.loads(views.timeline(t, "this run", narrow=True).to_json()))


def test_a_new_trace_or_run_empties_go_to_round_of_token(tmp_path):
    """The number in "Go to round of token #" is a token of the text shown: an example trace, a loaded trace or a
    run replacing that text empties it (it kept the old one); a run's end leaves what was typed for its text."""
    found = session.example_traces()
    cb = callbacks.Callbacks(TinyLoader(tiny_engine("llama")), found, session.Sessions())
    at = 1 + views.VIEW_OUTPUTS.index("token_no")
    cleared = {"__type__": "update", "value": None}
    st = session.new_state()
    assert cb.on_load(st)[at] == cleared
    outs = _run(cb, st)
    assert outs[0][at] == cleared                        # at the run's start
    assert all(o[at] == SKIP for o in outs[1:])           # streamed updates and the end keep it
    path = tmp_path / "trace.json"
    from engine.trace import save_trace

    save_trace(path, real_trace())
    assert cb.on_upload(str(path), st)[at] == cleared
    if found:
        assert cb.on_example_trace(found[-1][0], st)[at] == cleared


def test_a_round_switch_answered_after_a_later_one_changes_nothing(monkeypatch):
    """Round switches run concurrently (queue=False): jump to 2, then to 5 before the first is answered. On a loaded
    machine the answer to 2 could land last and take the slider and caption back to 2 (a typed round that never
    showed). The older switch now answers nothing, the newer one its round, and a "next" steps from 5 (the round
    last asked for), whatever order the answers are built in."""
    import threading

    import gradio as gr

    cb = callbacks.Callbacks(None, [], session.Sessions())
    st = session.new_state()
    cb._show_new(st, real_trace(max_new_tokens=48), None, "loaded trace")
    assert len(st["trace"]["rounds"]) > 7
    building, go_on = threading.Event(), threading.Event()
    real = views.round_outputs

    def slow_for_two(state, i, *a, **k):  # the real views, built only once the later switch was answered
        if i == 2:
            building.set()
            go_on.wait(10)
        return real(state, i, *a, **k)

    monkeypatch.setattr(views, "round_outputs", slow_for_two)
    older = {}
    t = threading.Thread(target=lambda: older.setdefault("out", cb.goto(st, 2)))
    t.start()
    assert building.wait(10)
    newer = cb.goto(st, 5)
    go_on.set()
    t.join(10)
    assert newer[0] == 5 and "Round 5 (" in newer[1]
    assert older["out"] == (gr.skip(),) * len(views.NAV_OUTPUTS), older["out"][:2]
    assert cb.step(st, +1)[0] == 6
    # one at a time, in order, each answers its own round
    assert [cb.goto(st, i)[0] for i in (1, 3)] == [1, 3]


def test_an_example_round_is_drawn_once_for_every_session(monkeypatch):
    """Every page opens on a shipped example and fetches its rounds: a round of the shared example (one object,
    session.load_example's) is drawn once per view setting and served from EXAMPLE_ROUNDS to the next session, the
    same caption and figure as drawn afresh; a loaded copy of the same file is drawn for its own session."""
    paths = sorted(str(p) for p in (REPO / "assets" / "traces").glob("*.json"))
    if not paths:
        pytest.skip("no example traces installed")
    path = paths[0]
    views.EXAMPLE_ROUNDS.clear()
    drawn = []
    real = views._round_entry
    monkeypatch.setattr(views, "_round_entry", lambda st, k: drawn.append(k) or real(st, k))

    def state(example: bool, phase: int = 0) -> dict:
        st = session.State({})
        trace = session.load_example(path) if example else session.load_trace_file(path)
        st.update(trace=trace, trace_file=path, example=example, phase=phase)
        return st

    first = [views.round_entry(state(True), k) for k in (0, 1, 2)]
    again = [views.round_entry(state(True), k) for k in (0, 1, 2)]   # another session, the same example
    assert again == first and drawn == [0, 1, 2]
    assert views.round_entry(state(True, phase=3), 1) != first[1] and drawn[-1] == 1   # another view: drawn
    fresh = state(False)   # a loaded copy: its own object, drawn for it, and drawn the same
    assert [views.round_entry(fresh, k) for k in (0, 1, 2)] == first and drawn[-3:] == [0, 1, 2]
    views.EXAMPLE_ROUNDS.clear()

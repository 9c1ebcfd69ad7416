"""Issue 15: the round explained on a projector. Chromium at 1280x720 against one launched app (tiny
Qwen3 target and drafter), a fresh page per test (they pass in any order): what a person sees.

Bugs a-f of the issue each have a test here that failed before its fix:
(a) a fresh page after the model loaded says "ready" at once; (b) an example trace after a comparison
empties the Compare panel; (c) an input error leaves no red "Error" pills; (d) the example-trace box is
emptied when a run or a loaded trace replaces the view; (e) the status line names no server path;
(f) input errors log one line, no traceback.
Later: the timeline frames the round in view through every kind of round switch; "Go to round of token #" is
emptied when another trace or a run replaces the text its number belongs to.
"""
from __future__ import annotations

import itertools
import re

import pytest

from app.examples import LESSON_TRACE
from app_fixtures import JS_ROUND_SETTLED, OUTPUT, click_timeline_bar, compare_with_dflash, show_example, wait_text
from helpers import painted
from page_fixtures import (EXAMPLES, VIEW, app, caption, example_box, in_view, page, run,  # noqa: F401  (fixtures)
                           wait_figure)

pytest.importorskip("playwright.sync_api")  # the browser fixture (conftest.py) drives it


# visible red "Error" pills of Gradio's status trackers
JS_PILLS = """() => [...document.querySelectorAll('[data-testid="status-tracker"] .error')]
    .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
    .map(e => e.closest('[id]')?.id || '?')"""


# the component's status tracker is in an event's error state (the red pill, hidden by the page's style)
JS_ERROR_STATUS = """s => !!document.querySelector(s + ' [data-testid="status-tracker"] .error')"""


def wait_caption(pg, text: str, timeout: float = 30000) -> None:
    wait_text(pg, "#rx-caption", re.escape(text), timeout)


def round_shown(pg) -> int:
    return int(re.search(r"Round (\d+) ", caption(pg)).group(1))


def test_a_fresh_page_is_ready_at_once_and_names_no_server_path(app, browser, page):
    fresh = browser.new_page(viewport=VIEW)
    fresh.goto(app.url)
    fresh.wait_for_selector("#rx-model-status")
    # the first paint's text, before any event answers: the Markdown's own, not Gradio's progress timer beside it
    # (a CI rehearsal read "0.1s" there while the status timer ticked)
    first = fresh.inner_text("#rx-model-status .prose")
    fresh.close()
    assert first.startswith("ready"), first          # (a): said "loading models… 1 s" for a second
    tmp = str(app.log_path.parent.parent)            # the tiny models' folders sit under pytest's tmp dir
    assert "/" not in first.split("drafter", 1)[1].split(",")[0], first   # (e): an absolute drafter path
    assert tmp not in first, first


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_first_view_is_the_most_instructive_round(page):
    """The example trace opens on a round with shifted blocks, says why, and reads at 1280x720."""
    wait_caption(page, "most instructive round")
    cap = caption(page)
    assert int(re.search(r"Round (\d+) ", cap).group(1)) > 0
    wait_figure(page, round_shown(page))
    assert re.search(r"\+ [1-9]\d* shifted gain", cap), cap
    assert "Shifted blocks:" in cap
    # every grid row of the figure names its block; the legend lists every mark the figure draws
    legend = page.inner_text(".rx-legend >> nth=1")
    for mark in ("accepted cell", "matching site", "chosen site", "also attached (rule all)", "native position",
                 "g(d) ✗ why"):
        assert mark in legend, mark
    labels = page.evaluate("() => [...document.querySelectorAll('#rx-round-plot [data-shown] .ytick text')].map(e => e.textContent)")
    rows = [t for t in labels if t != "g(0)" and t.startswith("g(")]  # the strip above g(0) and the fold aside
    assert "g(0)" in labels and rows and all(re.match(r"g\(\d+\) (at \d+|✗ )", t) for t in rows), labels
    assert all(re.match(r"✗ \d+ .+ [▸▾]$", t) for t in labels if t.startswith("✗")), labels
    # example prompts say what they are
    assert page.get_by_text("code: Fibonacci").count() == 1


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_token_click_scrolls_highlights_and_fills_go_to(page):
    page.evaluate("() => window.scrollTo(0, 0)")
    span = page.locator("#rx-text-box span[data-r='2']").first
    k = int(span.get_attribute("data-k"))
    span.click()
    wait_caption(page, "Round 2 ")
    # the smooth scroll ends with the caption at the top (scrolled to its start, its top can lie a fraction of a
    # pixel above 0: sub-pixel layout, in view all the same)
    page.wait_for_function("() => { const r = document.querySelector('#rx-caption').getBoundingClientRect();"
                           " return r.top >= -1 && r.top < 200; }", timeout=10000)
    assert in_view(page, "#rx-round-plot"), "the round figure should be on screen after a token click"
    n_round = page.locator("#rx-text-box span[data-r='2']").count()
    assert page.locator("#rx-text-box span.cur").count() == n_round > 0
    assert page.input_value("#rx-token-no input") == str(k)
    # the keyboard steps rounds (focus on the page, not in a box)
    page.locator("#rx-caption").click()
    page.keyboard.press("ArrowRight")
    wait_caption(page, "Round 3 ")
    assert page.locator("#rx-text-box span.cur").count() == page.locator("#rx-text-box span[data-r='3']").count()
    page.keyboard.press("ArrowLeft")
    wait_caption(page, "Round 2 ")
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "teaching-token-click.png"))


def test_input_errors_leave_no_pills_and_no_traceback(app, page):
    at = len(app.log())
    page.evaluate("() => window.scrollTo(0, 0)")
    page.fill("#rx-prompt textarea", "")
    page.click("#rx-run")
    page.wait_for_selector(".toast-body", timeout=10000)
    assert "Prompt" in page.inner_text(".toast-body")
    painted(page)   # the error's statuses (the pills) are set in the task that adds its toast: on screen with it
    assert page.evaluate(JS_PILLS) == []                       # (c): pills on metrics, text, slider, figures
    page.evaluate("() => document.querySelectorAll('.toast-close').forEach(b => b.click())")
    page.wait_for_function("() => !document.querySelector('.toast-body')", timeout=10000)
    page.fill("#rx-token-no input", "99999")
    page.click("#rx-token-go")
    # its error is a toast naming the control and the range, and the status trackers of Go's outputs hold it
    # (follow live's: an output of round switches only, hidden), set in the task that would show pills
    page.wait_for_selector(".toast-body", timeout=10000)
    assert "Go to round of token #: must be between 0 and" in page.inner_text(".toast-body")
    page.wait_for_function(JS_ERROR_STATUS, arg="#rx-follow", timeout=10000)
    painted(page)
    assert page.evaluate(JS_PILLS) == []
    assert app.wait_log("Go to round of token #", timeout=10)
    assert "Traceback" not in app.log()[at:], app.log()[at:][-2000:]   # (f)
    page.evaluate("() => document.querySelectorAll('.toast-close').forEach(b => b.click())")


def test_the_example_box_empties_when_a_run_replaces_the_view(page):
    if EXAMPLES:
        assert example_box(page) == LESSON_TRACE                # the page opens on the lesson's example
    run(page, "hi, j.")
    assert example_box(page) == ""                            # (d): kept the example's name
    assert "most instructive" in caption(page) or "Round 0 " in caption(page)


def test_an_example_trace_after_a_comparison_empties_the_comparison(page, tmp_path):
    run(page, "hi, j.", 12)   # Compare reruns the trace shown: a short run of this app's models
    compare_with_dflash(page)
    page.wait_for_selector("#rx-cmp-table table", timeout=10000)
    table = page.inner_text("#rx-cmp-table")
    assert "τ of the run" in table and "drafts gained" in table and "extra_drafts" not in table
    # the two timelines share their axes
    ranges = page.evaluate("""() => ['#rx-cmp-a-timeline', '#rx-cmp-timeline'].map(s => {
        const l = document.querySelector(s + ' .js-plotly-plot')._fullLayout;
        return [l.xaxis.range, l.yaxis.range]; })""")
    assert ranges[0] == ranges[1], ranges
    page.screenshot(path=str(OUTPUT / "teaching-compare.png"), full_page=True)
    if not EXAMPLES:
        return
    page.locator("#rx-example-trace input").click()
    page.get_by_role("option", name=EXAMPLES[-1].stem).click()
    page.wait_for_function(
        "() => (document.querySelector('#rx-cmp-metrics')?.innerText || '').includes('no comparison yet')",
        timeout=20000)                                        # (b): showed the previous run's comparison
    assert "comparison" not in page.inner_text("#rx-metrics")
    assert example_box(page) == EXAMPLES[-1].stem
    # a loaded trace empties the example box too (d)
    page.set_input_files("input[data-testid='Load trace-upload-button']", str(EXAMPLES[0]))
    page.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('loaded trace')",
                           timeout=20000)
    assert example_box(page) == ""


def test_analyses_are_the_papers_tables_with_a_way_back(page):
    page.get_by_text("Analyses: the paper's Figure 2").click()
    page.wait_for_selector("#rx-tables h4", timeout=60000)
    text = page.inner_text("#rx-tables")
    assert "current run" in text and "Table 5" in text and "Figure 2" in text and "Table 1" in text
    page.click("#rx-ex-analyses")
    page.wait_for_function("() => (document.querySelector('#rx-tables')?.innerText || '').includes('pooled')",
                           timeout=20000)
    page.wait_for_function("() => (document.querySelector('#rx-hist .gtitle')?.textContent || '').includes('pooled')",
                           timeout=20000)  # the pooled histogram says so in its title
    page.click("#rx-cur-analyses")
    page.wait_for_function("() => (document.querySelector('#rx-tables')?.innerText || '').includes('current run')",
                           timeout=20000)
    page.wait_for_function(
        "() => (document.querySelector('#rx-hist .gtitle')?.textContent || '').includes('current run')", timeout=20000)


# Pairs of labels in one row of the round figure (grid cells; trie labels) whose boxes overlap: one position apart,
# labels cut to fit a 1024 px page must not run into each other.
JS_LABEL_OVERLAPS = """() => {
  const plot = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]');
  const bad = [];
  const rows = (sel, key) => { const m = new Map();
    [...plot.querySelectorAll(sel)].filter(t => t.textContent).forEach(t => {
      const r = t.getBoundingClientRect(), y = Math.round(key(r));
      if (!m.has(y)) m.set(y, []); m.get(y).push([r, t.textContent]); });
    return m; };
  for (const [sel, key] of [['.heatmaplayer text', r => r.top + r.height / 2], ['.scatterlayer .textpoint text', r => r.top]])
    rows(sel, key).forEach(rs => { rs.sort((a, b) => a[0].left - b[0].left);
      for (let i = 1; i < rs.length; i++) if (rs[i][0].left < rs[i - 1][0].right - 0.5) bad.push(rs[i - 1][1] + '|' + rs[i][1]); });
  return bad;
}"""
JS_BOX = "s => { const r = document.querySelector(s).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


# Figures (selector: text of its title) drawn and laid out as a person sees them: the title holding its text, a legend
# where the layout has one, the figure as wide as its box (Plotly's resize after the box changed is done), and their
# boxes the same on two frames running (a draw that Plotly's auto-margins redo). A string while not (what is missing).
JS_LAID_OUT = """([figs, key]) => {
  const now = [];
  for (const [s, text] of Object.entries(figs)) {
    const d = document.querySelector(s + ' .js-plotly-plot'), full = d && d._fullLayout;
    const title = d && d.querySelector('.gtitle'), legend = d && d.querySelector('.legend');
    if (!full) return s + ': not drawn';
    if (!title || !title.textContent.includes(text)) return s + ': title ' + JSON.stringify(title && title.textContent);
    if (full.showlegend && !legend) return s + ': no legend drawn';
    const width = d.getBoundingClientRect().width;
    if (Math.abs(full.width - width) > 1.5) return s + ': drawn ' + full.width + ' px wide in a box of ' + width;
    now.push([title, legend, d.querySelector('.main-svg')].map(e => e && JSON.stringify(e.getBoundingClientRect())));
  }
  const was = (window.__rxLaidOut = window.__rxLaidOut || {})[key];
  window.__rxLaidOut[key] = JSON.stringify(now);
  return was === window.__rxLaidOut[key] || 'moving';
}"""
_waits = itertools.count()


def wait_laid_out(pg, figs: dict[str, str], what: str, timeout: float = 20000) -> None:
    """Until JS_LAID_OUT holds for `figs` (a key of this wait's own: its first look has no frame before it); a timeout
    names `what` and what was missing then."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    key = f"wait {next(_waits)}"
    try:
        pg.wait_for_function(f"a => ({JS_LAID_OUT})(a) === true", arg=[figs, key], timeout=timeout)
    except PlaywrightTimeout:
        raise AssertionError(f"{what}: not laid out within {timeout / 1000:g} s: "
                             f"{pg.evaluate(JS_LAID_OUT, [figs, key])}") from None


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_projector_1024_labels_titles_settings_and_a_run_after_play(app, browser):
    """At 1024x768 (tests/test_app_round_views.py has the pure checks): grid and trie labels never run into their
    neighbours; the Analyses titles end inside their figures; the metrics name what the trace shown was run
    with; and a Run after "▶ play" keeps "follow live" and opens on its own most instructive round (it stayed on
    the played trace's round, clamped)."""
    pg = browser.new_page(viewport={"width": 1024, "height": 768})
    pg.goto(app.url)
    pg.wait_for_function("() => (document.querySelector('#rx-model-status')?.innerText || '').includes('ready')",
                         timeout=120000)
    wait_caption(pg, "most instructive round")
    assert "reanchor / earliest" in pg.inner_text("#rx-metrics")       # the example trace's settings
    for stem in [e.stem for e in EXAMPLES]:
        # the trace's opening round, once the server's answer is in (the caption read at once, with Gradio's progress
        # timer in it, differed from the one before while it still named the trace before's round)
        r = show_example(pg, stem)
        last = int(re.search(r"rounds 0–(\d+)", caption(pg)).group(1))
        for _ in range(6):
            wait_figure(pg, r)
            assert pg.evaluate(JS_LABEL_OVERLAPS) == [], stem
            if r == last:
                break
            # the round asked for, settled, before its figure is awaited: the caption read at once could still
            # name the round before, whose figure had already gone (a CI rehearsal timed out so)
            pg.click("#rx-next")
            r += 1
            pg.wait_for_function(JS_ROUND_SETTLED, arg=r, timeout=20000)
    # the Analyses figures: each title inside its figure (the scope "pooled" was cut at the edge)
    pg.get_by_text("Analyses: the paper's Figure 2").click()
    pg.click("#rx-ex-analyses")
    wait_laid_out(pg, {"#rx-hist": "pooled", "#rx-gain": "pooled"}, "the pooled Analyses figures")
    for fig in ("#rx-hist", "#rx-gain"):
        title, svg = pg.evaluate(JS_BOX, f"{fig} .gtitle"), pg.evaluate(JS_BOX, f"{fig} .main-svg")
        assert title[2] <= svg[2], (fig, title, svg)
    pg.screenshot(path=str(OUTPUT / "projector-1024-analyses.png"))
    # ▶ play to the end of the example trace, then Run
    last = int(re.search(r"rounds 0–(\d+)", caption(pg)).group(1))
    pg.click("#rx-last")
    pg.wait_for_function(JS_ROUND_SETTLED, arg=last, timeout=20000)
    pg.click("#rx-prev")
    pg.wait_for_function(JS_ROUND_SETTLED, arg=last - 1, timeout=20000)
    pg.click("#rx-play")
    # played to the end: the last round shown by a tick and the button back to "▶ play" (the tick after it stopped
    # the timer), so "▶ play"'s own answer, which set the button to "⏸ pause" and follow live, is in
    pg.wait_for_function(f"i => ({JS_ROUND_SETTLED})(i) && /play/.test(document.querySelector('#rx-play')?.innerText)",
                         arg=last, timeout=20000)
    assert pg.is_checked("#rx-follow input"), "playing a finished trace unticked follow live"
    run(pg, "hi, j.", 24)
    cap = caption(pg)
    last = int(re.search(r"rounds 0–(\d+)", cap).group(1))
    assert "most instructive" in cap or cap.startswith("Round 0 ") or last == 0, cap
    assert "reanchor / earliest" in pg.inner_text("#rx-metrics")
    # the Compare panel at half width: each figure's legend under its title
    pg.get_by_text("Compare: a second run").click()
    pg.click("#rx-cmp-run")
    pg.wait_for_selector("#rx-cmp-table table", timeout=60000)
    wait_laid_out(pg, {"#rx-cmp-a-timeline": "this run: ", "#rx-cmp-timeline": "comparison: ",
                       "#rx-cmp-a-cf": "comparison's "}, "the Compare panel's figures")
    for fig in ("#rx-cmp-a-timeline", "#rx-cmp-timeline", "#rx-cmp-a-cf"):
        if pg.locator(f"{fig} .legend").count():
            title = pg.evaluate(JS_BOX, f"{fig} .gtitle")
            assert not _overlap(title, pg.evaluate(JS_BOX, f"{fig} .legend")), fig
            assert title[1] >= pg.evaluate(JS_BOX, f"{fig} .main-svg")[1], f"{fig}: the title's top is cut off"
    pg.locator("#rx-cmp-a-timeline").scroll_into_view_if_needed()
    pg.screenshot(path=str(OUTPUT / "projector-1024-compare.png"))
    pg.close()


# The timeline's frame around the round in view (app.plots.view_frame), as drawn: the round under its middle (on the
# round axis), its size in pixels against the plot area's, its stroke.
JS_FRAME = """() => { const plot = document.querySelector('#rx-timeline .js-plotly-plot');
  const frame = plot && plot.querySelector('.layer-above .shapelayer path');
  if (!frame) return null;
  const f = frame.getBoundingClientRect(), area = plot.querySelector('.nsewdrag').getBoundingClientRect();
  return {round: plot._fullLayout.xaxis.p2l((f.left + f.right) / 2 - area.left), width: f.width,
          height: f.height, area: area.height, stroke: frame.style.stroke, opacity: frame.style.strokeOpacity}; }"""


def wait_frame(pg, i: int) -> dict:
    """Until round i is in view, the server's answer in, and the timeline's frame sits on its bar; what JS_FRAME saw."""
    pg.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)
    pg.wait_for_function(f"() => {{ const f = ({JS_FRAME})(); return f && Math.abs(f.round - {i}) < 0.05; }}",
                         timeout=10000)
    return pg.evaluate(JS_FRAME)


def shown_round(pg) -> int:
    return int(re.search(r"Round (\d+) ", caption(pg)).group(1))


def test_timeline_frames_the_round_in_view_at_1024(app, browser):
    """Stepping through rounds on a projector, the timeline shows where one is: a dark frame on the bar of the
    round in the caption after the run opens and after next, prev, the slider, a token's "Go" and a bar's click."""
    pg = browser.new_page(viewport={"width": 1024, "height": 768})
    pg.goto(app.url)
    pg.wait_for_function("() => (document.querySelector('#rx-model-status')?.innerText || '').includes('ready')",
                         timeout=120000)
    run(pg, "hi, j.", 40)
    last = int(re.search(r"rounds 0–(\d+)", caption(pg)).group(1))
    assert last >= 4
    frame = wait_frame(pg, shown_round(pg))            # the finished run opens framed
    assert frame["stroke"] == "rgb(17, 17, 17)" and frame["opacity"] in ("", "1")
    assert frame["width"] >= 4 and frame["height"] >= 0.95 * frame["area"], frame
    assert "round in view" in pg.locator("#rx-timeline .legend").text_content()
    pg.click("#rx-first")
    wait_frame(pg, 0)
    for i in (1, 2):
        pg.click("#rx-next")
        wait_frame(pg, i)
    pg.click("#rx-prev")
    wait_frame(pg, 1)
    pg.locator("#rx-slider input[type=range]").focus()
    pg.keyboard.press("ArrowRight")
    wait_frame(pg, 2)
    span = pg.locator(f"#rx-text-box span[data-r='{last}']").first
    pg.fill("#rx-token-no input", span.get_attribute("data-k"))
    pg.click("#rx-token-go")
    wait_frame(pg, last)
    click_timeline_bar(pg, 3)
    wait_frame(pg, 3)
    OUTPUT.mkdir(exist_ok=True)
    pg.locator("#rx-timeline").scroll_into_view_if_needed()
    pg.screenshot(path=str(OUTPUT / "projector-1024-timeline.png"))
    pg.close()


def test_go_to_token_is_emptied_by_another_trace_or_a_run(app, browser):
    """The number in "Go to round of token #" belongs to the text shown: a run, an example trace or a loaded trace
    replacing it empties the box (it kept the number, which then named a token of another text)."""
    pg = browser.new_page(viewport={"width": 1024, "height": 768})
    pg.goto(app.url)
    pg.wait_for_function("() => (document.querySelector('#rx-model-status')?.innerText || '').includes('ready')",
                         timeout=120000)
    token_no = "#rx-token-no input"
    run(pg, "hi, j.", 24)
    pg.fill(token_no, "7")
    before = pg.inner_text("#rx-metrics .rx-metrics")  # the strip itself, not the pending call's timer over it
    run(pg, "a b c d e f g", 24)   # returns on the last run's "done": wait for this one's end
    pg.wait_for_function("b => { const m = document.querySelector('#rx-metrics .rx-metrics')?.innerText || '';"
                         " return m !== b && /\\bdone\\b/.test(m); }", arg=before, timeout=120000)
    assert pg.input_value(token_no) == ""
    pg.locator("#rx-text-box span[data-r='1']").first.click()      # a token of this run's text
    wait_caption(pg, "Round 1 ")  # (the run may open on round 1: the click's answer is the number in the box)
    pg.wait_for_function("s => document.querySelector(s)?.value !== ''", arg=token_no, timeout=20000)
    if not EXAMPLES:
        pg.close()
        return
    pg.locator("#rx-example-trace input").click()
    pg.get_by_role("option", name=EXAMPLES[0].stem).click()
    pg.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('example trace')",
                         timeout=20000)
    assert pg.input_value(token_no) == ""
    pg.fill(token_no, "12")
    pg.set_input_files("input[data-testid='Load trace-upload-button']", str(EXAMPLES[-1]))
    pg.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('loaded trace')",
                         timeout=20000)
    assert pg.input_value(token_no) == ""
    pg.close()

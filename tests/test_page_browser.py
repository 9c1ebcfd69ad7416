"""The page's files (app/static/) as a person gets them: Chromium against `python -m app --no-model` showing an
example trace, and a race's exported HTML file. The token colours come through the CSS custom properties
(render.PALETTE_VARS) in both, and the round figure's scripts run with their constants (RX) and rounds.js."""
from __future__ import annotations

import json
import re

import pytest

from app import palette, race_view
from app.page import PLOTLY_JS
from app_fixtures import OUTPUT, REPO, chromium_or_skip, launched_app
from helpers import no_change_within

playwright_api = pytest.importorskip("playwright.sync_api")  # the browser fixture (conftest.py) drives it
PlaywrightTimeout = playwright_api.TimeoutError

EXAMPLES = sorted((REPO / "assets" / "traces").glob("*.json"))

# each source's class and the colour a person sees behind its tokens: the first of each in a text
JS_TOKEN_COLOURS = """root => Object.fromEntries(['rx-b', 'rx-x', 'rx-s0', 'rx-s1'].map(c => {
  const e = document.querySelector(root + ' span.' + c);
  return [c, e ? getComputedStyle(e).backgroundColor : null];
}))"""


def rgba(hex_colour: str, alpha_hex: str) -> tuple[int, int, int, float]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16), round(int(alpha_hex, 16) / 255, 2)


def parsed(css_colour: str | None) -> tuple[int, int, int, float] | None:
    if css_colour is None:
        return None
    r, g, b, *a = (float(v) for v in re.findall(r"[\d.]+", css_colour))
    return int(r), int(g), int(b), round(a[0] if a else 1.0, 2)


EXPECTED = {"rx-b": rgba(palette.BASE_COLOR, "22"), "rx-x": rgba(palette.BONUS_COLOR, "55"),
            "rx-s0": rgba(palette.D_COLORS[0], "44"), "rx-s1": rgba(palette.D_COLORS[1], "44")}


# the race's lanes: shifted tokens a deeper shade (render.PALETTE_VARS' lane-bg), underlined in their own colour
LANES = {**EXPECTED, "rx-s0": rgba(palette.D_COLORS[0], "66"), "rx-s1": rgba(palette.D_COLORS[1], "66")}


def assert_palette(colours: dict, expected: dict = EXPECTED) -> None:
    seen = {c: parsed(v) for c, v in colours.items() if v is not None}
    assert {"rx-b", "rx-x"} <= seen.keys(), colours   # baseline tokens and bonuses in every text
    assert seen == {c: expected[c] for c in seen}, colours


@pytest.fixture(scope="module")
def replay_app(tmp_path_factory):
    chromium_or_skip()
    yield from launched_app(["--no-model"], tmp_path_factory)


def test_the_page_runs_its_files(replay_app, browser):
    """The example trace shown: its tokens in the palette's colours, the round figure drawn, the rounds around it
    fetched ahead (rounds.js with RX's window), the timeline framing the round in view (timeline.js, RX.VIEW_MARK)."""
    if not EXAMPLES:
        pytest.skip("no example trace to show")
    pg = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        pg.goto(replay_app.url)
        pg.wait_for_selector("#rx-text-box span.rx-b", timeout=60000)
        pg.wait_for_selector("#rx-round-plot .rx-plot[data-shown] .main-svg", timeout=60000)
        assert pg.evaluate("typeof window.rxRounds.wanted") == "function"
        # the rounds ahead of a jump, fetched while the page is idle (the example traces have 20+ rounds)
        pg.wait_for_function("() => window.__rxHeld().length >= 8", timeout=60000)
        pg.wait_for_selector("#rx-timeline .shapelayer path", timeout=60000)
        assert_palette(pg.evaluate(JS_TOKEN_COLOURS, "#rx-text-box"))
        pg.locator("#rx-text-box").scroll_into_view_if_needed()
        pg.screenshot(path=str(OUTPUT / "page-files-text-view.png"))
    finally:
        pg.close()


def test_a_busy_rounds_route_is_asked_again(replay_app, browser):
    """The rounds route draws one request at a time and answers 429 or 503 while busy (docs/security.md): the page asks
    again a little later, so its rounds ahead are still fetched (it gave the sequence up at the first such answer)."""
    if not EXAMPLES:
        pytest.skip("no example trace to show")
    pg = browser.new_page(viewport={"width": 1280, "height": 720})
    answers = []

    def busy_first(route):
        answers.append(503 if len(answers) < 2 else 200)
        if answers[-1] == 503:
            route.fulfill(status=503, body='{"error": "busy"}', content_type="application/json")
        else:
            route.continue_()
    try:
        pg.route("**/rx/rounds/**", busy_first)
        pg.goto(replay_app.url)
        pg.wait_for_selector("#rx-round-plot .rx-plot[data-shown] .main-svg", timeout=60000)
        pg.wait_for_function("() => window.__rxHeld().length >= 8", timeout=60000)
        assert answers[:3] == [503, 503, 200], answers
    finally:
        pg.close()


# Beneath the page's own scripts (an init script runs first): every animation frame the page asks the browser for.
JS_COUNT_FRAMES = """(() => {
  const frame = window.requestAnimationFrame.bind(window);
  window.__framesAsked = 0;
  window.requestAnimationFrame = (callback) => { window.__framesAsked++; return frame(callback); };
})()"""


def test_a_page_left_open_runs_no_frame_loop(replay_app, browser):
    """Once the page has drawn its trace and fetched the rounds ahead, it asks for no stream of animation frames:
    Gradio's "Loading..." status tracker, removed while still pending, kept a 60-a-second timer loop for as long as
    the tab was open (app/static/frame_guard.js, put before Gradio's scripts by app/early_script.py). A tracker's
    single frames (one now and then, after a status message) are given, as the guard means them to be."""
    if not EXAMPLES:
        pytest.skip("no example trace to show")
    pg = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        pg.add_init_script(JS_COUNT_FRAMES)
        pg.goto(replay_app.url)
        pg.wait_for_selector("#rx-round-plot .rx-plot[data-shown] .main-svg", timeout=60000)
        pg.wait_for_function("() => window.__rxHeld().length >= 8", timeout=60000)
        # settled: half a second without a frame asked for (drawing the rounds ahead asks for some)
        try:
            pg.wait_for_function("""() => {
                const now = performance.now();
                if (window.__lastCount !== window.__framesAsked) {
                    window.__lastCount = window.__framesAsked; window.__since = now;
                }
                return now - window.__since > 500; }""", polling=100, timeout=30000)
        except PlaywrightTimeout:
            n = pg.evaluate("() => new Promise(r => { const n = window.__framesAsked; "
                            "setTimeout(() => r(window.__framesAsked - n), 1000); })")
            pytest.fail(f"the page asks for animation frames without end: {n} in a second, 30 s after it loaded")
        before = pg.evaluate("window.__framesAsked")
        no_change_within(pg, "n => window.__framesAsked > n + 2 ? window.__framesAsked - n : null", 1500,
                         "animation frames asked for by a page left open", before, polling=100)
        # the page's scripts are first in its head, before Gradio's own
        assert pg.evaluate("document.head.firstElementChild.tagName") == "SCRIPT"
    finally:
        pg.close()


def test_the_race_export_colours_its_lanes(browser, tmp_path):
    """An exported race (the same race.js and race.css, with the palette's custom properties inlined) shows each
    lane's tokens in the app's colours, offline."""
    chromium_or_skip()
    if not EXAMPLES:
        pytest.skip("no example trace to export")
    trace = json.loads(EXAMPLES[0].read_text(encoding="utf-8"))   # a real drafter's: baseline tokens and bonuses
    lanes = [race_view.lane_payload(label, "", "done", trace) for label in ("plain", "reanchor")]
    html = race_view.export_html(race_view.payload(lanes, 0, "done", "a test race", "plain decoding"),
                                 "a test race", PLOTLY_JS.read_text(encoding="utf-8"))
    path = tmp_path / "race.html"
    path.write_text(html, encoding="utf-8")
    ctx = browser.new_context(viewport={"width": 1280, "height": 720}, offline=True)
    try:
        pg = ctx.new_page()
        pg.goto(path.as_uri())
        pg.wait_for_function("() => document.querySelector('#race')?.dataset.replay === 'ended'", timeout=120000)
        assert_palette(pg.evaluate(JS_TOKEN_COLOURS, "#race .rx-lane:nth-child(2)"), LANES)
        pg.screenshot(path=str(OUTPUT / "page-files-race-export.png"))
    finally:
        ctx.close()

"""A real browser (Debian's headless Chromium via playwright) against the launched app.

Skips only when Chromium is absent and CI is unset. Saves screenshots under test-output/.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import statistics

import pytest

from app_fixtures import (JS_TIMED_NEXT, LONG_PROMPT, OUTPUT, REPO, Watched, chromium_or_skip, click_timeline_bar,
                          compare_with_dflash)

pytest.importorskip("playwright.sync_api")  # the browser fixture (conftest.py) drives it

PROMPT = "hi, j."
# a run long enough that a stop lands before its end: the tiny models decode 400 tokens in 1.4 s on a quiet
# machine, and a Stop clicked at round 2 once reached the server after the run had ended (a CI rehearsal)
STOPPABLE_TOKENS = 2000


@pytest.fixture(scope="module")
def app(tiny_app):
    chromium_or_skip()
    return tiny_app   # its context (4,096) holds STOPPABLE_TOKENS


# Round i+1's figure drawn ahead, offscreen (app.page JS_PLOT's prepare), once the server's answer for round i came.
JS_DRAWN_AHEAD = """i => [...document.querySelectorAll('#rx-round-plot .rx-plot:not([data-shown]) .gtitle')]
    .some(t => t.textContent.startsWith('round ' + (i + 1) + ' '))"""


def _time_next_clicks(w: Watched, n: int) -> list[float]:
    """Seconds from a click on "next" to the new round's figure in the page, for rounds 1..n."""
    out = []
    for i in range(1, n + 1):
        ms = w.page.evaluate(JS_TIMED_NEXT, i)
        w.wait_round(i)
        if i < n:  # the next click's round, drawn ahead after the answer
            w.page.wait_for_function(JS_DRAWN_AHEAD, arg=i, timeout=20000)
        out.append(ms / 1000)
    return out


def test_run_stream_inspect_in_browser(app, browser):
    OUTPUT.mkdir(exist_ok=True)
    w = Watched(browser, app.url)
    pg = w.page
    # the example trace (embedded model) is shown before anything runs
    if list((REPO / "assets" / "traces").glob("*.json")):
        pg.wait_for_selector("#rx-round-plot .js-plotly-plot[data-shown]", timeout=30000)
    w.wait_model(app)
    # text streams: count the text view's updates during the run
    pg.evaluate("""() => { window.__textUpdates = 0;
        new MutationObserver(() => window.__textUpdates++).observe(
            document.querySelector('#rx-text-box'), {subtree: true, childList: true, characterData: true}); }""")
    w.run(PROMPT)
    w.wait_done()
    assert pg.evaluate("() => window.__textUpdates") >= 2, "the text should stream while the run goes"
    n_spans = pg.locator("#rx-text-box span[data-r]").count()
    assert n_spans >= 2
    # one round figure shown: the rounds drawn ahead beside it are hidden (content-visibility), this one is not
    shown = pg.evaluate("""() => [...document.querySelectorAll('#rx-round-plot .rx-plot')]
        .filter(e => getComputedStyle(e).contentVisibility !== 'hidden' && e.getBoundingClientRect().left >= 0)
        .map(e => e.hasAttribute('data-shown') && e.classList.contains('js-plotly-plot'))""")
    assert shown == [True], shown
    assert pg.locator("#rx-timeline .js-plotly-plot").count() == 1
    # plotly.js comes from the app's own route; no URL in the page names a path on the server
    srcs = pg.evaluate("() => [...document.scripts].map(s => s.src).filter(Boolean)")
    assert any(s.endswith("/rx/plotly.min.js") for s in srcs), srcs
    assert not [s for s in srcs if "site-packages" in s or "file=" in s], srcs
    assert pg.locator("#rx-round-plot .js-plotly-plot[data-shown] .heatmaplayer, #rx-round-plot .js-plotly-plot[data-shown] .hm").count() >= 1
    m = re.search(r"rounds 0–(\d+)", w.caption())
    assert m, w.caption()
    last = int(m.group(1))
    assert last >= 3

    # the scrubber: first / next / prev / last, timing each round switch in the browser: "next" with the
    # prefetched round drawn ahead (the page's path), then with that cache off (the server's path)
    times, server_times = [], []
    for no_cache, out in ((False, times), (True, server_times)):
        pg.evaluate(f"() => {{ window.__rxNoCache = {str(no_cache).lower()}; }}")
        pg.click("#rx-first")
        w.wait_round(0)
        pg.wait_for_function(JS_DRAWN_AHEAD, arg=0, timeout=20000)
        out.extend(_time_next_clicks(w, min(last, 8)))
    pg.evaluate("() => { window.__rxNoCache = false; }")
    pg.click("#rx-prev")
    w.wait_round(min(last, 8) - 1)
    pg.click("#rx-last")
    w.wait_round(last)
    # clicking a token opens its round
    span = pg.locator("#rx-text-box span[data-r='1']").first
    span.click()
    w.wait_round(1)
    # the slider (keyboard: the range input moves one round per arrow)
    pg.locator("#rx-slider input[type=range]").focus()
    pg.keyboard.press("ArrowRight")
    w.wait_round(2)
    # clicking a timeline bar opens that round
    click_timeline_bar(pg, 3)
    w.wait_round(3)
    # the "Go to round of token #" box
    pg.fill("#rx-token-no input", "0")
    pg.click("#rx-token-go")
    w.wait_round(0)

    # play steps through the rounds; pause stops it
    pg.click("#rx-play")
    w.wait_round(2, timeout=30000)
    pg.click("#rx-play")
    pg.wait_for_function("() => document.querySelector('#rx-play')?.innerText.includes('play')", timeout=20000)
    held = int(re.search(r"Round (\d+) ", w.caption()).group(1))
    w.wait_round(held)   # the pause answered and the round settled (no tick moves it after: test_pause_stops_the_player)

    # "next" draws the prefetched round from the browser's cache, then the server's answer agrees
    pg.click("#rx-first")
    w.wait_round(0)
    pg.wait_for_function(JS_DRAWN_AHEAD, arg=0, timeout=20000)
    pg.click("#rx-next")
    w.wait_round(1)
    assert pg.locator("#rx-round-plot [data-shown] .gtitle").text_content().startswith("round 1 ")
    assert pg.locator("#rx-caption").inner_text().count("Round 1 ") == 1  # one caption, not two

    # Compare: a dflash run side by side, each with the other's assembly replayed on its rounds
    compare_with_dflash(pg)
    for fig_id in ("#rx-cmp-a-timeline", "#rx-cmp-timeline", "#rx-cmp-a-cf", "#rx-cmp-b-cf"):
        pg.wait_for_selector(f"{fig_id} .js-plotly-plot", timeout=30000)
    assert pg.locator("#rx-cmp-a-cf .js-plotly-plot .trace.bars").count() == 1  # the counterfactual drew
    pg.get_by_text("Compare: a second run").click()

    pg.screenshot(path=str(OUTPUT / "app.png"), full_page=True)
    if os.environ.get("REANCHOR_UPDATE_SCREENSHOT"):
        shutil.copy(OUTPUT / "app.png", REPO / "app" / "screenshot.png")
    report = {"round_switch_ms": [round(t * 1000, 1) for t in times],
              "round_switch_ms_median": round(statistics.median(times) * 1000, 1),
              "server_path_ms": [round(t * 1000, 1) for t in server_times],
              "server_path_ms_median": round(statistics.median(server_times) * 1000, 1)}
    (OUTPUT / "browser_timing.json").write_text(json.dumps(report, indent=1))
    print("browser round switch (click to drawn figure):", report)
    assert statistics.median(times) < 5.0  # generous: CI machines are slow; see test-output for numbers
    assert not w.errors, w.errors
    assert not w.local_only(app.port), w.local_only(app.port)
    # nothing of the visitor's run stays in the browser (Gradio's run history is off)
    stored = pg.evaluate("() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])")
    assert PROMPT not in stored and "reanchor" not in stored, stored[:500]
    pg.close()


def test_hostile_token_text_stays_text(app, browser, tmp_path):
    """Traces whose token pieces are HTML/JS render them as literal text: no script, no dialog, no tag,
    no double escaping, in the text view and in the Plotly figure."""
    from engine.trace import load_trace, save_trace

    src = sorted((REPO / "assets" / "traces").glob("*.json"))
    if not src:
        pytest.skip("no example trace to start from")
    base = load_trace(src[0])
    w = Watched(browser, app.url)
    pg = w.page
    cases = [("tags", "<b>\"$&'"), ("script", "<script>alert(1)</script>")]
    for name, piece in cases:
        trace = json.loads(json.dumps(base))
        ids = sorted(trace["token_texts"], key=int)
        trace["token_texts"] = {k: piece for k in ids}
        for key in ("prompt_pieces", "output_pieces"):  # a regenerated trace carries its own pieces: those too
            if isinstance(trace.get(key), list):
                trace[key] = [piece] * len(trace[key])
        path = tmp_path / f"hostile-{name}.json"
        save_trace(path, trace)
        pg.set_input_files("input[data-testid='Load trace-upload-button']", str(path))
        pg.wait_for_function(  # literal, whole or cut to its cell's width (app.tokentext.tok_fit)
            """t => [...document.querySelectorAll('#rx-round-plot [data-shown] text')].some(e => e.textContent === t
                   || (e.textContent.length >= 3 && e.textContent.endsWith('…') && t.startsWith(e.textContent.slice(0, -1))))""",
            arg=piece, timeout=30000)
        box = pg.locator("#rx-text-box")
        assert box.locator("script, img, b, a, br, sup, span[style]").count() == 0
        plot = pg.locator("#rx-round-plot .js-plotly-plot[data-shown]")
        assert plot.locator("svg a, text b, text a, text sup").count() == 0  # no Plotly markup from a token
        pg.wait_for_function("t => (document.querySelector('#rx-text-box')?.innerText || '').includes(t)",
                             arg=piece, timeout=30000)  # the text view shows the piece literally
    # two frames painted since the last piece showed: whatever a token's text could run has run by then
    pg.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert not w.dialogs, w.dialogs
    assert not w.errors, w.errors
    pg.close()


def test_closing_the_page_stops_the_run(app, browser):
    """The browser goes away mid-run: the generator is closed and the run stops early."""
    w = Watched(browser, app.url)
    w.wait_model(app)
    ended = app.log().count("run ended")
    w.run(LONG_PROMPT, STOPPABLE_TOKENS)
    w.wait_running(3)
    w.page.close()
    assert app.wait_log("run ended", timeout=90, count=ended + 1), app.log()[-2000:]
    rounds = int(re.findall(r"run ended after (\d+) rounds", app.log())[-1])
    assert rounds < STOPPABLE_TOKENS - 10


def test_stop_button_in_browser(app, browser):
    """Stop ends a long run at the next round; the partial run stays inspectable."""
    w = Watched(browser, app.url)
    w.wait_model(app)
    w.run(LONG_PROMPT, STOPPABLE_TOKENS)
    w.wait_running(2)
    # dispatched at once: playwright's click waits for the layout to hold still, which it doesn't while
    # the text streams (and a person's click doesn't wait)
    w.page.locator("#rx-stop").dispatch_event("click")
    w.wait_done(timeout=60000)
    m = re.search(r"rounds 0–(\d+)", w.caption())
    assert "stopped" in w.page.inner_text("#rx-metrics")
    assert m and int(m.group(1)) < STOPPABLE_TOKENS - 10
    assert not w.errors, w.errors
    w.page.close()

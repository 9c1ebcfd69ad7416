"""Issue 55, the researcher's views on the page: Chromium at 1280x720 against the launched tiny app. A click on a round
of the "rounds where the rules disagree" list, or on a round's bar or ◆ in the Compare panel, shows that round in the
inspector, in view; a round of the comparison run puts that run in the inspector (the sides swap)."""
from __future__ import annotations

import json
import re

import pytest

from app_fixtures import OUTPUT, REPO, compare_with_dflash, wait_text
from engine import analyses
from engine.trace import load_trace
from page_fixtures import caption, example_box, in_view, page, run, wait_figure  # noqa: F401  (page: over this module's app)

pytest.importorskip("playwright.sync_api")
EXAMPLES = dict((p.stem, p) for p in sorted((REPO / "assets" / "traces").glob("*.json")))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """An app of its own: on the shared tiny app, the modules before this one left runs and round switches in its
    queue, and these clicks' answers waited behind them (their 10 s views timed out under pytest-xdist)."""
    from app_fixtures import launched_tiny_app

    yield from launched_tiny_app(tmp_path_factory)


def wait_round(pg, i: int) -> None:
    """Round i is the one a person sees: the caption names it, the figure is drawn for it, the caption is in view."""
    wait_text(pg, "#rx-caption", re.escape(f"Round {i} ("), 30000)
    wait_figure(pg, i)
    # scrolled to its start, the caption's top lies a fraction of a pixel above 0 (sub-pixel layout): in view
    pg.wait_for_function("() => { const r = document.querySelector('#rx-caption').getBoundingClientRect();"
                         " return r.top > -2 && r.top < window.innerHeight - 40; }", timeout=20000)


def point_at(pg, plot: str, x: int, y: float) -> dict:
    """Where (x, y) of a Compare figure lies on its plot area (the drag layer, which takes the clicks)."""
    return pg.evaluate("""([s, x, y]) => { const l = document.querySelector(s + ' .js-plotly-plot')._fullLayout;
                          return {x: l.xaxis.l2p(x), y: l.yaxis.l2p(y)}; }""", [plot, x, y])


def click_round(pg, plot: str, x: int, y: float) -> None:
    pg.locator(f"{plot} .js-plotly-plot .nsewdrag").first.click(position=point_at(pg, plot, x, y))


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_rule_rounds_list_jumps_to_each_round(page):
    """The example trace shown lists the rounds where its rules disagree (analyses.disagreements of the file); each
    entry's button shows its round, and the inspector comes into view."""
    pg = page
    pg.evaluate("window.__rxNoCache = true")  # each round from the server: the click's event, not the page's cache
    wait_text(pg, "#rx-caption", "most instructive round")
    trace = load_trace(EXAMPLES[example_box(pg)])
    want = [t["round"] for t in analyses.disagreements(trace)["disagree"]]
    assert want, "the example trace shown has no round where the rules disagree: the test shows nothing"
    pg.wait_for_selector("#rx-rule-rounds button[data-round]", timeout=30000)
    listed = [int(b.get_attribute("data-round")) for b in pg.locator("#rx-rule-rounds button[data-round]").all()]
    assert listed == want
    assert "Rounds where the rules disagree" in pg.inner_text("#rx-rule-rounds")
    pg.locator("#rx-rule-rounds").screenshot(path=str(OUTPUT / "rule-rounds-list.png"))
    shown = int(re.search(r"Round (\d+) ", caption(pg)).group(1))
    for r in [r for r in want if r != shown][:2] + [shown]:
        pg.locator(f"#rx-rule-rounds button[data-round='{r}']").scroll_into_view_if_needed()
        assert not in_view(pg, "#rx-caption") or r == shown   # the list sits below: the inspector is out of view
        pg.click(f"#rx-rule-rounds button[data-round='{r}']")
        wait_round(pg, r)
        # the caption's attachment table is this round's; the list's entry gave its counts
        assert pg.locator("#rx-caption table.rx-att").get_attribute("data-round") == str(r)
        entry = pg.locator(f"#rx-rule-rounds li:has(button[data-round='{r}'])").inner_text()
        for rule, v in analyses.attachment_table(trace, r)["rules"].items():
            assert re.search(rf"\b{rule}( \(ran\))? {v['accepted']}\b", entry), (rule, entry)
    pg.screenshot(path=str(OUTPUT / "rule-rounds-jump.png"))


def test_compare_markers_and_the_comparison_run_open_in_the_inspector(page):
    """A run, then Compare with dflash: a click on a round's ◆ under this run shows that round of this run; a click on
    a round under the comparison puts the comparison run in the inspector on that round (the sides swap: its metrics
    say so), and "Inspect the comparison run" swaps back."""
    pg = page
    pg.evaluate("window.__rxNoCache = true")  # each round from the server: the click's event, not the page's cache
    pg.fill("#rx-shifted input", "all")  # every shifted block: the dflash replay then differs in some rounds
    pg.keyboard.press("Enter")
    run(pg, "hi, j. abc dea?", 24)
    assert "reanchor" in pg.inner_text("#rx-metrics")
    compare_with_dflash(pg)
    pg.wait_for_selector("#rx-cmp-a-cf .js-plotly-plot .scatterlayer .point", timeout=30000)
    cf = json.loads(pg.evaluate("() => JSON.stringify(document.querySelector('#rx-cmp-a-cf .js-plotly-plot').data)"))
    xs, ys = cf[1]["x"], cf[1]["y"]
    assert len(xs) >= 3
    shown = int(re.search(r"Round (\d+) ", caption(pg)).group(1))
    # a better or worse ◆ (the dflash replay accepted fewer there) when there is one, not the round shown
    k = max((k for k in range(len(xs)) if xs[k] != shown), key=lambda k: (cf[0]["y"][k] != ys[k], xs[k]))
    pg.locator("#rx-cmp-a-cf").scroll_into_view_if_needed()
    click_round(pg, "#rx-cmp-a-cf", xs[k], ys[k])
    wait_round(pg, xs[k])
    assert "reanchor" in pg.inner_text("#rx-metrics")
    pg.screenshot(path=str(OUTPUT / "compare-marker-jump.png"))

    # a round of the comparison: that run takes the inspector, on that round
    tl = json.loads(pg.evaluate("() => JSON.stringify(document.querySelector('#rx-cmp-timeline .js-plotly-plot').data)"))
    n = len(tl[0]["x"])
    j = 1 if n > 1 else 0
    pg.locator("#rx-cmp-timeline").scroll_into_view_if_needed()
    click_round(pg, "#rx-cmp-timeline", j, 0.5)
    wait_text(pg, "#rx-metrics", "dflash", 30000)
    wait_round(pg, j)
    assert "this run: dflash" in pg.inner_text("#rx-cmp-a-metrics")
    assert "comparison: reanchor" in pg.inner_text("#rx-cmp-metrics")
    pg.screenshot(path=str(OUTPUT / "compare-swapped.png"))
    pg.click("#rx-cmp-swap")
    wait_text(pg, "#rx-cmp-a-metrics", "this run: reanchor", 30000)
    assert "comparison: dflash" in pg.inner_text("#rx-cmp-metrics")

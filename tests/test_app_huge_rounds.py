"""A valid trace of 8,192-node rounds (the bound a trace may hold; the engine makes at most 1,024) in Chromium: the
round figure draws at most plots.DRAWN_NODES trie nodes and DOTS_A_NODE proposer dots a node, and its title says
how many the round has. Before, the page drew every node (and 16,000 proposer dots): 4-9 s a round switch."""
from __future__ import annotations

import json

import pytest

from app import plots, records
from app_fixtures import JS_TIMED_NEXT, OUTPUT, largest_round_trace, page_loading
from engine.trace import tiled_trace

SHOWN = "#rx-round-plot [data-shown]"


@pytest.fixture(scope="module")
def app(tiny_app):
    return tiny_app


def test_a_round_of_8192_nodes_draws_a_bounded_figure(app, browser, tmp_path):
    trace = tiled_trace(largest_round_trace(), 2)   # two rounds of 8,192 nodes, 7 MB
    f = tmp_path / "huge.json"
    f.write_text(json.dumps(trace))
    page = page_loading(browser, app.url, f)
    page.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('loaded trace')",
                           timeout=120000)
    page.click("#rx-first")
    page.wait_for_function(f"() => (document.querySelector('{SHOWN} .gtitle')?.textContent || '')"
                           ".startsWith('round 0 ')", timeout=120000)
    ms = page.evaluate(JS_TIMED_NEXT, 1)
    title = page.text_content(f"{SHOWN} .gtitle")
    points = page.evaluate(f"() => document.querySelectorAll('{SHOWN} .point, {SHOWN} .textpoint').length")
    page.locator(f"{SHOWN}").scroll_into_view_if_needed()
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "huge_round.png"))
    page.close()
    print(f"round switch to an 8,192-node round: {ms / 1000:.2f} s; {points} points and labels drawn")
    assert "8,192 trie nodes, the first 1,024 drawn" in title, title
    bound = plots.DRAWN_NODES * (2 + plots.DOTS_A_NODE) + 128 * 40   # nodes, labels, dots; the grid's sites
    assert points < bound, (points, bound)


def test_a_round_of_116_attached_blocks_draws_a_bounded_grid():
    """The same round's alignment grid: 116 attached rows of 128 cells were all drawn (15,000 cells, the rest of a
    switch's time); at most plots.DRAWN_ROWS rows are now, g(0) and the rows the target accepted drafts on first, the
    others counted in the folded row, which a click opens (unfold draws every row, as before)."""
    trace = largest_round_trace()
    rec, texts = trace["rounds"][0], trace["token_texts"]
    fig = plots.round_figure_parts(rec, texts, None, None)
    rows = fig["layout"]["yaxis"]["ticktext"]
    shifted = [t for t in fig["data"] if t.get("meta") == "shifted"]
    attached = sum(1 for f in records.block_fates(rec, None) if f["fate"] == "attached")
    assert attached > plots.DRAWN_ROWS and len(rows) <= plots.DRAWN_ROWS + 1, (attached, len(rows))
    assert 0 < len(shifted) < plots.DRAWN_ROWS
    folded = f"+{attached - len(shifted)} attached"
    assert folded in rows[-1], rows[-1]
    unfolded = plots.round_figure_parts(rec, texts, None, None, unfold=True)
    assert sum(t.get("meta") == "shifted" for t in unfolded["data"]) == attached

"""Issue 36: one round taught on a projector. Chromium at 1280x720 against one launched app (tiny Qwen3 target and
drafter), one page shared by the tests in file order: what a person sees.

Bugs (a)-(d) of the issue each have a test here that failed before its fix: (a) in tree modes the grid framed a
token as accepted when the accepted path did not run through its row's prefix; (b) Compare read the prompt box and
the controls, not the trace shown ("Prompt: is empty" on an example trace; another length compared without a word);
(c) the example traces' own stats disagreed with the page's tau (their reproduction: tests/test_example_traces.py);
(d) the old trace's tau stood next to "running… (prefill)".
"""
from __future__ import annotations

import json
import re

import pytest

from app_fixtures import (JS_ROUND_SETTLED, OUTPUT, REPO, compare_with_dflash, go_to_round, real_trace, show_example,
                          wait_text)
from helpers import wait_handled
from page_fixtures import app, page  # noqa: F401  (the fixtures: the tiny app, one page at 1280x720)

pytest.importorskip("playwright.sync_api")  # the browser fixture (conftest.py) drives it

EXAMPLES = sorted((REPO / "assets" / "traces").glob("*.json"))
LOAD = "input[data-testid='Load trace-upload-button']"

# The drawn round figure's rows and accepted frames: [[x, row label], ...] (row labels from the y axis, category or
# numbered rows with tick texts).
JS_FRAMES = """() => {
  const gd = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]'), ya = gd._fullLayout.yaxis;
  const label = (y) => typeof y === 'string' ? y : ya.ticktext[ya.tickvals.indexOf(y)];
  const out = [];
  gd.data.filter(t => t.name === 'accepted').forEach(t => t.x.forEach((x, k) => out.push([x, label(t.y[k])])));
  return out;
}"""




def load_trace(pg, trace: dict, path) -> None:
    path.write_text(json.dumps(trace))
    pg.set_input_files(LOAD, str(path))
    wait_text(pg, "#rx-metrics", "loaded trace")


def run(pg, prompt: str, max_new: int) -> None:
    pg.fill("#rx-prompt textarea", prompt)
    pg.fill("#rx-max-new input", str(max_new))
    pg.click("#rx-run")
    wait_text(pg, "#rx-metrics", r"\b(done|stopped)\b", 120000)


def close_toasts(pg) -> None:
    pg.evaluate("() => document.querySelectorAll('.toast-close').forEach(b => b.click())")


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_the_page_shows_each_example_traces_own_tau(page):
    """The file's stats and the page agree (they said 2.58 and 2.55: the stats counted tau the old way)."""
    for path in EXAMPLES:
        page.locator("#rx-example-trace input").click()
        page.get_by_role("option", name=path.stem).click()
        page.wait_for_function("n => (document.querySelector('#rx-example-trace input')?.value || '') === n",
                               arg=path.stem, timeout=20000)
        stats = json.loads(path.read_text())["stats"]
        page.wait_for_function("r => (document.querySelector('#rx-metrics')?.innerText || '').includes('rounds ' + r)",
                               arg=str(stats["rounds"]), timeout=20000)
        shown = re.search(r"τ\s*([\d.]+)", page.inner_text("#rx-metrics")).group(1)
        assert shown == f"{stats['tau']:.2f}", (path.name, shown, stats["tau"])


def test_the_metrics_show_no_old_tau_next_to_running(page):
    """Every text the metrics strip shows while the run starts: none holds the old trace's numbers."""
    page.evaluate("""() => { window.__rxSeen = [];
        const m = document.querySelector('#rx-metrics');
        new MutationObserver(() => window.__rxSeen.push(m.innerText)).observe(m, {subtree: true, childList: true,
                                                                              characterData: true}); }""")
    run(page, "hi, j.", 12)
    seen = page.evaluate("() => window.__rxSeen")
    starting = [t for t in seen if "prefill" in t]
    assert starting, seen
    assert not [t for t in starting if "τ" in t or "tokens/s" in t], starting


def test_compare_uses_the_trace_shown(page):
    """After a run of 12 tokens on "hi, j.", another prompt and length in the boxes: Compare runs the shown trace's
    prompt and settings (12 tokens), not the boxes' (it compared another prompt and length without a word)."""
    run(page, "hi, j.", 12)   # each test has a fresh page: the trace shown is this run's
    page.fill("#rx-prompt textarea", "a b c d e f g")
    page.fill("#rx-max-new input", "20")
    compare_with_dflash(page)
    new_tokens = lambda sel: re.search(r"new tokens\s*(\d+)", page.inner_text(sel)).group(1)  # noqa: E731
    assert new_tokens("#rx-cmp-metrics") == new_tokens("#rx-cmp-a-metrics") == "12", (
        page.inner_text("#rx-cmp-metrics"), page.inner_text("#rx-cmp-a-metrics"))
    assert page.locator(".toast-body").count() == 0


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_compare_on_an_example_trace_with_an_empty_prompt_box(page):
    """An example trace shown and the prompt box empty: Compare says why it cannot run here (the example was recorded
    on another target than this app's), never "Prompt: is empty"."""
    page.locator("#rx-example-trace input").click()
    page.get_by_role("option", name=EXAMPLES[0].stem).click()
    wait_text(page, "#rx-metrics", "example trace", 20000)
    page.fill("#rx-prompt textarea", "")
    page.get_by_text("Compare: a second run").click()
    page.click("#rx-cmp-run")
    page.wait_for_selector(".toast-body", timeout=20000)
    toast = page.inner_text(".toast-body")
    close_toasts(page)
    assert "Prompt" not in toast and "target" in toast, toast


def test_a_tree_grid_frames_only_cells_on_the_accepted_path(page, tmp_path):
    """ddtree on the tiny Qwen3, round 10: the accepted path left g(0)'s row before depth 1, yet the grid framed
    g(0)'s token there (it matched by token and block, not by the row's prefix). Every frame drawn must be a cell
    whose node, walking its row's own path from the anchor, is on the accepted chain, and every such cell framed."""
    from engine.analyses import path_nodes

    trace = real_trace("qwen3", "ddtree", "earliest", "ab. ab. ab.", 48, 0, 0.0)
    load_trace(page, trace, tmp_path / "ddtree.json")
    for i in (10, 3):
        go_to_round(page, i)
        rec = trace["rounds"][i]
        s, acc = rec["anchor_pos"], set(rec["accepted_nodes"][1:])
        expected = set()
        base = rec["baseline"]  # each row as drawn: g(0), or a block's top-1 draft at its site after g(0)'s prefix
        rows = [("g(0)", 0, base)] + [(f"g({b['d']}) at {b['chosen']}", b["chosen"], base[:b["chosen"]] + b["tokens"])
                                      for b in rec["shifted"] if b["chosen"] is not None]
        for label, first, tokens in rows:  # each row's own path from the anchor
            for depth, node in enumerate(path_nodes(rec, tokens)):
                if depth > first and node in acc:
                    expected.add((s + depth, label))
        drawn = {(x, re.sub(r"\s*✂$", "", lab)) for x, lab in page.evaluate(JS_FRAMES)}
        assert drawn == expected, (i, sorted(drawn ^ expected))
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "lesson-tree-frames.png"))


# -- the step-through, the projector setting, the attachment table ---------------------------------------------

# The round figure drawn now: each trace's part (meta) and whether it is drawn in full.
JS_PARTS = """() => [...document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]').data]
    .map(t => [t.meta, t.opacity === undefined || t.opacity === 1])"""
JS_PHASE = "() => document.querySelector('#rx-caption .rx-phase')?.textContent || ''"




@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_every_example_opens_on_a_real_shift_the_target_accepted(page):
    """The opening round of each example trace has a shifted block whose own drafts the target accepted, attached
    at a site other than its native index (math 16: g(1) and g(2) slid back by one)."""
    from app import records

    for path in EXAMPLES:
        i = show_example(page, path.stem)
        rec = json.loads(path.read_text())["rounds"][i]
        moved = [(d, site, k) for d, site, k in records.shifted_acceptance(rec) if site != d]
        assert moved, (path.name, i, records.shifted_acceptance(rec))
        assert "real shift the target accepted" in page.inner_text("#rx-caption")


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_attachment_table_numbers_are_the_counterfactuals(page):
    """The table under the caption: per rule, the drafts its round accepts, as engine.analyses.counterfactual says;
    the rule that ran marked; the table stays open while stepping rounds."""
    from engine import analyses

    path = next(p for p in EXAMPLES if p.stem.startswith("math")) if any(
        p.stem.startswith("math") for p in EXAMPLES) else EXAMPLES[0]
    i = show_example(page, path.stem)
    trace = json.loads(path.read_text())
    page.locator("#rx-att summary").click()
    for k in (i, i + 1):
        if k != i:
            page.click("#rx-next")
            page.wait_for_function(JS_ROUND_SETTLED, arg=k, timeout=20000)
        if not trace["rounds"][k]["shifted"]:
            continue
        assert page.evaluate("() => document.querySelector('#rx-att').open"), "the table closed on a round switch"
        heads = page.evaluate("() => [...document.querySelectorAll('#rx-att tr:first-child th')].map(e => e.innerText)")
        got = page.evaluate("() => [...document.querySelectorAll('#rx-att tr.rx-att-acc td')].map(e => e.innerText)")
        rules = [h.replace(" (ran)", "") for h in heads[4:]]
        assert [h for h in heads if "(ran)" in h] == [f"{trace['config']['rule']} (ran)"]
        want = [str(analyses.counterfactual(trace, trace["config"]["mode"], r)[k]["counterfactual"]) for r in rules]
        assert [g.rstrip("+") for g in got] == want, (k, rules, got, want)


def test_each_phase_changes_the_highlight_and_the_sentence(page):
    """↓ steps the phases of the round in view (1-9), ↑ back, ← → still step rounds: each phase draws another part
    in full and says another sentence built from the round's numbers."""
    i = show_example(page, EXAMPLES[0].stem) if EXAMPLES else 1
    page.locator("#rx-caption").click()
    seen, parts = [], []
    for k in range(1, 10):
        page.keyboard.press("ArrowDown")
        page.wait_for_function("k => (document.querySelector('#rx-caption .rx-phase')?.dataset.phase) === String(k)",
                               arg=k, timeout=20000)
        page.wait_for_function("k => document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]')?.data"
                               ".some(t => t.opacity !== undefined)", arg=k, timeout=20000)
        seen.append(page.evaluate(JS_PHASE))
        parts.append(sorted({m for m, full in page.evaluate(JS_PARTS) if full}))
        if k in (1, 5, 8):
            page.screenshot(path=str(OUTPUT / f"lesson-phase-{k}.png"))
    assert len(set(seen)) == 9 and all(s.startswith(f"Step {k} of 9") for k, s in enumerate(seen, 1)), seen
    assert all(parts[k] != parts[k - 1] for k in range(1, 9)), parts
    assert re.search(r"\d", seen[0]) and str(i) in page.inner_text("#rx-caption")
    page.keyboard.press("ArrowUp")
    page.wait_for_function("() => (document.querySelector('#rx-caption .rx-phase')?.dataset.phase) === '8'",
                           timeout=20000)
    page.keyboard.press("ArrowRight")  # rounds still step, in the same phase
    page.wait_for_function(JS_ROUND_SETTLED, arg=i + 1, timeout=20000)
    assert page.evaluate(JS_PHASE).startswith("Step 8 of 9")
    page.click("#rx-phase-off")
    page.wait_for_function("() => !document.querySelector('#rx-caption .rx-phase')", timeout=20000)


# Every label of the round figure (grid cells, row names, trie labels) and every mark (scatter points), as boxes.
JS_BOXES = """() => {
  const fig = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]');
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const labels = [...fig.querySelectorAll('.heatmaplayer text, .textpoint text, .ytick text')]
    .filter(e => e.textContent.trim() && getComputedStyle(e).opacity !== '0')
    .map(e => ({text: e.textContent, px: parseFloat(getComputedStyle(e).fontSize), box: box(e)}));
  const marks = [...fig.querySelectorAll('.scatterlayer .points path.point')]
    .map(e => ({trace: e.closest('.trace')?.__data__?.[0]?.trace?.name || '?', box: box(e)}));
  return {labels, marks, top: fig.getBoundingClientRect().top};
}"""


def _overlap(a, b, slack: float = 0.5) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_projector_setting_labels_marks_fold_and_trie_above_the_fold(page):
    """Projector on, at 1280x720: every label of the round figure is at least 14 px, no mark covers a label, the
    discarded blocks sit in one row that opens on a click, and with the figure at the top of the screen the trie
    is on it too."""
    path = next((p for p in EXAMPLES if p.stem.startswith("math")), EXAMPLES[0])
    show_example(page, path.stem)
    page.check("#rx-projector input")
    page.wait_for_function("() => document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]')?._fullLayout.font.size"
                           " === 14", timeout=20000)
    got = page.evaluate(JS_BOXES)
    small = [(l["text"], l["px"]) for l in got["labels"] if l["px"] < 14]
    assert not small, small
    covered = [(m["trace"], l["text"]) for m in got["marks"] for l in got["labels"] if _overlap(m["box"], l["box"])]
    assert not covered, covered[:10]
    ticks = page.evaluate("() => [...document.querySelectorAll('#rx-round-plot [data-shown] .ytick text')].map(e => e.textContent)")
    fold = [t for t in ticks if t.startswith("✗ ")]
    assert len(fold) == 1 and fold[0].endswith("▸"), ticks
    # the trie above the fold: the figure's top at the screen's, the trie's first node on the screen
    page.evaluate("() => document.querySelector('#rx-round-plot').scrollIntoView({block: 'start'})")
    trie_top = page.evaluate("""() => Math.min(...[...document.querySelectorAll(
        '#rx-round-plot .js-plotly-plot[data-shown] .subplot.x2y2 .scatterlayer path.point')]
        .map(e => e.getBoundingClientRect().top))""")
    assert trie_top < 720 - 20, trie_top
    page.screenshot(path=str(OUTPUT / "lesson-projector.png"))
    # the folded row opens on a click, and closes again
    cell = page.evaluate("""() => { const gd = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]'),
        l = gd._fullLayout, t = gd.data.find(t => t.meta === 'fold'), k = t.z[0].findIndex(v => v !== null);
        const x = t.x ? (t.x[k] + t.x[k + 1]) / 2 : t.x0 + k;  // projector: the columns' edges (their own widths)
        return {x: l.xaxis.l2p(x) + l.xaxis._offset, y: l.yaxis.l2p(t.y[0]) + l.yaxis._offset}; }""")
    page.mouse.click(page.evaluate("() => document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]')"
                                   ".getBoundingClientRect().left") + cell["x"],
                     page.evaluate("() => document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]')"
                                   ".getBoundingClientRect().top") + cell["y"])
    page.wait_for_function("() => [...document.querySelectorAll('#rx-round-plot [data-shown] .ytick text')]"
                           ".some(e => e.textContent.endsWith('▾'))", timeout=20000)
    ticks = page.evaluate("() => [...document.querySelectorAll('#rx-round-plot [data-shown] .ytick text')].map(e => e.textContent)")
    assert sum(t.startswith("g(") and " ✗ " in t for t in ticks) >= 1, ticks
    page.screenshot(path=str(OUTPUT / "lesson-projector-unfolded.png"))


# Times a jump to round i in the page: from the slider number box's input event (its timeStamp: the page's own
# listener may draw the round in that event, before this one's) to the first animation frame with round i's caption,
# slider and figure in the page (the frame that paints them), in window.__rxJumpMs. Timed in the page, as
# JS_TIMED_NEXT: a time taken in Python after the wait also counted what the page did next (the following round
# drawn ahead, up to 200 ms) before it answered.
JS_WATCH_JUMP = """i => { window.__rxJumpMs = 0; let t0 = 0;
  document.addEventListener('input', (e) => { t0 = t0 || e.timeStamp; }, {capture: true, once: true});
  const shown = () => (""" + JS_ROUND_SETTLED + """)(i)
    && (document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '').startsWith('round ' + i + ' ');
  const check = () => { if (t0 && shown()) window.__rxJumpMs = performance.now() - t0; else requestAnimationFrame(check); };
  requestAnimationFrame(check); }"""


# Click #rx-next (round i is drawn ahead); [ms to the click's end, as JS_TIMED_NEXT; ms to the first animation frame
# that shows round i, its style and layout done (the caption's innerText), as JS_WATCH_JUMP times a jump].
JS_TIMED_NEXT_FRAME = """async (i) => {
  const t0 = performance.now();
  const shown = () => (document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '')
    .startsWith('round ' + i + ' ');
  document.querySelector('#rx-next').click();
  await Promise.resolve();
  const event = performance.now() - t0;
  await new Promise((done, fail) => {
    const check = () => {
      if (shown() && document.querySelector('#rx-caption').innerText.includes('Round ' + i + ' (')) done();
      else if (performance.now() - t0 > 20000) fail(new Error('round ' + i + ' not shown'));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });
  return [event, performance.now() - t0];
}"""


def timed_jumps(pg, targets) -> list[float]:
    """ms of each jump (JS_WATCH_JUMP), typed into the slider's number box as a person does."""
    out = []
    for i in targets:
        # after a pause, as a person's: the page's work after the last jump (the following round drawn ahead) is done
        pg.evaluate("() => new Promise(done => requestIdleCallback(() => done(), {timeout: 3000}))")
        box = pg.locator("#rx-slider input[type=number]")
        pg.evaluate(JS_WATCH_JUMP, i)
        box.fill(str(i))  # Gradio's slider sends its number box's input at once (Enter sends nothing more)
        box.press("Enter")
        pg.wait_for_function("() => window.__rxJumpMs", timeout=20000)
        out.append(round(pg.evaluate("() => window.__rxJumpMs"), 1))
        pg.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)
    return out


# A round switch the page can show itself (round i drawn ahead), by "next" (how = 'next') or typed into the slider's
# number box (how = 'box'): whether round i's figure, caption and slider show it when the event's handling ends, and
# how many times the event had reached the control itself (where Gradio's listeners are) then, at the next animation
# frame (the one that paints the round), and in the end.
JS_SWITCH_REACHES = """async ([how, i]) => {
  const el = document.querySelector(how === 'next' ? '#rx-next' : '#rx-slider input[type=number]');
  const reached = [], kind = how === 'next' ? 'click' : 'input';
  const note = () => reached.push(performance.now());
  el.addEventListener(kind, note);
  try {
    if (how === 'next') el.click();
    else { el.value = String(i); el.dispatchEvent(new Event('input', {bubbles: true})); }
    const shown = (document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '')
      .startsWith('round ' + i + ' ') && document.querySelector('#rx-caption').innerText.includes('Round ' + i + ' (')
      && (how === 'next' || (""" + JS_ROUND_SETTLED + """)(i));  // "next": the slider follows the server's answer
    const inEvent = reached.length;
    const atFrame = await new Promise((done) => requestAnimationFrame(() => done(reached.length)));
    const t0 = performance.now();
    while (!reached.length && performance.now() - t0 < 5000) await new Promise((done) => setTimeout(done, 20));
    await new Promise((done) => setTimeout(done, 300));  // a second delivery would come within this
    return {shown, inEvent, atFrame, reached: reached.length};
  } finally { el.removeEventListener(kind, note); }
}"""


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_a_jump_draws_a_round_the_page_fetched_while_the_server_waits(page):
    """The page fetches its session's rounds while idle (app.views.rounds_json, by the session's token), so a jump
    shows the round while Gradio's call is still held back here; the server's answer then wins. The route answers
    this session's token only: another token 404, a bad number 400 naming the field (a stale key: no rounds, no
    error in the page's console). A switch the page shows itself reaches Gradio only after the frame that shows it."""
    import urllib.error
    import urllib.request

    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "/rx/rounds/" in r.url else None)
    # a trace other than the one shown, whose rounds the page fetches after the listener above is on (the one shown
    # may have been fetched whole while the fixture's page opened)
    shown = page.evaluate("() => document.querySelector('#rx-example-trace input')?.value || ''")
    path = next(p for p in EXAMPLES if p.stem != shown)
    show_example(page, path.stem)
    n = len(json.loads(path.read_text())["rounds"])
    page.wait_for_function("n => window.__rxHeld().length >= n", arg=n, timeout=30000)
    held = []  # Gradio's calls, held until the check is done
    page.route("**/gradio_api/**", lambda r: held.append(r) if r.request.method == "POST" else r.continue_())
    try:
        box = page.locator("#rx-slider input[type=number]")
        # Gradio's call leaves after the frame that shows the round (below): awaited, not assumed sent
        with page.expect_request(lambda r: "/gradio_api/" in r.url and r.method == "POST", timeout=10000):
            box.fill(str(n - 3))
        page.wait_for_function(JS_ROUND_SETTLED, arg=n - 3, timeout=10000)
        assert page.evaluate("() => document.querySelector('#rx-round-plot [data-shown] .gtitle').textContent").startswith(f"round {n - 3} ")
        assert held, "the jump sent no call"
    finally:
        for r in held:
            r.continue_()
        page.unroute("**/gradio_api/**")
    page.wait_for_function(JS_ROUND_SETTLED, arg=n - 3, timeout=10000)
    url = fetched[-1]
    with urllib.request.urlopen(url) as res:
        assert res.status == 200 and json.loads(res.read())["rounds"]
    token = url.split("/rx/rounds/")[1].split("?")[0]
    for bad, status, field in ((url.replace(token, "A" * len(token)), 404, "rounds:"),
                               (re.sub(r"from=\d+", "from=x", url), 400, "from:"),
                               (re.sub(r"count=\d+", "count=99", url), 400, "count:")):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad)
        assert e.value.code == status and json.loads(e.value.read())["error"].startswith(field), bad
    # "next" and a typed jump to a round the page drew ahead show it within the event (figure, caption; a jump both
    # halves of the slider too), and the event reaches the control, where Gradio's listeners are, once, after the frame
    # that shows the round: Gradio's own work for an event (its loading statuses, 5-30 ms here) ran before that frame
    # and held it back. The server's answer then agrees with the page.
    # (the jump's target near the shown round: the page draws ahead the held rounds nearest it, a bounded number)
    for how, i in (("next", n - 2), ("box", n - 6)):
        page.wait_for_function("i => window.__rxDrawn().includes(i)", arg=i, timeout=30000)
        got = page.evaluate(JS_SWITCH_REACHES, [how, i])
        # (a typed jump's input goes on to Gradio in the event: only "next" is held past the paint)
        want = {"shown": True, "inEvent": 0, "atFrame": 0, "reached": 1} if how == "next" else \
            {"shown": True, "inEvent": 1, "atFrame": 1, "reached": 1}
        assert got == want, (how, got)
        page.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)
        page.wait_for_function("i => (document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '')"
                               ".startsWith('round ' + i + ' ')", arg=i, timeout=20000)


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_a_button_clicked_after_a_typed_jump_shows_its_own_round(page):
    """A round typed in the slider's box, then "|◀ first": round 0, whatever order the calls reach the server in.
    Leaving the box sent the typed round again (Gradio's "release" on blur) beside the click's call; held here and let
    through in the worse order, the round left behind won (CI: "first" never showed round 0)."""
    n = len(json.loads(EXAMPLES[0].read_text())["rounds"])
    show_example(page, EXAMPLES[0].stem)
    go_to_round(page, n - 3)  # the box keeps the focus, as after a person's typing
    first = page.evaluate("() => window.gradio_config.dependencies.find(d => d.api_name === 'first_round').id")
    held = []
    page.route("**/gradio_api/**", lambda r: held.append(r) if r.request.method == "POST" else r.continue_())
    try:
        page.click("#rx-first")
        # until the click's own call is held: one that leaving the box sends goes before it
        wait_handled(page, lambda: any((r.request.post_data_json or {}).get("fn_index") == first for r in held), 10,
                     lambda: f"the click on |◀ first sending its call, held ({len(held)} held)")
        for r in reversed(held):  # the click's own call first, the one sent before it last, each answered in turn
            with page.expect_response(lambda res, q=r.request: res.request == q, timeout=20000):
                r.continue_()
    finally:
        page.unroute("**/gradio_api/**")
    page.wait_for_function(JS_ROUND_SETTLED, arg=0, timeout=20000)   # every answer is in by now
    assert page.evaluate(JS_ROUND_SETTLED, 0), (len(held), page.inner_text("#rx-caption")[:80])


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_round_switch_times_with_the_lesson_views(page):
    """Figures, not assertions (GUIDE: speed targets live in measurements): next / prev (drawn from the browser's
    cache) and jumps (the slider's box) in the projector setting at phase 5, in ms from the click (a jump: the number
    box's input) to the frame that shows the new round's figure, timed in the page; next / prev twice: to the end of
    the click's handling (the figure swapped in), and to that frame (its style and layout done). Jumps twice: once
    the page holds the trace's rounds (fetched while idle: drawn in the input event), and by the server's path (the
    page's caches off: Gradio's call, then the draw). Written to test-output/lesson_timing.json."""
    import statistics

    path = next((p for p in EXAMPLES if p.stem.startswith("math")), EXAMPLES[0])
    show_example(page, path.stem)
    n = len(json.loads(path.read_text())["rounds"])
    page.check("#rx-projector input")
    page.wait_for_function("() => document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]')?._fullLayout.font.size"
                           " === 14", timeout=20000)
    page.locator("#rx-caption").click()
    for k in range(1, 6):
        page.keyboard.press("ArrowDown")
        page.wait_for_function("k => (document.querySelector('#rx-caption .rx-phase')?.dataset.phase) === String(k)",
                               arg=k, timeout=20000)
    go_to_round(page, 1)
    steps = []
    for i in range(2, min(12, n - 1)):
        page.wait_for_function("i => [...document.querySelectorAll('#rx-round-plot .rx-plot:not([data-shown]) .gtitle')]"
                               ".some(t => t.textContent.startsWith('round ' + i + ' '))", arg=i, timeout=20000)
        steps.append(page.evaluate(JS_TIMED_NEXT_FRAME, i))
        page.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)
    targets = (n - 2, 3, n // 2 + 2, 7, n - 4)
    # the page holds every round of this view (fetched while idle), and has drawn them ahead, the jumps' targets
    # among them (what a person finds after a few seconds on the trace)
    page.wait_for_function("n => window.__rxHeld().length >= n", arg=n, timeout=30000)
    page.wait_for_function("t => t.every(r => window.__rxDrawn().includes(r))", arg=[n - 2, 3], timeout=30000)
    jumps = timed_jumps(page, targets)
    assert "Step 5 of 9" in page.inner_text("#rx-caption")  # the view timed: phase 5 still (projector: above)
    page.evaluate("() => { window.__rxNoCache = true; }")
    try:
        served = timed_jumps(page, targets)
    finally:
        page.evaluate("() => { window.__rxNoCache = false; }")
    report = {"next_ms": [round(t, 1) for t, _ in steps],
              "next_median_ms": round(statistics.median(t for t, _ in steps), 1),
              "next_frame_ms": [round(t, 1) for _, t in steps],
              "next_frame_median_ms": round(statistics.median(t for _, t in steps), 1),
              "jump_ms": jumps, "jump_median_ms": round(statistics.median(jumps), 1),
              "jump_server_ms": served, "jump_server_median_ms": round(statistics.median(served), 1)}
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "lesson_timing.json").write_text(json.dumps(report, indent=1))
    print("round switches with the lesson views:", report)


# The page position of a point of the round figure: (x, y) in data units of axes (xa, ya).
JS_AT = """([xa, ya, x, y]) => { const gd = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]'),
    l = gd._fullLayout, r = gd.getBoundingClientRect();
    return {x: r.left + l[xa]._offset + l[xa].l2p(x), y: r.top + l[ya]._offset + l[ya].l2p(y)}; }"""
JS_HOVER = "() => [...document.querySelectorAll('#rx-round-plot [data-shown] .hoverlayer .hovertext')].map(e => e.textContent)"


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_hover_names_what_is_under_the_pointer(page):
    """The bonus star's hover names the bonus (it showed the rejected draft under it), a g(1) cell's hover names g(1)
    (it could show g(2)'s native-position text)."""
    path = next((p for p in EXAMPLES if p.stem.startswith("math")), EXAMPLES[0])
    show_example(page, path.stem)
    page.evaluate("() => document.querySelector('#rx-round-plot').scrollIntoView({block: 'start'})")
    fig = page.evaluate("""() => { const gd = document.querySelector('#rx-round-plot .js-plotly-plot[data-shown]');
        const b = gd.data.find(t => t.meta === 'bonus'), rows = gd.data.filter(t => t.meta === 'shifted');
        return {bonus: b && [b.x[0], b.y[0]], row: rows[0] && [rows[0].name, rows[0].x0,
                rows[0].z[0].findIndex(v => v !== null), rows[0].y[0]]}; }""")
    assert fig["bonus"] and fig["row"], fig
    at = page.evaluate(JS_AT, ["xaxis2", "yaxis2", *fig["bonus"]])
    page.mouse.move(at["x"], at["y"])
    page.wait_for_function("() => document.querySelector('#rx-round-plot [data-shown] .hoverlayer .hovertext')", timeout=10000)
    assert any(t.startswith("bonus: the target's own token") for t in page.evaluate(JS_HOVER)), page.evaluate(JS_HOVER)
    name, x0, k, y = fig["row"]
    at = page.evaluate(JS_AT, ["xaxis", "yaxis", x0 + k + 1, y])
    page.mouse.move(at["x"], at["y"])
    page.wait_for_function("n => [...document.querySelectorAll('#rx-round-plot [data-shown] .hoverlayer .hovertext')]"
                           ".some(e => e.textContent.startsWith(n + ' · pos'))", arg=name, timeout=10000)
    page.mouse.move(5, 5)


def test_a_round_held_longest_shows_again_after_many_were_fetched(page, tmp_path):
    """The page keeps at most PREFETCH_ROUNDS + 16 rounds for jumps and drops the oldest when a server's answer is
    drawn. A Map keeps a key's first place, so the round held longest (the one the trace opened on), asked for again
    by the server's path, was dropped by its own answer: the figure stayed on the last round and the console said
    "Cannot read properties of undefined (reading 'fig')" (first seen in the 2,000-token run's test)."""
    from app.page import PREFETCH_ROUNDS
    from helpers import chain_trace

    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    n = 2 * PREFETCH_ROUNDS + 100
    load_trace(page, chain_trace(n, L=4), tmp_path / "long.json")
    r0 = int(page.locator("#rx-slider input[type=number]").input_value())
    page.wait_for_function("n => window.__rxHeld().length >= n", arg=PREFETCH_ROUNDS, timeout=60000)
    far = r0 + PREFETCH_ROUNDS + 60 if r0 + PREFETCH_ROUNDS + 60 < n else r0 - PREFETCH_ROUNDS - 60
    go_to_round(page, far)
    # the rounds around the far one fetched too: more than the page keeps, its first round still the oldest
    page.wait_for_function("n => window.__rxHeld().length >= n", arg=PREFETCH_ROUNDS + 60, timeout=60000)
    assert r0 in page.evaluate("() => window.__rxHeld()")
    page.evaluate("() => { window.__rxNoCache = true; }")  # the server's path: its answer draws the round
    try:
        go_to_round(page, r0)
        page.wait_for_function("r => (document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent"
                               " || '').startsWith('round ' + r + ' ')", arg=r0, timeout=20000)
    finally:
        page.evaluate("() => { window.__rxNoCache = false; }")
    assert not errors, errors


def test_a_far_jump_while_the_page_fetches_gets_the_rounds_around_it(page, tmp_path):
    """A jump far from the round the page is fetching around re-aims the fetching: the page used to finish the old
    window first and then start none, so the rounds around the jump were never held (a CI run: 60 s waiting for
    them). The first fetch is held here until the jump's answer is in, so the old sequence is still running."""
    from app.page import PREFETCH_ROUNDS
    from helpers import chain_trace

    n = 2 * PREFETCH_ROUNDS + 100
    held, holding = [], [True]
    page.route("**/rx/rounds/**", lambda r: held.append(r) if holding[0] else r.continue_())
    try:
        load_trace(page, chain_trace(n, L=4), tmp_path / "far.json")
        r0 = int(page.locator("#rx-slider input[type=number]").input_value())
        wait_handled(page, lambda: held, 10, "the page's first fetch of rounds, held")
        far = r0 + PREFETCH_ROUNDS + 60 if r0 + PREFETCH_ROUNDS + 60 < n else r0 - PREFETCH_ROUNDS - 60
        go_to_round(page, far)
        holding[0] = False
        for r in held:
            r.continue_()
        page.wait_for_function("f => [f - 1, f + 1].every((r) => window.__rxHeld().includes(r))", arg=far,
                               timeout=30000)
    finally:
        holding[0] = False
        page.unroute("**/rx/rounds/**")


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
def test_switches_asked_while_earlier_ones_are_out_each_reach_the_server_and_the_last_wins(page):
    """On a loaded machine a person types a round, then another before the first's answer is back, or presses
    "next" twice: each switch is sent at once with its own value, and the page ends on the last one asked for once
    the answers land in order. (With Gradio's "always_last" the second jump was sent only after the first's answer,
    with the slider's value read then, which that answer had set back: the typed round was lost; with "once" the
    second "next" was dropped.)"""
    path = next((p for p in EXAMPLES if p.stem.startswith("math")), EXAMPLES[0])
    start = show_example(page, path.stem)
    n = len(json.loads(path.read_text())["rounds"])
    a, b = (start + 5) % (n - 2), (start + 9) % (n - 2)
    page.wait_for_function("t => t.every(r => window.__rxHeld().includes(r))", arg=[a, b, b + 1, b + 2],
                           timeout=30000)
    held = []  # Gradio's calls, answered in the order they were sent once both are out
    page.route("**/gradio_api/**", lambda r: held.append(r) if r.request.method == "POST" else r.continue_())
    try:
        box = page.locator("#rx-slider input[type=number]")
        for r in (a, b):
            with page.expect_request(lambda q: "/gradio_api/" in q.url and q.method == "POST", timeout=10000):
                box.fill(str(r))
        page.wait_for_function("b => (document.querySelector('#rx-caption')?.innerText || '').includes('Round ' + b + ' (')",
                               arg=b, timeout=10000)
        _both_routed(page, held)
        sent = [_first_value(r.request.post_data) for r in held]
    finally:
        for r in held:   # one at a time, each answered before the next leaves (as below)
            with page.expect_response(lambda q, req=r.request: q.request == req, timeout=20000):
                r.continue_()
        held.clear()
    assert a in sent and b in sent[sent.index(a):], f"calls out for typed jumps to {a} then {b}: {sent}"
    page.wait_for_function(JS_ROUND_SETTLED, arg=b, timeout=20000)
    try:
        for _ in range(2):
            with page.expect_request(lambda q: "/gradio_api/" in q.url and q.method == "POST", timeout=10000):
                page.click("#rx-next")
        _both_routed(page, held)
        sent = len(held)
    finally:
        # let through one at a time, each answered before the next leaves (released together, two answers built in
        # parallel can land in either order: "in order" is what this checks)
        for r in held:
            with page.expect_response(lambda q, req=r.request: q.request == req, timeout=20000):
                r.continue_()
        page.unroute("**/gradio_api/**")
    assert sent >= 2, f"{sent} calls out for two clicks on next"
    page.wait_for_function(JS_ROUND_SETTLED, arg=b + 2, timeout=20000)


def _both_routed(page, held: list) -> None:
    """Until the route handler holds two calls, or 10 s: a request's event can reach the test before its route
    handler has run (under load the second click's call was sent, yet not in `held` when counted); the caller's
    assertion then names what was held."""
    try:
        wait_handled(page, lambda: len(held) >= 2, 10, "two calls held")
    except AssertionError:
        pass


def _first_value(post_data: str | None):
    """The first input of a Gradio call's body (a round switch's: the round asked for), None where it has none."""
    try:
        data = json.loads(post_data or "")["data"]
        return int(data[0]) if data and isinstance(data[0], (int, float)) else None
    except (ValueError, KeyError, TypeError):
        return None

"""The Race tab in a real browser (Debian's Chromium via playwright, 1280x720) against `python -m app` on the
embedded model: plain decoding against two speculative modes, as a person giving the demo sees it. The lanes'
text must grow while they decode (every intermediate state is recorded in the page by a MutationObserver), the
final texts match plain decoding's and the badge says so, "×N" is the lanes' shown tokens/s ratio, a lane opens
in the round inspector, and the exported HTML replays from file:// with every request refused.
Screenshots: test-output/race-*.png."""
from __future__ import annotations

import re

import pytest

from app_fixtures import OUTPUT, REPO, chromium_or_skip, launched_app
from helpers import wait_until

pytest.importorskip("playwright.sync_api")

LANES = ["ar", "ddtree-auto", "reanchor-tree-auto"]
TOKENS = 28
PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively."

# Every change of the race view, recorded in the page: (ms, phase, replay state, {lane: tokens shown}).
JS_RECORD = """() => {
  window.__rxLog = [];
  const root = document.querySelector('#rx-race');
  const snap = () => {
    const r = root.querySelector('.rx-race-root') || root;
    const lanes = {};
    root.querySelectorAll('.rx-lane').forEach((l) => { lanes[l.dataset.lane] = parseInt(l.dataset.tokens || '0'); });
    const entry = [performance.now(), r ? r.dataset.phase || '' : '', r ? r.dataset.replay || '' : '', lanes];
    const prev = window.__rxLog[window.__rxLog.length - 1];
    if (!prev || JSON.stringify(prev.slice(1)) !== JSON.stringify(entry.slice(1))) window.__rxLog.push(entry);
  };
  new MutationObserver(snap).observe(root, {subtree: true, childList: true, attributes: true, characterData: true});
  snap();
}"""
JS_LANES = """() => [...document.querySelectorAll('#race .rx-lane, #rx-race .rx-lane')].map((l) => ({
  label: l.dataset.lane, text: l.querySelector('.rx-ltext').innerText,
  count: l.querySelector('.rx-lcount').innerText, badge: l.querySelector('.rx-lbadge').innerText,
  status: l.querySelector('.rx-lstat').innerText,
  badgeLines: Math.round(l.querySelector('.rx-lbadge').getBoundingClientRect().height /
    parseFloat(getComputedStyle(l.querySelector('.rx-lbadge')).lineHeight || '20')),
  shift: l.querySelector('.rx-lshift') ? {text: l.querySelector('.rx-lshift').innerText,
    box: l.querySelector('.rx-lshift').getBoundingClientRect().toJSON(),
    font: parseFloat(getComputedStyle(l.querySelector('.rx-lshift')).fontSize),
    coloured: [...l.querySelectorAll('.rx-ltext span')].filter((s) => /(^| )rx-s\\d/.test(s.className)).length} : null,
  box: l.getBoundingClientRect().toJSON(), font: parseFloat(getComputedStyle(l.querySelector('.rx-ltext')).fontSize)}))"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    chromium_or_skip()
    from engine.models.embedded import cache_dir, gguf_path

    try:
        gguf_path(), cache_dir()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"the embedded model is not installed: {e}")
    # lanes on a loaded machine can outlast the default per-run limit (60 s): a cut lane would not be the same text;
    # a calibration race of 15 s (45 by default) still measures each lane over rounds (3 s a group: ~30 tokens of
    # plain decoding), its preset the same (float32 ddtree-auto at ~1.7x)
    yield from launched_app(["--run-seconds", "900", "--calibration-seconds", "15"], tmp_path_factory)


def _wait_profiled(app, timeout: float = 1200.0) -> str:
    from gradio_client import Client

    client = None

    def profiled() -> str | None:
        nonlocal client
        try:   # the server answers slowly while the model de-quantises (GIL-bound) on a loaded machine
            client = client or Client(app.url, verbose=False)
            status = client.predict(api_name="/model_status")[0]
        except Exception:  # noqa: BLE001 (httpx timeouts)
            return None
        return status if "machine measured" in status or "failed" in status else None

    return wait_until(profiled, timeout, lambda: f"a profile:\n{app.log()[-2000:]}", every=1.0)


def _load() -> float:
    """The 1-minute load average (other work on the machine)."""
    return float(open("/proc/loadavg").read().split()[0])


def _grew(log: list, label: str, phase: str, final: int) -> list[int]:
    """The distinct token counts lane `label` showed during `phase`, strictly between none and all."""
    return sorted({e[3].get(label, 0) for e in log if e[1] == phase and 0 < e[3].get(label, 0) < final})


def _counts(lane: dict) -> dict:
    """tokens, passes and tokens/s as the lane's counter line shows them."""
    m = re.search(r"tokens (\d+) · passes (\d+) · tokens/s ([\d.]+)", lane["count"])
    assert m, lane["count"]
    return {"tokens": int(m[1]), "passes": int(m[2]), "tps": float(m[3])}


def test_race_of_plain_decoding_and_two_speculative_modes(app, browser, tmp_path):
    status = _wait_profiled(app)
    assert "machine measured" in status, status
    print("\n" + status)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app.url)
    page.wait_for_selector("#rx-run", timeout=120000)
    if list((REPO / "assets" / "traces").glob("*.json")):  # the page's load event shows an example trace first
        page.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('example')",
                               timeout=120000)
    page.get_by_role("tab", name="Race").click(timeout=120000)
    page.wait_for_selector("#rx-race-run", state="visible")
    page.wait_for_function("() => /Demo preset: .*ran fastest here/.test("
                           "document.querySelector('#rx-race-preset')?.innerText || '')", timeout=30000)
    # the note: one sentence naming what the calibration race measured fastest; its figures behind a disclosure
    note = page.inner_text("#rx-race-preset")
    chosen = re.search(r"Demo preset: ar, [\w-]+(, [\w-]+)?, 64 tokens: ([\w-]+) with the (\S+) drafter in "
                       r"(float32|bfloat16) \((exact|not exact)\) ran fastest here: ([\d.]+)× float32 plain decoding",
                       note)
    assert chosen and "|" not in note.split("calibration race's figures")[0], note
    print(f"\npreset: {note.splitlines()[0]}")
    assert not page.locator("#rx-race-preset table").is_visible()
    page.locator("#rx-race-preset summary").click()
    rows = page.locator("#rx-race-preset table tr")
    rows.first.wait_for(state="visible")
    assert rows.count() >= 4, rows.count()   # the header, then a row a candidate: both precisions, every drafter
    figures = page.inner_text("#rx-race-preset table")
    assert "bfloat16" in figures and "float32" in figures, figures
    page.locator("#rx-race-preset summary").click()
    precision = page.evaluate("() => [...document.querySelectorAll('#rx-race-dtype label')].map((l) => "
                              "[l.innerText.trim(), l.querySelector('input').checked, l.getBoundingClientRect().right])")
    assert [p[:2] for p in precision] == [["float32 (exact, token for token)", True],
                                          ["bfloat16 (faster trees on a CPU, not exact)", False]], precision
    assert all(0 < p[2] <= 1280 for p in precision), precision
    page.fill("#rx-race-prompt textarea", PROMPT)
    page.fill("#rx-race-max-new input", str(TOKENS))
    checked = page.evaluate("() => [...document.querySelectorAll('#rx-race-lanes input[type=checkbox]')]"
                            ".filter((i) => i.checked).map((i) => i.closest('label').innerText.trim())")
    assert checked == LANES, checked   # the preset's lanes
    page.evaluate(JS_RECORD)
    load_before = _load()
    t_click = page.evaluate("performance.now()")
    page.click("#rx-race-run")
    page.wait_for_function("() => document.querySelector('#rx-race .rx-race-root')?.dataset.phase === 'live'",
                           timeout=120000)
    page.wait_for_function("() => parseInt(document.querySelector('#rx-race .rx-lane')?.dataset.tokens || '0') > 3",
                           timeout=300000)
    OUTPUT.mkdir(exist_ok=True)
    page.wait_for_function("() => { const t = document.querySelector('#rx-race .rx-ltext').getBoundingClientRect();"
                           " return t.top >= 0 && t.bottom <= 720; }", timeout=10000)  # Race scrolled to the lanes
    page.screenshot(path=str(OUTPUT / "race-1280-live.png"))
    page.wait_for_function("() => document.querySelector('#rx-race .rx-race-root')?.dataset.phase === 'done'",
                           timeout=600000)
    page.select_option("#rx-race .rx-rspeed", "4")   # the speed control, as a presenter in a hurry uses it
    page.screenshot(path=str(OUTPUT / "race-1280-replaying.png"))
    page.wait_for_function("() => document.querySelector('#rx-race .rx-race-root')?.dataset.replay === 'ended'",
                           timeout=120000)
    OUTPUT.mkdir(exist_ok=True)
    page.locator("#rx-race").scroll_into_view_if_needed()
    page.screenshot(path=str(OUTPUT / "race-1280.png"))
    log = page.evaluate("window.__rxLog")
    lanes = page.evaluate(JS_LANES)
    assert [ln["label"] for ln in lanes] == LANES
    counts = {ln["label"]: _counts(ln) for ln in lanes}
    for label in LANES:
        final = counts[label]["tokens"]
        assert final == TOKENS or label != "ar", counts
        live, replay = _grew(log, label, "live", final), _grew(log, label, "done", final)
        assert len(live) >= 2, f"{label}: the text did not grow while decoding: {live}"
        assert len(replay) >= 2, f"{label}: the replay did not grow the text: {replay}"
    # what a person reads: the same text in every lane, the badge saying so, x N = the shown tokens/s ratio
    ref = lanes[0]
    for ln in lanes[1:]:
        assert ln["text"] == ref["text"] and ln["text"].strip(), (ln["label"], ln["text"][:80], ref["text"][:80])
        assert "same text as plain decoding ✓" in ln["badge"] and ln["badgeLines"] == 1, ln
        n = float(re.search(r"×([\d.]+) · same text", ln["badge"])[1])
        ratio = counts[ln["label"]]["tps"] / counts["ar"]["tps"]
        assert abs(n - ratio) <= 0.006 + 0.01 * ratio, (ln["label"], n, ratio)
        assert counts[ln["label"]]["passes"] < counts["ar"]["passes"], counts
    # legible at 1280x720: lanes side by side within the width, text at 12 px or more
    for ln in lanes:
        assert ln["box"]["x"] >= 0 and ln["box"]["x"] + ln["box"]["width"] <= 1280, ln["box"]
        assert ln["font"] >= 12
    # interleaved: two lanes that took the same passes show the same ×N within 5% (they shared the machine's load)
    # (the goal is for a quiet machine: on this shared 2-core machine at load 15-20, 9-17 rounds a lane left
    # 10-24% between them; the figure is printed there, asserted where the race ran at a 1-minute load under 2)
    x = {ln["label"]: float(re.search(r"×([\d.]+)", ln["badge"])[1]) for ln in lanes[1:]}
    quiet = max(load_before, _load()) < 2.0
    if counts["ddtree-auto"]["passes"] == counts["reanchor-tree-auto"]["passes"]:
        gap = abs(x["ddtree-auto"] / x["reanchor-tree-auto"] - 1)
        print(f"\nsame passes ({counts['ddtree-auto']['passes']}): ×N {gap:.1%} apart, load {load_before} -> {_load()}")
        assert gap <= 0.05 or not quiet, (x, counts)
    # ReAnchor visible in its lane: the shifted-block tokens counted, as many as its text colours, and what the
    # shifted blocks added over the tree alone; read where a person reads it
    shift = next(ln for ln in lanes if ln["label"] == "reanchor-tree-auto")["shift"]
    k = int(re.search(r"tokens from shifted blocks: (\d+)", shift["text"])[1])
    assert k == shift["coloured"], shift
    # what the shifted blocks added over the tree alone, or that the budget drafted none (then the lane is that tree)
    assert re.search(r"ReAnchor (added -?\d+ tokens? over|: \d+ tokens? fewer than) the tree alone", shift["text"]) \
        or "no shifted block drafted: the budget found none worth its cost here" in shift["text"], shift
    assert 0 <= shift["box"]["y"] and shift["box"]["y"] + shift["box"]["height"] <= 720 and shift["font"] >= 12, shift
    assert next(ln for ln in lanes if ln["label"] == "ddtree-auto")["shift"] is None
    print(f"\nxN {x}; reanchor lane: {shift['text']}")
    # the first auto lane decoded at once: the profile was measured at load, before the race (app log order)
    text = app.log()
    assert text.index("hardware profile measured") < text.index("race started")
    took = float(re.search(r"calibration race in ([\d.]+) s", text)[1])   # --calibration-seconds 15 held
    assert took < 15 + 10, took   # (a lane's round in progress ends before its group stops)
    assert "measuring this machine" not in text[text.index("race started"):]
    print(f"\nrace: click to live view {log[1][0] - t_click:.0f} ms; " +
          ", ".join(f"{k} {v['tps']} tok/s, {v['passes']} passes" for k, v in counts.items()))

    # the export: a self-contained file that replays offline
    with page.expect_download() as dl:
        page.click("#rx-race-export")
    path = tmp_path / "race.html"
    dl.value.save_as(path)
    html = path.read_text(encoding="utf-8")
    assert "cdn" not in html.lower().split("<script>")[0] and "src=" not in html.split("id='race-data'")[0][-400:]
    ctx = browser.new_context(viewport={"width": 1280, "height": 720}, offline=True)
    requests = []
    ctx.route("**/*", lambda r: (requests.append(r.request.url), r.continue_() if r.request.url.startswith("file:")
                                 else r.abort()))
    off = ctx.new_page()
    off.goto(path.as_uri())
    off.evaluate(JS_RECORD.replace("#rx-race", "#race"))
    off.select_option("#race .rx-rspeed", "4")
    off.wait_for_function("() => document.querySelector('#race')?.dataset.replay === 'ended'", timeout=120000)
    off.screenshot(path=str(OUTPUT / "race-export-1280.png"))
    off_log = off.evaluate("window.__rxLog")
    off_lanes = off.evaluate(JS_LANES)
    assert [ln["text"] for ln in off_lanes] == [ln["text"] for ln in lanes]
    for label in LANES:
        assert len(_grew(off_log, label, "done", counts[label]["tokens"])) >= 2, (label, off_log[-3:])
    assert off.evaluate("typeof window.Plotly") == "object" and off.locator("#race .main-svg").count() > 0
    # a PNG of the figure at slide resolution, from the figure's own camera button (Plotly in the browser)
    off.hover("#race .rx-rfig .main-svg")
    with off.expect_download() as png:
        off.locator("#race .modebar-btn[data-title^='Download plot']").click()
    head = open(png.value.path(), "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")) == (1920, 1080)
    # its text at 24 px or more: the figure's smallest font times the scale the camera draws it at
    px = off.evaluate("() => { const g = document.querySelector('#race .rx-rfig'); const o = g._context"
                      ".toImageButtonOptions; const L = g._fullLayout; return [o.width * o.scale, o.scale * "
                      "Math.min(L.xaxis.tickfont.size, L.yaxis.tickfont.size, L.legend.font.size, L.font.size)]; }")
    assert px[0] == 1920 and px[1] >= 24, px
    assert all(u.startswith("file:") for u in requests), requests
    ctx.close()

    # a lane opens in the round inspector (the Explore tab), through the trace-loading path
    page.locator(".rx-lane[data-lane='ddtree-auto'] .rx-linspect").click()
    # its status names the lane as the race did: mode with -auto, precision
    page.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '')"
                           ".includes('race lane ddtree-auto in float32')", timeout=60000)
    page.wait_for_function("() => { const r = document.querySelector('#rx-round-plot')?.getBoundingClientRect();"
                           " return r && r.top >= 0 && r.top < 720 && r.height > 100; }", timeout=20000)  # in view
    page.screenshot(path=str(OUTPUT / "race-inspect-1280.png"))
    assert not errors, errors

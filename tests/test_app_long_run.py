"""A 2,000-token run in the app through headless Chromium (tiny Qwen3 target, context raised to 4,096).

Functional checks: the run finishes, the text view holds every token, navigation, the slider and token
clicks still work, no console errors. Figures (server RSS, page JS heap, DOM size, streamed bytes, long
tasks, round-switch times early vs after the long run) go to test-output/long_run.json; none is asserted.
"""
from __future__ import annotations

import json
import re
import statistics
import threading
import time

import pytest

from app_fixtures import JS_TIMED_NEXT, LONG_PROMPT, OUTPUT, Watched, chromium_or_skip, launched_tiny_app

pytest.importorskip("playwright.sync_api")  # the browser fixture (conftest.py) drives it

N_TOKENS = 2000

# Text-view updates, long tasks (main thread busy > 50 ms) and the worst timer lag while the run streams.
JS_WATCH = """() => {
    window.__rx = {textUpdates: 0, longTasks: [], maxLagMs: 0};
    new MutationObserver(() => window.__rx.textUpdates++).observe(
        document.querySelector('#rx-text-box'), {subtree: true, childList: true, characterData: true});
    new PerformanceObserver(l => l.getEntries().forEach(e => window.__rx.longTasks.push(e.duration)))
        .observe({type: 'longtask'});
    let last = performance.now();
    window.__rxLag = setInterval(() => {
        const now = performance.now();
        window.__rx.maxLagMs = Math.max(window.__rx.maxLagMs, now - last - 50);
        last = now;
    }, 50);
}"""


def proc_memory(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM (peak) of the app process, MiB."""
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


class PageProbe:
    """Chromium DevTools figures of one page: JS heap after a GC, DOM nodes, main-thread time, bytes of the
    run's event stream."""

    def __init__(self, page):
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Performance.enable")
        self.cdp.send("Network.enable")
        self.stream_ids: set[str] = set()
        self.stream_bytes = 0
        self.stream_chunks = 0
        self.cdp.on("Network.requestWillBeSent", self._request)
        self.cdp.on("Network.dataReceived", self._data)

    def _request(self, ev) -> None:
        if "/queue/data" in ev["request"]["url"]:
            self.stream_ids.add(ev["requestId"])

    def _data(self, ev) -> None:
        if ev["requestId"] in self.stream_ids:
            self.stream_bytes += ev["dataLength"]
            self.stream_chunks += 1

    def metrics(self, gc: bool = True) -> dict[str, float]:
        if gc:
            self.cdp.send("HeapProfiler.collectGarbage")
        m = {x["name"]: x["value"] for x in self.cdp.send("Performance.getMetrics")["metrics"]}
        return {"js_heap_mib": round(m["JSHeapUsedSize"] / 2**20, 1), "dom_nodes": int(m["Nodes"]),
                "script_s": round(m["ScriptDuration"], 2), "layout_s": round(m["LayoutDuration"], 2),
                "style_s": round(m["RecalcStyleDuration"], 2), "task_s": round(m["TaskDuration"], 2)}


def switch_times(w: Watched, start: int, count: int) -> list[float]:
    """ms per #rx-next click from round `start` (already shown) to the next round's figure drawn. Each click waits
    for the server's answer to the last (Watched.wait_round): a click sent while that call is out is dropped."""
    out = []
    for i in range(start + 1, start + count + 1):
        out.append(round(w.page.evaluate(JS_TIMED_NEXT, i), 1))
        w.wait_round(i)
    return out


def go_to_round(w: Watched, i: int) -> None:
    """Through the slider's number box (typed, then Enter), as a person jumps deep into a long run."""
    box = w.page.locator("#rx-slider input[type=number]")
    box.fill(str(i))
    box.press("Enter")
    w.wait_caption(f"Round {i} ")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    chromium_or_skip()
    # a run of thousands of tokens outlasts the app's default per-run time limit (60 s)
    yield from launched_tiny_app(tmp_path_factory, context=4096, extra=("--run-seconds", "1800"))


def test_long_run_in_browser(app, browser):
    OUTPUT.mkdir(exist_ok=True)
    report: dict = {"tokens": N_TOKENS}
    w = Watched(browser, app.url)
    pg = w.page
    probe = PageProbe(pg)
    w.wait_model(app)

    # early: a short run, round switches timed on it
    w.run(LONG_PROMPT, 48)
    w.wait_done()
    pg.click("#rx-first")
    w.wait_caption("Round 0 ")
    report["switch_ms_short_run"] = switch_times(w, 0, 6)
    report["page_before"] = probe.metrics()
    report["server_before_mib"] = proc_memory(app.proc.pid)

    # the long run, sampling the server's RSS while it streams
    rss: list[float] = []
    ended = threading.Event()

    def sample() -> None:   # every 0.5 s until the run has ended
        rss.append(proc_memory(app.proc.pid)["VmRSS"])
        while not ended.wait(0.5):
            rss.append(proc_memory(app.proc.pid)["VmRSS"])

    sampler = threading.Thread(target=sample, daemon=True)
    pg.evaluate(JS_WATCH)
    bytes0, chunks0 = probe.stream_bytes, probe.stream_chunks
    page0 = probe.metrics(gc=False)
    sampler.start()
    t0 = time.monotonic()
    w.run(LONG_PROMPT, N_TOKENS)
    w.wait_running(0)  # the short run's "done" is still shown until the first update
    w.wait_done(timeout=600000)
    report["run_wall_s"] = round(time.monotonic() - t0, 1)
    ended.set()
    sampler.join()
    page1 = probe.metrics(gc=False)
    watch = pg.evaluate("() => { clearInterval(window.__rxLag); return window.__rx; }")
    report["during_run"] = {
        "text_updates": watch["textUpdates"], "stream_bytes": probe.stream_bytes - bytes0,
        "stream_chunks": probe.stream_chunks - chunks0,
        "long_tasks": len(watch["longTasks"]), "long_task_ms_total": round(sum(watch["longTasks"])),
        "long_task_ms_max": round(max(watch["longTasks"], default=0)),
        "max_timer_lag_ms": round(watch["maxLagMs"]),
        "main_thread_s": {k: round(page1[k] - page0[k], 2) for k in ("script_s", "layout_s", "style_s",
                                                                     "task_s")},
        "server_rss_mib_samples_max": max(rss, default=None)}
    metrics = pg.inner_text("#rx-metrics")
    assert re.search(r"\bdone\b", metrics), metrics
    assert re.search(rf"new tokens\s*{N_TOKENS}\b", metrics), metrics
    report["server_after_mib"] = proc_memory(app.proc.pid)
    report["page_after"] = probe.metrics()
    report["text_view_chars"] = pg.evaluate("() => document.querySelector('#rx-text-box').innerHTML.length")

    # the text view holds every generated token, each tagged with its round
    spans = pg.locator("#rx-text-box span[data-r]")
    assert spans.count() == N_TOKENS
    m = re.search(r"rounds 0–(\d+)", w.caption())
    assert m, w.caption()
    last = int(m.group(1))
    report["rounds"] = last + 1
    assert int(spans.last.get_attribute("data-r")) == last

    # navigation after the long run: first / last, the slider's arrow key and number box
    pg.click("#rx-first")
    w.wait_caption("Round 0 ")
    report["switch_ms_long_run_early"] = switch_times(w, 0, 6)
    pg.click("#rx-last")
    w.wait_caption(f"Round {last} ")
    pg.locator("#rx-slider input[type=range]").focus()
    pg.keyboard.press("ArrowLeft")
    w.wait_caption(f"Round {last - 1} ")
    go_to_round(w, last - 8)
    report["switch_ms_long_run_late"] = switch_times(w, last - 8, 6)

    # a token late in the text opens its round
    late = spans.nth(N_TOKENS - 5)
    r = int(late.get_attribute("data-r"))
    pg.click("#rx-first")
    w.wait_caption("Round 0 ")
    late.click()
    w.wait_caption(f"Round {r} ")
    assert r > last // 2

    assert not w.errors, w.errors
    assert not w.local_only(app.port), w.local_only(app.port)
    w.page.close()

    for key in ("switch_ms_short_run", "switch_ms_long_run_early", "switch_ms_long_run_late"):
        report[key + "_median"] = statistics.median(report[key])
    (OUTPUT / "long_run.json").write_text(json.dumps(report, indent=1))
    print("long run:", json.dumps(report, indent=1))


def test_text_view_tail_keeps_the_last_tokens():
    """render.text_view(tail=n): the last n token spans with their real rounds and indices, and a marker
    counting the rest; without tail (or a larger one) the whole view, unchanged."""
    from app import render
    from app.tokentext import trace_pieces
    from app_fixtures import real_trace

    t = real_trace("qwen3", "reanchor", "earliest", LONG_PROMPT, 96)
    args = (*trace_pieces(t), t["rounds"])
    full = render.text_view(*args)
    assert render.text_view(*args, tail=10_000) == full
    spans = re.findall(r"<span class='[^']*' data-r='-?\d+' data-k='\d+' title='[^']*'>.*?</span>", full, flags=re.S)
    assert len(spans) == len(t["output_ids"])
    cut = render.text_view(*args, tail=20)
    assert f"[… {len(spans) - 20} earlier tokens]" in cut
    assert re.findall(r"<span class='[^']*' data-r=.*?</span>", cut, flags=re.S)[-20:] == spans[-20:]
    assert cut.count("data-k=") == 20

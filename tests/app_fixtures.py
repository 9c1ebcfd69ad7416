"""Shared helpers for the app tests: real traces from tiny random models, a launched app, Chromium.

Nothing here is a mock: traces come from the engine running tiny random Llama/Qwen3 models
(tests/tiny.py), and the app is `python -m app` in a subprocess on a free port.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from functools import lru_cache
from html import unescape
from pathlib import Path

import pytest

from helpers import poll_until, wait_until

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OUTPUT = REPO / "test-output"

# Characters and tags that must never reach the page or a Plotly label unescaped.
XSS_TOKENS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<b>bold</b>", "<br>",
              "<a href='javascript:alert(1)'>x</a>", "&lt;", "&amp;", "\"'", "$x^2$", "%{x}",
              "<span style='color:red'>", "</div><div>", "<sup>1</sup>", "\n", " ", "\t"]

# (mode, rule) runs covering every assembly branch.
CONFIGS = [("reanchor", "earliest"), ("reanchor", "all"), ("shifted-fixed", "earliest"),
           ("reanchor", "latest"), ("reanchor", "random"), ("in-block", "earliest"),
           ("extension", "earliest"), ("dflash", "earliest"), ("ar", "earliest"), ("ddtree", "earliest"),
           ("reanchor-tree", "earliest")]
PROMPTS = ["abc dea?", "hi, j.", "a b c d e f g"]


@lru_cache(maxsize=None)
def tiny_engine(kind: str = "llama", seed: int = 0):
    sys.path.insert(0, str(REPO / "tests"))
    from engine.decode import Engine
    from tiny import tiny_models

    return Engine(tiny_models(kind, seed))


@lru_cache(maxsize=None)
def real_trace(kind: str = "llama", mode: str = "reanchor", rule: str = "earliest", prompt: str = PROMPTS[0],
               max_new_tokens: int = 48, seed: int = 0, temperature: float = 0.0) -> dict:
    """A whole trace recorded by the engine over tiny random models (cached per test session)."""
    from engine.decode import DecodeConfig

    eng = tiny_engine(kind, 0)
    return eng.generate(prompt, DecodeConfig(mode=mode, rule=rule, temperature=temperature, seed=seed,
                                             max_new_tokens=max_new_tokens))


@lru_cache(maxsize=None)
def budget_trace(mode: str = "reanchor", max_shifted: str | None = "auto", max_trie_nodes: str | None = "auto",
                 max_new_tokens: int = 24) -> dict:
    """A T=0 trace of a run with an auto budget: every round records the budget's choice ("budget")."""
    from engine.decode import DecodeConfig
    from engine.decode.cost import budget_for

    eng = tiny_engine("llama", 0)
    cfg = DecodeConfig(mode=mode, max_new_tokens=max_new_tokens, max_shifted=max_shifted,
                       max_trie_nodes=max_trie_nodes)
    return eng.generate("hi, j.", cfg, budget_for(eng, cfg))


@lru_cache(maxsize=None)
def stop_cut_trace(mode: str = "reanchor", rule: str = "earliest") -> dict:
    """A T=0 trace that ends on a stop token mid-round: the tiny Qwen3 (seed 2, blocks of 4, sharpened
    drafts) accepts its end of turn as a draft in the last round, and the stop drops the bonus."""
    sys.path.insert(0, str(REPO / "tests"))
    from engine.decode import DecodeConfig, Engine
    from tiny import tiny_models

    eng = Engine(tiny_models("qwen3", 2, block_size=4, sharpen=3.0))
    t = eng.generate("hi, j.", DecodeConfig(mode=mode, rule=rule, max_new_tokens=64))
    last = t["rounds"][-1]
    assert last["new_tokens"][-1] in eng.stop_ids and len(last["new_tokens"]) < last["accepted"] + 1
    return t


def all_real_traces() -> list[dict]:
    """Every (mode, rule) over two tiny targets; these prompts give rounds with shifted gains."""
    out = []
    for kind, prompt, temperature in (("llama", "hi, j.", 0.0), ("qwen3", "ab. ab. ab.", 1.0)):
        for mode, rule in CONFIGS:
            out.append(real_trace(kind, mode, rule, prompt, 48, 0, temperature))
    out.append(real_trace("llama", "reanchor", "earliest", PROMPTS[0], 40, 3, 1.0))
    return out


def real_rounds(traces: list[dict]):
    """(trace, round) for every round of `traces`."""
    return ((t, r) for t in traces for r in t["rounds"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_tiny_folders(root: Path, kind: str = "qwen3", context: int | None = None) -> tuple[Path, Path]:
    """Target and drafter folders as a user passes them (--target/--drafter). On the tiny Qwen3 target
    "a b c d e f g" runs to max_new_tokens (no end of turn), which the Stop tests need. `context` raises
    max_position_embeddings (512) for long runs; RoPE positions need no weights, so the models are the same."""
    sys.path.insert(0, str(REPO / "tests"))
    from tiny import save_tiny

    target, drafter = save_tiny(Path(root), kind, 0)
    if context:
        for folder in (target, drafter):
            cfg = folder / "config.json"
            cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_position_embeddings": context},
                                      indent=2))
    return target, drafter


class AppProcess:
    """`python -m app ...` in a subprocess; its log goes to a file the tests can read."""

    def __init__(self, args: list[str], log_path: Path, launcher: list[str] | None = None,
                 env: dict[str, str] | None = None):
        """launcher replaces `python -m app` (e.g. tests/netaudit.py's command line); env adds variables."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = Path(log_path)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([*(launcher or [PYTHON, "-m", "app"]), "--port", str(self.port), *args],
                                     cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _serves(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"app exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(self.url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_up(self, timeout: float = 120.0) -> None:
        wait_until(self._serves, timeout, lambda: f"the app up:\n{self.log()[-3000:]}", every=0.3)

    def wait_model(self, client, timeout: float = 120.0) -> str:
        def loaded() -> str | None:
            status = client.predict(api_name="/model_status")[0]
            if "failed" in status:
                raise RuntimeError(status)
            return status if status.startswith("ready") else None

        return wait_until(loaded, timeout, "the model loaded", every=0.5)

    def wait_log(self, text: str, timeout: float = 30.0, count: int = 1) -> bool:
        return bool(poll_until(lambda: self.log().count(text) >= count, timeout, every=0.2))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def launched_app(args: list[str], tmp_path_factory, wait_model: bool = False, env: dict[str, str] | None = None):
    """Yields `python -m app ARGS` once it serves (and, with wait_model, its model is loaded): a module
    fixture's body. `env` adds environment variables."""
    proc = AppProcess(args, tmp_path_factory.mktemp("applog") / "app.log", env=env)
    try:
        proc.wait_up()
        if wait_model:
            from gradio_client import Client

            proc.wait_model(Client(proc.url, verbose=False))
        yield proc
    finally:
        proc.stop()


def launched_tiny_app(tmp_path_factory, context: int | None = None, extra: tuple[str, ...] = ()):
    """Yields `python -m app` serving the tiny Qwen3 target and drafter (a module fixture's body), its folders as
    `.dirs`. Its Race preset's calibration race gets 1 s (45 by default): no test of a tiny app reads that preset
    (test_race does, in the process), and its 64-token lanes took 2-7 s of a core beside every module's tests."""
    target, drafter = save_tiny_folders(tmp_path_factory.mktemp("tiny"), context=context)
    for proc in launched_app(["--target", str(target), "--drafter", str(drafter), "--calibration-seconds", "1",
                              *extra], tmp_path_factory):
        proc.dirs = (target, drafter)
        yield proc


def wait_text(pg, selector: str, pattern: str, timeout: float = 30000) -> None:
    """Until the text a person reads in `selector` matches the regular expression `pattern` (JavaScript's RegExp:
    re.escape a plain text)."""
    pg.wait_for_function("([s, p]) => new RegExp(p).test(document.querySelector(s)?.innerText || '')",
                         arg=[selector, pattern], timeout=timeout)


def compare_with_dflash(pg) -> None:
    """Open Compare and run its default comparison (dflash) of the trace shown, until its metrics say so."""
    pg.get_by_text("Compare: a second run").click()
    # its first open loads Gradio's own plotly.js for the panel's gr.Plot figures: a long task (0.45 s on an idle
    # machine, 12.7 s in a 12x CPU-throttled page, where the click's 30 s ran out). Ready once they are drawn.
    pg.wait_for_selector("#rx-cmp-b-cf .js-plotly-plot", timeout=120000)
    pg.click("#rx-cmp-run")
    pg.wait_for_function(
        "() => (document.querySelector('#rx-cmp-metrics')?.innerText || '').includes('comparison: dflash')",
        timeout=60000)


def chromium_or_skip():
    """Skip only when Chromium is absent and CI is not set; in CI a missing browser fails."""
    import pytest

    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but Chromium is missing at {CHROMIUM} (apt-get install -y chromium)")
    pytest.skip("Chromium is not installed (apt-get install -y chromium); set CI to make this an error")


# -- a page in Chromium: helpers the browser tests share ------------------------------------------------

# Round i in view, the server's answer in (Watched.wait_round).
JS_ROUND_SETTLED = """i => (document.querySelector('#rx-caption')?.innerText || '').includes('Round ' + i + ' (')
                         && document.querySelector('#rx-slider input[type=range]')?.value === String(i)"""


def go_to_round(pg, i: int) -> None:
    """Type round i and press Enter, as a person would, until the server's answer is in."""
    box = pg.locator("#rx-slider input[type=number]")
    box.fill(str(i))
    box.press("Enter")
    pg.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)


def show_example(pg, stem: str) -> int:
    """Pick an example trace; the round it opens on, once the server's answer is in."""
    from app import records

    trace = json.loads((REPO / "assets" / "traces" / f"{stem}.json").read_text())
    i = (records.most_instructive(trace["rounds"]) or (0, ""))[0]
    if pg.evaluate("() => document.querySelector('#rx-example-trace input')?.value || ''") == stem:
        # shown already (the page opens on the first one): picking it again would send a call whose answer may land
        # after the checks below, which the page passes already, and undo the test's next step
        go_to_round(pg, i)
        return i
    pg.locator("#rx-example-trace input").click()
    pg.get_by_role("option", name=stem).click()
    pg.wait_for_function("n => (document.querySelector('#rx-example-trace input')?.value || '') === n", arg=stem,
                         timeout=20000)
    # this trace's numbers in the strip, and its opening round in the inspector (not the trace shown before)
    wait_text(pg, "#rx-metrics", f"rounds {len(trace['rounds'])}\\b", 20000)
    pg.wait_for_function(JS_ROUND_SETTLED, arg=i, timeout=20000)
    pg.wait_for_function("() => /most instructive/.test(document.querySelector('#rx-caption')?.innerText || '')",
                         timeout=20000)
    return i


class Watched:
    """A page whose requests, console errors and dialogs are recorded."""

    def __init__(self, browser, url):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1100})
        self.requests, self.errors, self.dialogs = [], [], []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        # which request failed: the console says only "Failed to load resource"
        self.page.on("response", lambda r: self.errors.append(f"HTTP {r.status}: {r.request.method} {r.url}")
                     if r.status >= 400 else None)
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(url)
        self.page.wait_for_selector("#rx-run", timeout=60000)
        if list((REPO / "assets" / "traces").glob("*.json")):  # the page's load event shows an example trace
            self.page.wait_for_function(
                "() => (document.querySelector('#rx-metrics')?.innerText || '').includes('example trace')",
                timeout=60000)

    def caption(self) -> str:
        return self.page.inner_text("#rx-caption")

    def shown(self) -> str:
        """What a timeout names: the caption's start and the slider's two halves."""
        return self.page.evaluate("""() => JSON.stringify({
            caption: (document.querySelector('#rx-caption')?.innerText || '').slice(0, 80),
            range: document.querySelector('#rx-slider input[type=range]')?.value,
            box: document.querySelector('#rx-slider input[type=number]')?.value})""")

    def _wait(self, js: str, arg, timeout: float, what: str) -> None:
        try:
            self.page.wait_for_function(js, arg=arg, timeout=timeout)
        except Exception as e:  # playwright's TimeoutError says only how long it waited
            raise AssertionError(f"{what} not in view after {timeout / 1000:.0f} s; shown: {self.shown()}") from e

    def wait_caption(self, prefix: str, timeout: float = 20000) -> None:
        self._wait("p => (document.querySelector('#rx-caption')?.innerText || '').trim().startsWith(p)",
                   prefix, timeout, f"a caption starting {prefix!r}")

    def wait_round(self, i: int, timeout: float = 20000) -> None:
        """Until round i is in view and the server has answered the switch: the caption names it and the slider,
        which only the server's answer moves (or the slider's own keys), stands at i. The caption alone is not it:
        the page shows a prefetched round at once, and a click sent before the answer is dropped (Gradio runs one
        call per button at a time: trigger_mode "once") or raced by another button's call."""
        self._wait(JS_ROUND_SETTLED, i, timeout, f"round {i}, settled")

    def wait_model(self, app=None) -> None:
        """Until the page's status line says ready; one that says failed, or a timeout, fails at once with what the
        page showed, what the server's status says now and the app's log (`app`: its AppProcess)."""
        try:
            self.page.wait_for_function(
                "() => /ready|failed/.test(document.querySelector('#rx-model-status')?.innerText || '')",
                timeout=120000)
            shown = self.page.inner_text("#rx-model-status")
        except Exception as e:   # noqa: BLE001 (playwright's TimeoutError)
            shown = f"{self.page.inner_text('#rx-model-status')!r} after {type(e).__name__}"
        if "ready" in shown and "failed" not in shown:
            return
        server = log = "?"
        if app is not None:
            from gradio_client import Client

            server, log = Client(app.url, verbose=False).predict(api_name="/model_status")[0], app.log()[-3000:]
        raise AssertionError(f"the model status line shows {shown}; the server says {server!r}; app log:\n{log}")

    def run(self, prompt: str, max_new: int = 40) -> None:
        self.page.fill("#rx-prompt textarea", prompt)
        self.page.fill("#rx-max-new input", str(max_new))
        self.page.click("#rx-run")

    def wait_running(self, min_round: int, timeout: float = 60000) -> None:
        """Until this page's run has streamed round `min_round` (the example trace's spans don't count). A timeout
        names what the page showed instead (a CI rehearsal once timed out here, with nothing else to go on)."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        try:
            self.page.wait_for_function(
                """n => { const m = /running… round (\\d+)/.exec(document.querySelector('#rx-metrics')?.innerText || '');
                          return m && parseInt(m[1]) >= n; }""", arg=min_round, timeout=timeout)
        except PlaywrightTimeout:
            shown = self.page.evaluate("() => [document.querySelector('#rx-metrics')?.innerText, "
                                       "document.querySelector('.toast-body')?.innerText]")
            raise AssertionError(f"no round {min_round} of a run within {timeout / 1000:.0f} s; metrics and toast: "
                                 f"{shown}; errors: {self.errors}") from None

    def wait_done(self, timeout: float = 120000) -> None:
        self.page.wait_for_function(
            "() => /\\b(done|stopped)\\b/.test(document.querySelector('#rx-metrics')?.innerText || '')",
            timeout=timeout)

    def local_only(self, port: int) -> list[str]:
        return [u for u in self.requests
                if not (u.startswith(f"http://127.0.0.1:{port}/") or u.startswith(("data:", "blob:")))]


# Click #rx-next and wait for round i's figure in the page; returns the milliseconds, timed in the page.
JS_TIMED_NEXT = """async (i) => {
    const t0 = performance.now();
    document.querySelector('#rx-next').click();
    await new Promise((done, fail) => {
      const check = () => {
        const title = document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '';
        if (title.startsWith('round ' + i + ' ')) done();
        else if (performance.now() - t0 > 60000) fail(new Error('round ' + i + ' not drawn within 60 s'));
        else requestAnimationFrame(check);
      };
      check();
    });
    return performance.now() - t0;
}"""


# Where round i's bar is in the timeline's plot area (Plotly's drag layer over it takes the clicks): its middle
# along x, half a token up (every round commits at least one token, so the point lies in one of its bars).
JS_BAR_AT = """i => { const l = document.querySelector('#rx-timeline .js-plotly-plot')._fullLayout;
                     return {x: l.xaxis.l2p(i), y: l.yaxis.l2p(0.5)}; }"""


def click_timeline_bar(pg, i: int) -> None:
    """Click round i's bar as a person does: on the plot area at the bar's place, after Playwright's checks that it
    holds still and takes the click there (a forced click on the bar's path skipped them, while a token click's
    smooth scroll to the caption often still moved the page)."""
    pg.locator("#rx-timeline .js-plotly-plot .nsewdrag").first.click(position=pg.evaluate(JS_BAR_AT, i))


# -- the tiny app through gradio_client: what the client tests share ------------------------------------------

LONG_PROMPT = "a b c d e f g"  # runs to max_new_tokens on the tiny target (no end-of-turn)
# outputs of /run, /load_trace (state excluded)
TEXT, METRICS, SLIDER, CAPTION, ROUND_FIG, TIMELINE, EXPORT, ANALYSES, HIST, GAIN = range(10)


@pytest.fixture(scope="module")
def tiny_dirs(tiny_app):
    """The target and drafter folders the shared tiny app serves (conftest.tiny_app)."""
    return tiny_app.dirs


@pytest.fixture(scope="module")
def app(tiny_app):
    """The shared tiny app (conftest.tiny_app), its model loaded."""
    tiny_app.wait_model(client(tiny_app))
    return tiny_app


def client(app):
    """A gradio_client Client of the app."""
    from gradio_client import Client

    return Client(app.url, verbose=False)


def generated_text(text_html: str) -> tuple[list[int], str]:
    """(rounds, text) of the generated-token spans of the text view."""
    spans = re.findall(r"<span class='[^']*' data-r='(-?\d+)' data-k='\d+' title='[^']*'>(.*?)</span>", text_html,
                       flags=re.S)
    return [int(r) for r, _ in spans], "".join(unescape(t) for _, t in spans)


def export_path(app, result) -> str:
    """Download the exported trace over HTTP, as the browser's download button does."""
    value = result[EXPORT]
    path = value.get("value") if isinstance(value, dict) else value
    assert path, f"no exported trace in {value!r}"
    if isinstance(path, dict):
        path = path.get("path") or path.get("url")
    url = path if str(path).startswith("http") else f"{app.url}gradio_api/file={path}"
    with urllib.request.urlopen(url, timeout=30) as r:
        data = r.read()
    out = app.log_path.parent / f"export-{time.monotonic_ns()}.json"
    out.write_bytes(data)
    return str(out)


def wait_outputs(job, n: int, timeout: float = 120.0) -> None:
    def enough() -> bool:
        if len(job.outputs()) >= n:
            return True
        assert not job.done() or len(job.outputs()) >= n, "the run ended before it could be stopped"
        return False

    wait_until(enough, timeout, f"{n} outputs of the job")


# -- in-process app parts over a tiny engine (test_app_round_views, test_app_budget_curve, test_app_session_files;
#    test_race)

class TinyLoader:
    """The part of app.loader.ModelLoader a run needs, over a tiny engine."""
    ready, error, enabled, loading = True, None, True, False

    def __init__(self, engine):
        self.engine = engine

    def engine_for(self, label=None):
        return self.engine


RACE_PROMPT = "a b c d e f g"


@pytest.fixture(scope="module")
def racer():
    """The Race tab over a real tiny engine (Qwen3-shaped), its loader standing in for the app's."""
    import argparse

    from app import loader as L
    from app import race, session
    from engine.decode import Engine
    from tiny import tiny_models

    args = argparse.Namespace(target="tiny", drafter="tiny", device="cpu", dtype="float32", draft_dtype="auto",
                              trust_remote_code=False)
    ld = L.ModelLoader(args)
    ld.engine = Engine(tiny_models("qwen3", 0))
    ld.engines[ld.default_drafter()] = ld.by_dtype["float32"] = ld.engine
    return race.Race(ld, session.Sessions(), callbacks=None)


def race_run(racer, lanes, n=24, st=None, stop_after=None, precision="float32"):
    """(state, outputs, the last race payload) of a race of `lanes` on RACE_PROMPT; `stop_after(payload)`: Stop
    when it holds."""
    from app import session

    st = st if st is not None else session.new_state()
    outs = []
    for out in racer.on_race(RACE_PROMPT, lanes, n, True, precision, st):
        outs.append(out)
        if stop_after and isinstance(out[0], str) and stop_after(json.loads(out[0])):
            racer.on_stop(st)
    return st, outs, json.loads(outs[-1][0])


# -- the largest round a trace may hold, and a page loading a trace (test_app_hostile, test_app_huge_rounds)

def largest_round_trace() -> dict:
    """One round as big as a valid trace allows: blocks of 128 tokens over a 5-token vocabulary, 127
    shifted blocks attached at every matching site (rule "all"), the trie at 8,192 nodes. Built by the
    engine's own proposal(), so it is consistent."""
    import random

    from engine.attach import proposal
    from engine.trace import EXPLORE, SCHEMA, round_record
    from engine.trie import accept

    rng, L = random.Random(0), EXPLORE.block_size
    baseline = [7] + [rng.randrange(5) for _ in range(L - 1)]
    shifted = {d: [rng.randrange(5) for _ in range(L)] for d in range(1, L)}
    paths, info, trie = proposal(baseline, shifted, "reanchor", "all", rng, None, EXPLORE.round_nodes)
    top1 = [rng.randrange(5) for _ in range(len(trie))]
    chain, bonus = accept(trie, lambda n: top1[n])
    new = [trie.tokens[n] for n in chain[1:]] + [bonus]
    rec = round_record(0, 10, L, baseline, shifted, info, paths, trie, chain, bonus, new, top1, 0, 1.0, 1.0, 2.0)
    return {"schema": SCHEMA, "config": {"mode": "reanchor", "rule": "all", "temperature": 0.0},
            "prompt_ids": list(range(10)), "first_token": 7, "output_ids": [7] + new, "text": "",
            "token_texts": {str(i): f"t{i}" for i in range(12)}, "rounds": [rec],
            "stats": {"tau": len(new), "rounds": 1, "new_tokens": 1 + len(new), "wall_s": 1.0, "tokens_per_s": 1.0}}


def opened_page(browser, url: str, height: int = 1000):
    """A page of `browser` (conftest's fixture), 1400 wide, on the app once its load event has answered (it shows
    the example trace): a first step acts on the page a visitor sees, not one still mounting."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    page.goto(url)
    page.wait_for_function("() => (document.querySelector('#rx-metrics')?.innerText || '').includes('example trace')",
                           timeout=60000)
    return page


def page_loading(browser, url: str, trace_file, height: int = 1000):
    """opened_page, with `trace_file` sent to Load trace."""
    page = opened_page(browser, url, height)
    page.set_input_files("input[data-testid='Load trace-upload-button']", str(trace_file))
    return page

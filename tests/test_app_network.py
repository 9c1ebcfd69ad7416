"""The app's server process never reaches past loopback, even with a user's environment that asks for
analytics and hub access. The app runs under tests/netaudit.py, whose audit hook logs every socket connect,
bind, sendto/sendmsg, name lookup, urllib request to a host other than loopback, and every child process.

Real everything: the launched app, headless Chromium, tiny random models, the embedded target.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app_fixtures import CHROMIUM_ARGS, PYTHON, REPO, AppProcess, Watched, chromium_or_skip, save_tiny_folders

gradio_client = pytest.importorskip("gradio_client")
playwright_api = pytest.importorskip("playwright.sync_api")

NETAUDIT = REPO / "tests" / "netaudit.py"
# What a user's shell might hold; app/__main__.py must override every one of these.
USER_ENV = {"GRADIO_ANALYTICS_ENABLED": "True", "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "0", "DO_NOT_TRACK": "0", "GRADIO_SSR_MODE": "True"}


def audited_app(args: list[str], tmp: Path, env: dict[str, str] | None = None) -> tuple[AppProcess, Path]:
    audit = tmp / "netaudit.jsonl"
    proc = AppProcess(args, tmp / "app.log", launcher=[PYTHON, str(NETAUDIT), str(audit), "--"],
                      env={**USER_ENV, **(env or {})})
    return proc, audit


def attempts(audit: Path) -> list[dict]:
    """The logged attempts, after checking the hook was installed and can see the server's sockets."""
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert entries and entries[0]["event"] == "start", "the audit hook was not installed"
    assert not entries[0]["uvloop"], "uvloop is installed: uvicorn would use it and its sockets bypass the hook"
    return entries[1:]


def describe(found: list[dict]) -> str:
    return "\n".join(f"{e['event']} {e.get('target')!r} [{e.get('thread')}] <- {(e.get('stack') or ['?'])[-1]}"
                     for e in found[:20])


def test_hook_logs_outside_attempts_and_only_those(tmp_path):
    """The hook can fail the tests below: outside lookups/connects/datagrams and child processes are logged;
    loopback and unix sockets are not."""
    code = """
import socket, subprocess
def attempt(f, *a, **k):
    try:
        f(*a, **k)
    except OSError:
        pass  # no network, or refused: the attempt is what counts
attempt(socket.getaddrinfo, "example.com", 80)
attempt(socket.create_connection, ("example.com", 80), timeout=2)
attempt(socket.gethostbyname, "example.org")
attempt(socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto, b"x", ("192.0.2.1", 9))
attempt(socket.create_connection, ("127.0.0.1", 9), timeout=2)
attempt(socket.create_connection, ("localhost", 9), timeout=2)
attempt(socket.socket(socket.AF_UNIX).connect, "/nonexistent/netaudit.sock")
subprocess.run(["true"], check=True)
"""
    audit = tmp_path / "netaudit.jsonl"
    out = subprocess.run([PYTHON, str(NETAUDIT), str(audit), "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    found = attempts(audit)
    seen = {(e["event"], json.dumps(e["target"])) for e in found}
    assert ("socket.getaddrinfo", '"example.com"') in seen
    assert ("socket.gethostbyname", '"example.org"') in seen
    assert ("socket.sendto", '["192.0.2.1", 9]') in seen
    assert ("subprocess.Popen", '"true"') in seen
    assert sum(e["target"] == "example.com" for e in found) >= 2  # the lookup and create_connection's
    assert not [e for e in found if "127.0.0.1" in json.dumps(e["target"]) or "localhost" in json.dumps(e["target"])
                or "netaudit.sock" in json.dumps(e["target"])], describe(found)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    return save_tiny_folders(tmp_path_factory.mktemp("tiny"))


def test_app_in_use_stays_on_loopback(tiny_dirs, tmp_path):
    """Page load, model load, a run, round navigation, trace export and load, a comparison run."""
    chromium_or_skip()
    target, drafter = tiny_dirs
    # the Race preset's calibration race runs under the audit too, cut to 1 s (not 45 s of lanes beside the page)
    app, audit = audited_app(["--target", str(target), "--drafter", str(drafter), "--calibration-seconds", "1"],
                             tmp_path)
    try:
        app.wait_up()
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
            w = Watched(browser, app.url)
            pg = w.page
            w.wait_model(app)
            w.run("hi, j.", 24)
            w.wait_done()
            pg.click("#rx-first")
            w.wait_caption("Round 0 ")
            pg.click("#rx-next")
            w.wait_caption("Round 1 ")
            last = int(re.search(r"rounds 0–(\d+)", w.caption()).group(1))
            assert last >= 2
            pg.click("#rx-last")
            w.wait_caption(f"Round {last} ")
            with pg.expect_download(timeout=30000) as dl:
                pg.click("#rx-export")
            exported = tmp_path / "exported.json"
            dl.value.save_as(exported)
            assert len(json.loads(exported.read_text())["rounds"]) == last + 1
            pg.set_input_files("input[data-testid='Load trace-upload-button']", str(exported))
            pg.wait_for_function(
                "() => (document.querySelector('#rx-metrics')?.innerText || '').includes('loaded trace')",
                timeout=30000)
            pg.get_by_text("Compare: a second run").click()
            pg.click("#rx-cmp-run")
            pg.wait_for_function(
                "() => (document.querySelector('#rx-cmp-metrics')?.innerText || '').includes('comparison: dflash')",
                timeout=120000)
            assert not w.errors, w.errors
            assert not w.local_only(app.port), w.local_only(app.port)
            browser.close()
    finally:
        app.stop()
    found = attempts(audit)
    assert not found, "the server reached past loopback:\n" + describe(found)


def _hub_cache(root: Path, folder: Path, repo_id: str) -> Path:
    """An HF cache (HF_HOME) holding `folder` as a downloaded snapshot of repo_id, as the hub client lays it out."""
    commit = "0" * 40
    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return root


def test_cached_hub_id_target_loads_offline(tiny_dirs, tmp_path):
    """--target as a cached hub id with the user's HF_HUB_OFFLINE=0: before the app forced its offline
    switches this asked huggingface.co dozens of times (and took 2 minutes of retries)."""
    target, _ = tiny_dirs
    home = _hub_cache(tmp_path / "hf", target, "tiny-org/tiny-qwen3")
    app, audit = audited_app(["--target", "tiny-org/tiny-qwen3", "--drafter", "random"], tmp_path,
                             env={"HF_HOME": str(home)})
    try:
        app.wait_up()
        status = app.wait_model(gradio_client.Client(app.url, verbose=False), timeout=300)
        assert "tiny-org/tiny-qwen3" in status
    finally:
        app.stop()
    found = attempts(audit)
    assert not found, "the server reached past loopback:\n" + describe(found)


def test_embedded_target_loads_offline(tmp_path):
    """The default launch (embedded target, shipped drafter) through to "ready": the real model load
    (transformers, tokenizer, maybe the GGUF de-quantisation) asks nothing of the network."""
    from engine.models.embedded import cache_dir, gguf_path

    if not (cache_dir() / "model.safetensors").is_file():
        try:
            gguf_path()
        except FileNotFoundError as e:
            pytest.skip(f"the embedded model is not installed: {e}")
    app, audit = audited_app([], tmp_path)
    try:
        app.wait_up()
        status = app.wait_model(gradio_client.Client(app.url, verbose=False), timeout=600)
        assert status.startswith("ready: target embedded"), status
        print("embedded:", status)
    finally:
        app.stop()
    found = attempts(audit)
    assert not found, "the server reached past loopback:\n" + describe(found)


def _get(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, str]:
    """(status, body) of one request from this (unaudited) test process to the app on loopback."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, method=method, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


PROBE = "ssrf-probe.example"  # any outside name: resolving it at all is what the audit catches


def test_url_requests_are_refused_without_a_lookup(tmp_path):
    """Server-side request forgery: Gradio's file route proxies http(s) URLs (resolving the host, asking
    dns.google for a loopback one) and a file entry whose path or url is a URL is fetched by the server.
    Each such request is sent here to a real server under the audit: refused (403 / an error), the app keeps
    serving, and the audit shows no outside lookup or connection."""
    from gradio_client import Client, handle_file

    app, audit = audited_app(["--no-model"], tmp_path)
    try:
        app.wait_up()
        base = app.url.rstrip("/")
        for path in (f"/gradio_api/file=https://{PROBE}/x.json", f"/gradio_api/file=http://{PROBE}:80/x",
                     f"/gradio_api/file=https%3A//{PROBE}/x", f"/gradio_api/file=http://127.0.0.1:{app.port}/",
                     f"/gradio_api/file=HTTPS://{PROBE}/x", f"/gradio_api/file=//{PROBE}/x",
                     f"/gradio_api/proxy=https://{PROBE}/x", f"/file=https://{PROBE}/x"):
            for method in ("GET", "HEAD"):
                status, body = _get(base + path, method)
                assert status == 403, (path, method, status, body[:200])
        c = Client(app.url, verbose=False)
        for entry in (handle_file(f"https://{PROBE}/t.json"),
                      {"path": f"https://{PROBE}/t.json", "meta": {"_type": "gradio.FileData"}},
                      {"path": "t.json", "url": f"https://{PROBE}/t.json", "orig_name": "t.json",
                       "meta": {"_type": "gradio.FileData"}}):
            with pytest.raises(Exception):
                c.predict(entry, api_name="/load_trace")
        # the same through the raw queue and call routes (what any HTTP client can send)
        payload = json.dumps({"data": [{"path": f"https://{PROBE}/t.json", "url": f"https://{PROBE}/t.json",
                                        "meta": {"_type": "gradio.FileData"}}, None],
                              "fn_index": None, "session_hash": "s1"}).encode()
        assert _get(base + "/gradio_api/call/load_trace", "POST", payload)[0] == 403
        assert _get(base + "/", "GET")[0] == 200  # still serving
    finally:
        app.stop()
    found = attempts(audit)
    assert not found, "the server reached past loopback:\n" + describe(found)

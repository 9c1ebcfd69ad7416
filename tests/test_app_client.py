"""The launched app (`python -m app` in a subprocess, tiny random models) driven by gradio_client:
streaming, equality with the engine CLI, Stop, cancel (client gone), export/load replay, bad input."""
from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from html import unescape

import pytest

from app import plots
from app_fixtures import PYTHON, REPO, AppProcess, save_tiny_folders

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

PROMPT = "hi, j."
LONG_PROMPT = "a b c d e f g"  # runs to max_new_tokens on the tiny target (no end-of-turn)
# outputs of /run, /load_trace (state excluded)
TEXT, METRICS, SLIDER, CAPTION, ROUND_FIG, TIMELINE, EXPORT, ANALYSES, HIST, GAIN = range(10)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    return save_tiny_folders(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def app(tiny_dirs, tmp_path_factory):
    target, drafter = tiny_dirs
    proc = AppProcess(["--target", str(target), "--drafter", str(drafter)],
                      tmp_path_factory.mktemp("applog") / "app.log")
    try:
        proc.wait_up()
        proc.wait_model(Client(proc.url, verbose=False))
        yield proc
    finally:
        proc.stop()


def client(app) -> Client:
    return Client(app.url, verbose=False)


def _generated_text(text_html: str) -> tuple[list[int], str]:
    """(rounds, text) of the generated-token spans of the text view."""
    spans = re.findall(r"<span class='[^']*' data-r='(-?\d+)' data-k='\d+' title='[^']*'>(.*?)</span>", text_html,
                       flags=re.S)
    return [int(r) for r, _ in spans], "".join(unescape(t) for _, t in spans)


def _export_path(app, result) -> str:
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


def _cli(tiny_dirs, prompt: str, max_new: int, mode="reanchor", rule="earliest", temperature=0.0, seed=0) -> dict:
    target, drafter = tiny_dirs
    out = subprocess.run([PYTHON, "-m", "engine", "generate", "--prompt", prompt, "--mode", mode, "--rule", rule,
                          "--temperature", str(temperature), "--seed", str(seed), "--max-new-tokens", str(max_new),
                          "--target", str(target), "--drafter", str(drafter), "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_run_streams_and_matches_engine_cli(app, tiny_dirs):
    c = client(app)
    job = c.submit(PROMPT, "reanchor", "earliest", 0, 0, 40, api_name="/run")
    result = job.result(timeout=300)
    outputs = job.outputs()
    assert len(outputs) >= 3, "the run should stream one update per round"
    streamed = [o[TEXT] for o in outputs if isinstance(o[TEXT], str)]
    assert len({len(t) for t in streamed}) >= 2, "the text should grow while streaming"
    assert "done" in result[METRICS]

    trace = json.loads(open(_export_path(app, result)).read())
    cli = _cli(tiny_dirs, PROMPT, 40)
    assert trace["output_ids"] == cli["output_ids"]
    assert trace["text"] == cli["text"]
    assert trace["stats"]["rounds"] == cli["rounds"]
    # the page's text view shows exactly the generated tokens, each tagged with its round
    rounds, text = _generated_text(result[TEXT])
    assert text == "".join(trace["token_texts"][str(i)] for i in trace["output_ids"])
    assert len(rounds) == len(trace["output_ids"])
    assert result[SLIDER]["maximum"] == max(len(trace["rounds"]) - 1, 1)


def _long_run(c):
    return c.submit(LONG_PROMPT, "reanchor", "earliest", 0, 0, 400, api_name="/run")


def _wait_outputs(job, n: int, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while len(job.outputs()) < n:
        assert not job.done() or len(job.outputs()) >= n, "the run ended before it could be stopped"
        assert time.monotonic() - t0 < timeout
        time.sleep(0.05)


def test_stop_ends_the_run_and_the_next_run_works(app):
    c = client(app)
    job = _long_run(c)
    _wait_outputs(job, 4)
    c.predict(api_name="/stop")  # returns nothing; the run reports "stopped"
    result = job.result(timeout=60)
    assert "stopped" in result[METRICS]
    n_rounds = result[SLIDER]["maximum"] + 1
    assert n_rounds < 390, "Stop should end the run long before max_new_tokens"
    # the stopped run stays inspectable, and the next run works
    last = c.predict(api_name="/last_round")
    assert f"rounds 0–{n_rounds - 1}" in last[1]
    again = c.predict(PROMPT, "dflash", "earliest", 0, 0, 16, api_name="/run")
    assert "done" in again[METRICS]


def test_cancelled_job_stops_the_run(app):
    """A client that goes away (job cancelled) closes the generator: the run stops, the slot frees."""
    c = client(app)
    ended = app.log().count("run ended")
    job = _long_run(c)
    _wait_outputs(job, 4)
    job.cancel()
    assert app.wait_log("run ended", timeout=60, count=ended + 1), app.log()[-2000:]
    rounds = int(re.findall(r"run ended after (\d+) rounds", app.log())[-1])
    assert rounds < 390, "the cancelled run should have stopped early"
    t0 = time.monotonic()
    again = client(app).predict(PROMPT, "dflash", "earliest", 0, 0, 16, api_name="/run")
    assert "done" in again[METRICS]
    assert time.monotonic() - t0 < 60


def test_exported_trace_loads_back_and_replays_the_same_rounds(app):
    c = client(app)
    result = c.predict(PROMPT, "reanchor", "all", 0, 0, 40, api_name="/run")
    path = _export_path(app, result)
    trace = json.loads(open(path).read())
    n = len(trace["rounds"])
    assert n >= 2
    before = [c.predict(i, api_name="/goto_round")[2] for i in range(n)]

    c2 = client(app)  # a fresh session: replay needs nothing but the file
    loaded = c2.predict(handle_file(path), api_name="/load_trace")
    assert loaded[TEXT] == result[TEXT]
    assert loaded[SLIDER]["maximum"] == result[SLIDER]["maximum"]
    for i in range(n):
        out = c2.predict(i, api_name="/goto_round")
        assert out[2] == before[i]
        assert out[2] == plots.round_figure(trace["rounds"][i], trace["token_texts"]).to_json()
        assert out[1].startswith(f"Round {i} ")


@pytest.mark.parametrize("args,field", [
    (("", "reanchor", "earliest", 0, 0, 16), "Prompt"),
    (("   ", "reanchor", "earliest", 0, 0, 16), "Prompt"),
    ((PROMPT, "reanchor", "earliest", -1, 0, 16), "Temperature"),
    ((PROMPT, "reanchor", "earliest", 0, -1, 16), "Seed"),
    ((PROMPT, "reanchor", "earliest", 0, 0, 0), "Max new tokens"),
    ((PROMPT, "reanchor", "earliest", 0, 0, 100000), "Max new tokens"),
    ((PROMPT, "reanchor", "earliest", 0, 0, 490), "Max new tokens"),  # beyond the tiny target's context
])
def test_bad_input_names_the_field(app, args, field):
    c = client(app)
    with pytest.raises(AppError, match=field):
        c.predict(*args, api_name="/run")
    assert c.predict(api_name="/model_status")[0].startswith("ready")  # still serving


def test_bad_trace_files_are_refused(app, tmp_path):
    import pickle

    c = client(app)
    bad = {"garbage.json": b"not json at all {",
           "pickle.json": pickle.dumps({"schema": "reanchor-trace/1"}),
           "schema.json": json.dumps({"schema": "something-else/9", "rounds": []}).encode(),
           "rounds.json": json.dumps({"schema": "reanchor-trace/1", "config": {}, "prompt_ids": [1],
                                      "output_ids": [1], "text": "", "token_texts": {},
                                      "stats": {"tau": 1, "rounds": 1, "new_tokens": 1, "wall_s": 1,
                                                "tokens_per_s": 1},
                                      "rounds": [{"round": 0}]}).encode()}
    for name, data in bad.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(AppError, match="Load trace"):
            c.predict(handle_file(str(p)), api_name="/load_trace")
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"0," * (11 * 1024 * 1024) + b"0]")  # 22 MB: over the 20 MB limit
    with pytest.raises(Exception):
        c.predict(handle_file(str(big)), api_name="/load_trace")
    assert c.predict(api_name="/model_status")[0].startswith("ready")


def test_compare_reports_ratios(app):
    c = client(app)
    c.predict(PROMPT, "reanchor", "earliest", 0, 0, 24, api_name="/run")
    out = c.predict(PROMPT, "dflash", "earliest", 0, 0, 24, api_name="/compare")
    assert "comparison: dflash" in out[0]
    assert "vs comparison" in out[2] and "speed ratio" in out[2]


@pytest.fixture(scope="module")
def replay_app(tmp_path_factory):
    proc = AppProcess(["--no-model"], tmp_path_factory.mktemp("replaylog") / "app.log")
    try:
        proc.wait_up()
        yield proc
    finally:
        proc.stop()


def test_replay_only_app_needs_no_model(replay_app):
    """--no-model: example traces and loaded traces are explorable; a run says why it cannot start."""
    from app.session import example_traces

    c = client(replay_app)
    assert "replay only" in c.predict(api_name="/model_status")[0]
    shown = c.predict(api_name="/show_example")
    found = example_traces()
    if found:
        assert "example trace" in shown[METRICS]
        loaded = c.predict(handle_file(found[-1][1]), api_name="/load_trace")
        assert "loaded trace" in loaded[METRICS]
        assert c.predict(api_name="/last_round")[1].startswith("Round ")
    with pytest.raises(AppError, match="Model"):
        c.predict(PROMPT, "reanchor", "earliest", 0, 0, 16, api_name="/run")

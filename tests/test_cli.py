"""The CLI as users run it: JSON output, trace files, and bad input (exit 2, one line, no traceback)."""
import json
import subprocess
import sys

import pytest

from engine.__main__ import main
from engine.decode import DecodeConfig, Engine
from engine.errors import InputError
from engine.trace import SCHEMA, TraceError, load_trace, token_sources
from tiny import save_tiny, tiny_models, tiny_tokenizer
from conftest import ROOT


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny"), "llama", seed=3, block_size=6)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_generate_json_and_trace_roundtrip(folders, tmp_path):
    target, drafter = folders
    trace_file = tmp_path / "t.json"
    p = run_cli("generate", "--prompt", "ab c", "--target", str(target), "--drafter", str(drafter),
                "--draft-dtype", "auto", "--max-new-tokens", "20", "--ignore-eos", "--json",
                "--trace", str(trace_file))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"output_ids", "text", "tau", "rounds", "tokens_per_s"} <= out.keys()
    trace = load_trace(trace_file)
    assert trace["schema"] == SCHEMA and trace["output_ids"] == out["output_ids"]
    rounds = trace["rounds"]
    assert out["rounds"] == len(rounds) == trace["stats"]["rounds"]
    assert out["tau"] == pytest.approx(sum(len(r["new_tokens"]) for r in rounds) / len(rounds))
    # the rounds rebuild the output: first token from the prefill, then each round's new tokens
    assert [trace["first_token"]] + [t for r in rounds for t in r["new_tokens"]] == out["output_ids"]
    for r in rounds:
        assert len(token_sources(r)) == len(r["new_tokens"])
    # the text without the model: token texts travel in the trace
    special = set(tiny_tokenizer().all_special_ids)
    assert "".join(trace["token_texts"][str(t)] for t in out["output_ids"]
                   if t not in special) == out["text"]


def test_bad_trace_files_are_rejected(tmp_path):
    bad = tmp_path / "bad.json"
    for content, needle in [("not json", "not valid JSON"), ('{"schema": "x"}', "schema"),
                            ('{"schema": "reanchor-trace/1"', "not valid JSON"),
                            ("[1, 2]", "not a JSON object")]:
        bad.write_text(content)
        with pytest.raises(TraceError, match=needle):
            load_trace(bad)
    bad.write_bytes(b" " * 2048)
    with pytest.raises(TraceError, match="limit"):
        load_trace(bad, max_bytes=1024)


@pytest.mark.parametrize("args,field", [
    (["--prompt", "  "], "prompt"),
    (["--prompt", "ab " * 400], "prompt"),
    (["--max-new-tokens", "0"], "max_new_tokens"),
    (["--max-new-tokens", "100000000"], "max_new_tokens"),
    (["--temperature", "-1"], "temperature"),
    (["--mode", "turbo"], "mode"),
    (["--rule", "middle"], "rule"),
    (["--block-size", "1"], "block_size"),
    (["--max-shifted", "many"], "max_shifted"),
])
def test_bad_input_names_the_field(folders, capsys, args, field):
    target, drafter = folders
    argv = ["generate", "--prompt", "ab", "--target", str(target), "--drafter", str(drafter), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {field}:"), err


def test_missing_and_malformed_model_folders(tmp_path, capfd):
    """In this process (capfd holds whatever reaches the stderr file, loggers' output included): a python per
    folder re-imported torch for a one-line answer; test_generate_json_and_trace_roundtrip runs the command line."""
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    for path, needle in [(tmp_path / "nope", "target: "), (tmp_path / "broken", "target: ")]:
        capfd.readouterr()
        assert main(["generate", "--prompt", "hi", "--target", str(path)]) == 2
        err = capfd.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: " + needle), err
        assert "Traceback" not in err


def test_engine_serves_after_bad_input():
    eng = Engine(tiny_models("llama", 0))
    ids = eng.encode_prompt("ab")
    for cfg in [DecodeConfig(max_new_tokens=-3), DecodeConfig(temperature=float("nan")),
                DecodeConfig(seed="x"), DecodeConfig(mode="nope")]:
        with pytest.raises(InputError):
            eng.run(ids, cfg)
    with pytest.raises(InputError, match="prompt"):
        eng.encode_prompt("")
    assert len(eng.run(ids, DecodeConfig(max_new_tokens=5)).finish()["output_ids"]) >= 1


def test_argparse_errors_are_one_line_too(capfd):
    """A flag argparse itself refuses (missing, not a number) reads like every other bad input: one line, exit 2."""
    for args, flag in ((["bench", "--sets", "math"], "--out"), (["generate", "--prompt", "x", "--max-new-tokens", "x"],
                                                                 "--max-new-tokens")):
        capfd.readouterr()
        with pytest.raises(SystemExit) as exit_:   # argparse exits where the command line's process would
            main(args)
        err = capfd.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: ") and flag in err, err


def test_generate_checks_its_settings_before_loading_models(tmp_path, capsys):
    """A bad mode is named before any model loads: a missing target folder would otherwise be reported first."""
    assert main(["generate", "--prompt", "hi", "--mode", "bogus", "--target", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("error: mode: unknown mode 'bogus'")


def test_bench_refuses_drafter_with_drafters_before_loading(tmp_path, capsys):
    """--drafter beside --drafters was ignored without a word; it is named before any model loads (the target
    folder here does not exist, and would be reported first otherwise), in the bench and in the sweep."""
    for extra in ([], ["--ray", "127.0.0.1:1"]):
        argv = ["bench", "--sets", "math", "--target", str(tmp_path / "none"), "--drafter", "default",
                "--drafters", "a,b", "--out", str(tmp_path / "out"), *extra]
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith("error: drafters: give --drafter or --drafters, not both"), extra


def test_ctrl_c_ends_a_command_without_a_traceback():
    """Ctrl-C where no command catches it (here while the embedded model loads or decodes): one line, exit 130."""
    import os
    import re
    import signal
    import threading

    p = subprocess.Popen([sys.executable, "-m", "engine", "generate", "--prompt", "Count to a thousand.", "--mode", "ar",
                          "--max-new-tokens", "4000", "--ignore-eos"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=os.environ | {"OMP_NUM_THREADS": "1"},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a terminal's foreground
                         # command (a runner that starts pytest in the background hands it SIGINT ignored)
    err, loading = bytearray(), threading.Event()

    def read_stderr():
        while chunk := os.read(p.stderr.fileno(), 4096):
            err.extend(chunk)
            if re.search(rb"Loading weights: 100%[^\n]*\n", err):  # loaded: in main(), whose handler it is, and
                loading.set()                                          # the progress bar's line is closed

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert loading.wait(180), f"the model never finished loading: {bytes(err[-2000:])!r}"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    finally:
        p.kill()
    reader.join(10)
    text = err.decode("utf-8", "replace")
    assert p.returncode == 130 and "Traceback" not in text, text[-2000:]
    assert text.strip().splitlines()[-1] == "interrupted"


def test_ctrl_c_dropped_by_python_still_stops_the_next_model_layer():
    """A KeyboardInterrupt raised inside a weakref callback is printed as "Exception ignored" and dropped by Python
    (the model loader's thread pools are collected that way: one Ctrl-C in four went unnoticed and the decode ran
    on). With the CLI's handler (interrupt.catch_ctrl_c) the press is raised again at the next model layer, and
    the dropped one prints nothing."""
    import os
    import signal

    script = r'''
import gc, os, signal, sys, time, weakref
import torch
from engine.decode.interrupt import catch_ctrl_c, make_interruptible

catch_ctrl_c()
class Thing: pass
def dropped(_):               # Ctrl-C lands inside a weakref callback: Python drops its KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
t = Thing(); r = weakref.ref(t, dropped); del t; gc.collect()
print("decoding on", flush=True)
model = torch.nn.Module(); model.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
make_interruptible(model)
try:
    model.layers[0](torch.zeros(1, 4))
except KeyboardInterrupt:
    print("stopped at the layer"); sys.exit(130)
print("ran on")
'''
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 130 and r.stdout.split() == ["decoding", "on", "stopped", "at", "the", "layer"], (
        r.stdout, r.stderr[-1500:])
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr[-1500:]

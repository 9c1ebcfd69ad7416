"""Bench flags refused before any model loads, each naming its flag in one line (exit 2): a FIFO as --prompts (its
read waited forever), an unknown --reference (refused after the whole run), --reference-repeats 0 (an unnamed
error), --workers 0 without --ray (taken). A number a trace cannot hold (1e400, read as infinity) never comes
back out as Infinity."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app_fixtures import REPO, real_trace
from engine.trace import parse_trace, save_trace

NO_TARGET = "/no/such/target"   # a flag checked after the models load would answer "target: ..." instead


def _bench(tmp_path, *args: str) -> list[str]:
    """stderr lines of `python -m engine bench ARGS` (a process: a hang fails the test at its timeout)."""
    prompts = tmp_path / "p.jsonl"
    if not prompts.exists():
        prompts.write_text('{"id": "a", "prompt": "hi"}\n')
    argv = ["bench", "--prompts", str(prompts), "--target", NO_TARGET, "--out", str(tmp_path / "out"), *args]
    p = subprocess.run([sys.executable, "-m", "engine", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    return p.stderr.strip().splitlines()


@pytest.mark.parametrize("args, line", [
    (("--reference", "bogus"), "error: reference: unknown bogus"),
    (("--reference", "dflash", "--reference-repeats", "0"), "error: reference_repeats: "),
    (("--workers", "0"), "error: workers: must be at least 1, got 0"),
    (("--workers", "0", "--ray", "local"), "error: workers: must be at least 1, got 0"),
])
def test_bench_flags_are_refused_before_loading(tmp_path, args, line):
    err = _bench(tmp_path, *args)
    assert len(err) == 1 and err[0].startswith(line), err


def test_a_fifo_as_prompts_is_refused_not_read(tmp_path):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    err = _bench(tmp_path, "--prompts", str(fifo))
    assert err == [f"error: prompts: {fifo} is not a regular file (a folder, FIFO or device)"], err


def test_an_overflowing_number_never_exports_as_infinity(tmp_path):
    """1e400 in a field no check reads (config.ignore_eos, budget.plain) or in none: dropped at load; one in a
    checked field: refused naming it. What is saved is JSON a strict parser reads."""
    t = real_trace()
    text = json.dumps(t)
    assert '"ignore_eos": false' in text
    loaded = parse_trace(text.replace('"ignore_eos": false', '"ignore_eos": 1e400, "x": 1e400', 1).encode())
    assert "ignore_eos" not in loaded["config"] and "x" not in loaded["config"]
    save_trace(tmp_path / "t.json", loaded)
    json.loads((tmp_path / "t.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the export"))
    with pytest.raises(ValueError, match="temperature: must be a finite number"):
        parse_trace(text.replace('"temperature": 0.0', '"temperature": 1e400', 1).encode())

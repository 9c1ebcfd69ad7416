"""Every failure of `python -m engine` the second red team found: one line, exit 2, naming the field, before the
work starts where it can be known (output paths checked first), no partial file left; and nothing of the user's
lost (a file that is not a trace is not replaced; bench set names from prompt files sanitised, traces never
outside --out/traces, an earlier run moved aside). A missing --target makes every check that waits for the
model loading show as a `target:` error instead: the order is tested too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def one_line(capsys, argv: list[str], field: str) -> str:
    rc = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {field}: "), (rc, err)
    return err[0]


def gen(tmp_path, *extra) -> list[str]:
    return ["generate", "--prompt", "hi", "--max-new-tokens", "4", "--target", str(tmp_path / "no-target"), *extra]


def test_generate_trace_paths_are_checked_before_the_run(tmp_path, capsys):
    folder = tmp_path / "DIR"
    folder.mkdir()
    assert "is a folder" in one_line(capsys, gen(tmp_path, "--trace", str(folder)), "trace")
    assert not (tmp_path / "DIR.tmp").exists()
    assert "cannot write in /proc" in one_line(capsys, gen(tmp_path, "--trace", "/proc/x.json"), "trace")
    assert "bytes, over the" in one_line(capsys, gen(tmp_path, "--trace", str(tmp_path / ("n" * 260 + ".json"))),
                                         "trace")
    assert "there is no folder" in one_line(capsys, gen(tmp_path, "--trace", str(tmp_path / "none" / "t.json")),
                                            "trace")
    if os.geteuid() != 0:  # root writes in a read-only folder anyway
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        one_line(capsys, gen(tmp_path, "--trace", str(ro / "t.json")), "trace")


def test_generate_does_not_replace_a_file_that_is_not_a_trace(tmp_path, capsys):
    mine = tmp_path / "existing.txt"
    mine.write_text("my notes")
    assert "is not a reanchor trace: not replaced" in one_line(capsys, gen(tmp_path, "--trace", str(mine)), "trace")
    assert mine.read_text() == "my notes"


def test_generate_refuses_a_prompt_that_is_not_utf8(tmp_path, capsys):
    """A byte that is not UTF-8 reaches argv as a lone surrogate (surrogateescape); the tokenizer crashed."""
    line = one_line(capsys, ["generate", "--prompt", "hi \udcff", "--target", str(tmp_path / "t")], "prompt")
    assert "not UTF-8" in line


def test_seed_out_of_range_is_named(tmp_path, capsys):
    one_line(capsys, gen(tmp_path, "--seed", str(2**70)), "seed")
    one_line(capsys, ["bench", "--sets", "math", "--n", "1", "--seed", str(2**70), "--target",
                      str(tmp_path / "t"), "--out", str(tmp_path / "o")], "seed")


def test_check_trace_on_what_is_not_a_file(tmp_path, capsys):
    """A folder, /proc/self/mem (unreadable) and a FIFO (whose read waited forever): one line, exit 2. The FIFO in a
    process of its own, which a timeout ends if the read waits again; the others in this one."""
    for target in (str(tmp_path), "/proc/self/mem"):
        one_line(capsys, ["check-trace", target], f"{target}: trace")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "engine", "check-trace", str(fifo)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1 and err[0].startswith(f"error: {fifo}: trace: "), p.stderr


def test_save_trace_leaves_no_partial_file(tmp_path):
    from app_fixtures import real_trace
    from engine.trace import save_trace

    (tmp_path / "t.json").mkdir()
    with pytest.raises(OSError):
        save_trace(tmp_path / "t.json", real_trace())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_bench_out_is_checked_before_the_run(tmp_path, capsys):
    one_line(capsys, ["bench", "--sets", "math", "--n", "1", "--target", str(tmp_path / "t"), "--out", "/proc"],
             "out")


@pytest.mark.parametrize("line, needle", [
    ('{"turns": {}}', 'has no "prompt" string'), ('{"turns": 5}', 'has no "prompt" string'),
    ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", "is not JSON"),
    ('{"prompt": "a \\ud800 b"}', "lone surrogate"),
    ('{"prompt": "hi", "id": ' + "9" * 5000 + "}", "is not JSON"),
])
def test_bench_prompt_lines_are_named(line, needle, tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text(line + "\n")
    err = one_line(capsys, ["bench", "--prompts", str(f), "--target", str(tmp_path / "t"), "--out",
                            str(tmp_path / "o")], "prompts")
    assert needle in err and len(err) < 400, err


def test_bench_set_names_stay_inside_out_and_runs_are_moved_aside(tmp_path):
    """A prompts file named '...jsonl' made the set '..': its traces went to OUT/ar/, were never moved to
    earlier-runs/, and a second run overwrote the first's."""
    from tiny import save_tiny_bench

    target, drafter, prompts = save_tiny_bench(tmp_path, [{"id": "p1", "prompt": "ab ab"}])
    odd = tmp_path / "sets"
    odd.mkdir()
    prompts = Path(os.replace(prompts, odd / "...jsonl") or odd / "...jsonl")
    out = tmp_path / "out"
    argv = ["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter), "--modes", "ar",
            "--max-new-tokens", "6", "--traces", "--out", str(out)]
    for _ in range(2):   # in this process: a python per run re-imported torch and transformers (~5 s each)
        assert main(argv) == 0
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*.json") if f.name != "results.json")
    assert all(f.startswith(("traces/", "earlier-runs/")) and ".." not in f for f in files), files
    assert len([f for f in files if f.startswith("traces/")]) == 1
    assert len([f for f in files if f.startswith("earlier-runs/")]) == 1
    results = json.loads((out / "results.json").read_text())
    assert all(".." not in t for t in results.get("trace_files", [])), results.get("trace_files")


def test_explain_into_a_closed_pipe_ends_quietly():
    """`python -m engine explain ... | head`: the reader gone before the table is written (a pipe whose read end is
    closed) ends the command as a closed pipe ends any program, 141, with no BrokenPipe traceback on stderr."""
    trace = sorted((ROOT / "assets" / "traces").glob("*.json"))[0]
    r, w = os.pipe()
    os.close(r)
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "explain", str(trace), "--round", "1"], cwd=ROOT,
                             stdout=w, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(w)
    assert out.returncode == 141 and out.stderr == b"", (out.returncode, out.stderr[-1000:])

"""The app's benchmarks (what docs/race.md and docs/app.md quote) run as a person runs them: `python -m
app.race_bench` and `python -m app.run_bench` start, refuse a bad count naming its flag (exit 2), and the Explore
default run's bench goes through the app's run path on tiny models to its summary line."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from app_fixtures import REPO, save_tiny_folders


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("module, flag", [("app.race_bench", "--races"), ("app.run_bench", "--prompts")])
def test_a_bench_starts_and_refuses_a_zero_count(module, flag):
    p = _run(module, "--help")
    assert p.returncode == 0 and f"python -m {module}" in p.stdout, p.stderr[-2000:]
    p = _run(module, flag, "0")
    assert p.returncode == 2 and f"{flag}: at least 1, got 0" in p.stderr, p.stderr[-2000:]


def test_the_explore_default_runs_bench_reports_each_prompt_and_the_finished_count(tmp_path):
    target, drafter = save_tiny_folders(tmp_path, "qwen3")
    p = _run("app.run_bench", "--target", str(target), "--drafter", str(drafter), "--prompts", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith(f"drafter {drafter}; reanchor, shifted auto, 96 tokens"), lines
    row = re.search(r": (\d+) tokens in [\d.]+ s \((done|stopped[^)]*)\); plain decoding (\d+) in [\d.]+ s; ×[\d.]+",
                    lines[1])
    assert row and row.group(1) == row.group(3) == "96", lines
    assert lines[-1] == "finished within the limit (96 tokens or a stop token): 1 of 1 prompts", lines

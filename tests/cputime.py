"""Where the suite's time goes: a pytest plugin that writes, for every test (setup, call and teardown), its wall time
and the CPU time of pytest's whole process tree meanwhile (the apps, Chromium and Ray it started included), one JSON
line a test, to $CPUTIME_OUT (default test-output/cputime.jsonl). Linux (/proc). Under pytest-xdist each worker
counts its own tree.

    PYTHONPATH=tests python -m pytest -q -n 2 --dist loadfile -p cputime tests
    python tests/cputime.py test-output/cputime.jsonl      # CPU and wall time by file, largest first

A thread reads the tree every 0.3 s, so a process that starts and ends within one test counts too (all but its
last < 0.3 s); a process that has ended keeps its last reading.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

TICK = os.sysconf("SC_CLK_TCK")
_OUT = Path(os.environ.get("CPUTIME_OUT", Path(__file__).resolve().parent.parent / "test-output" / "cputime.jsonl"))
_last: dict[tuple[int, str], float] = {}   # (pid, start time) -> its CPU seconds when last read
_lock = threading.Lock()


def _stats() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, start time, CPU seconds: utime + stime) of every process, one read of /proc each."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
                out[int(d)] = (int(f[1]), f[19], (int(f[11]) + int(f[12])) / TICK)
            except (OSError, IndexError, ValueError):
                pass
    return out


def _cpu() -> float:
    """The CPU seconds so far of this process and every process under it, ended ones at their last reading."""
    with _lock:
        stats = _stats()
        children = defaultdict(list)
        for pid, (parent, _, _) in stats.items():
            children[parent].append(pid)
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            if pid in stats:
                _last[(pid, stats[pid][1])] = stats[pid][2]   # keyed by start time too: pids are reused
            todo.extend(children.get(pid, ()))
        return sum(_last.values())


_stop = threading.Event()


def _watch() -> None:
    while not _stop.wait(0.3):   # a sampling period, not a wait for something
        _cpu()


def pytest_configure(config) -> None:
    threading.Thread(target=_watch, daemon=True, name="cputime").start()


def pytest_unconfigure(config) -> None:
    _stop.set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _cpu(), time.time()
    yield
    c1, t1 = _cpu(), time.time()
    _OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(_OUT, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"),
                            "start": round(t0, 2), "wall_s": round(t1 - t0, 2), "cpu_s": round(c1 - c0, 2)}) + "\n")


def summary(path: Path) -> str:
    """CPU and wall seconds by test file, largest CPU first, and each worker's span."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    spans: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += r["cpu_s"]
        f[1] += r["wall_s"]
        s = spans[r["worker"]]
        s[0], s[1] = min(s[0], r["start"]), max(s[1], r["start"] + r["wall_s"])
    lines = [f"{len(rows)} tests, {sum(f[0] for f in files.values()):.0f} s of CPU"]
    lines += [f"worker {w}: {s[1] - s[0]:.0f} s" for w, s in sorted(spans.items())]
    lines += [f"{cpu:8.1f} s CPU {wall:8.1f} s wall  {name}" for name, (cpu, wall) in
              sorted(files.items(), key=lambda kv: -kv[1][0])]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else _OUT))

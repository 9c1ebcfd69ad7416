"""The tests themselves: they wait for a condition, never for a fixed time (a sleep is too short on a loaded machine
and wasted on an idle one: tests/helpers.wait_until polls with a deadline), and no test module imports another
(a shared fixture or helper lives in helpers.py, app_fixtures.py, page_fixtures.py or conftest.py, so a module runs
alone and its fixtures are its own). In Chromium alike: Playwright's wait_for_timeout is a sleep; a page is waited on
for the DOM state the next step needs (wait_for_function, helpers.painted, helpers.wait_handled), and a check that
something does NOT happen keeps its window in one named helper (helpers.no_change_within)."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def modules() -> list[Path]:
    return sorted(TESTS.glob("*.py"))


def sleeps(tree: ast.AST) -> list[int]:
    """Lines that call time.sleep, or import sleep from time (a sleep under another name)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "time":
            out.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "time" and any(a.name == "sleep" for a in node.names):
            out.append(node.lineno)
    return out


# The helpers that may wait a fixed time in a page: a window in which something must NOT happen has no event to wait for
WINDOW_HELPERS = {"no_change_within"}


def fixed_waits(tree: ast.AST) -> list[int]:
    """Lines that use Playwright's wait_for_timeout (a call, or the method taken to call later) outside a function
    of WINDOW_HELPERS."""
    out = []

    def walk(node: ast.AST, allowed: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            allowed = allowed or node.name in WINDOW_HELPERS
        if isinstance(node, ast.Attribute) and node.attr == "wait_for_timeout" and not allowed:
            out.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            walk(child, allowed)

    walk(tree, False)
    return out


def imported_test_modules(tree: ast.AST) -> set[str]:
    """The test modules (test_*.py of this folder) a module imports, anywhere in it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or "")
    return {n for n in names if n.startswith("test_") and (TESTS / f"{n}.py").is_file()}


def test_no_test_sleeps():
    """None but the pause between two looks at a condition in helpers.poll_until."""
    found = {p.name: sleeps(ast.parse(p.read_text(encoding="utf-8"))) for p in modules()}
    found = {k: v for k, v in found.items() if v}
    poll = next(f for f in ast.parse((TESTS / "helpers.py").read_text(encoding="utf-8")).body
                if isinstance(f, ast.FunctionDef) and f.name == "poll_until")
    if found.get("helpers.py") == sleeps(poll):   # its one pause, between two looks
        del found["helpers.py"]
    assert len(modules()) > 50, "too few test files read: the test would prove nothing"
    assert not found, f"fixed sleeps (wait for the condition: helpers.wait_until): {found}"


def test_no_fixed_waits_in_pages():
    """Playwright's wait_for_timeout nowhere but inside a window helper (helpers.no_change_within)."""
    found = {p.name: fixed_waits(ast.parse(p.read_text(encoding="utf-8"))) for p in modules()}
    found = {k: v for k, v in found.items() if v}
    assert not found, ("fixed waits in a page (wait for the DOM state the next step needs: page.wait_for_function, "
                       f"helpers.painted; a window for an absence: helpers.no_change_within): {found}")
    # the check sees one: in a test, in a nested function, taken to call later; not in the window helper
    assert fixed_waits(ast.parse("def test_x(pg):\n    pg.wait_for_timeout(20)\n")) == [2]
    assert fixed_waits(ast.parse("def t(pg):\n    def f():\n        return pg.wait_for_timeout\n")) == [3]
    assert fixed_waits(ast.parse("def no_change_within(pg, ms):\n    pg.wait_for_timeout(ms)\n")) == []


def test_no_test_module_imports_another():
    found = {p.name: sorted(imported_test_modules(ast.parse(p.read_text(encoding="utf-8")))) for p in modules()}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"test modules importing test modules (move what they share to a helpers module): {found}"


def test_cputime_counts_the_cpu_of_processes_a_test_starts(tmp_path):
    """tests/cputime.py (docs/results.md: where the suite's time goes): a child that computes for 1 s within a test
    counts to that test, though it started and ended inside it; a test that does nothing counts next to nothing."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "test_two.py").write_text(
        "import subprocess, sys\n"
        "BUSY = 'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0:\\n    pass\\n'\n"
        "def test_busy_child():\n    subprocess.run([sys.executable, '-c', BUSY], check=True)\n"
        "def test_idle():\n    pass\n")
    out = tmp_path / "cputime.jsonl"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "CPUTIME_OUT": str(out)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cputime", "-p", "no:cacheprovider",
                        str(tmp_path / "test_two.py")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {r["test"].split("::")[1]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["test_busy_child"]["cpu_s"] >= 0.7 and rows["test_idle"]["cpu_s"] < 0.3, rows
    summary = subprocess.run([sys.executable, str(TESTS / "cputime.py"), str(out)], capture_output=True, text=True,
                             check=True).stdout
    assert summary.startswith("2 tests, ") and "test_two.py" in summary, summary

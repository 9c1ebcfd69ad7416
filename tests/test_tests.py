"""The tests themselves: they wait for a condition, never for a fixed time (a sleep is too short on a loaded machine
and wasted on an idle one: tests/helpers.wait_until polls with a deadline), and no test module imports another
(a shared fixture or helper lives in helpers.py, app_fixtures.py, page_fixtures.py or conftest.py, so a module runs
alone and its fixtures are its own)."""
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


def test_no_test_module_imports_another():
    found = {p.name: sorted(imported_test_modules(ast.parse(p.read_text(encoding="utf-8")))) for p in modules()}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"test modules importing test modules (move what they share to a helpers module): {found}"

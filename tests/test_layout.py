"""The project's layout (docs/architecture.md): every import points down the layers, core <- models <- decode <-
bench, train <- app, with the command lines on top; no module imports in a circle, not even through an import
inside a function, a type-only one or a package's __init__; the pure core reads traces without torch, and the
command line prints its help and explains a round without it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
# The layers, lowest first. The core is every module directly in engine/ (its package __init__ included);
# bench and train share a layer and import neither each other; the command lines (python -m engine, the lent GPU
# machine's scripts) sit on top, imported by nothing.
WINGS = {"models": 1, "decode": 2, "bench": 3, "train": 3}
CORE_PACKAGES = {"trace"}   # folders of engine/ that are core: the trace's records, validation and files
APP, TOP = 4, 5


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Project modules a file imports anywhere: module level, inside functions, and under `if TYPE_CHECKING:`
    (a type-only import never runs, but it still ties the two modules together: a loop through it is a loop)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # engine.decode.cost.budget_for -> engine.decode.cost
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> nx.DiGraph:
    files = [p for d in ("engine", "app") for p in (ROOT / d).rglob("*.py")]
    known = {module_name(p) for p in files}
    g = nx.DiGraph()
    for p in files:
        g.add_node(module_name(p))
        g.add_edges_from((module_name(p), m) for m in imports_of(p, known))
    return g


def layer(module: str) -> int:
    """0 for the core, then WINGS, APP and TOP; a new folder in engine/ fails here until it is given a layer."""
    parts = module.split(".")
    if module == "engine.__main__" or parts[:2] == ["engine", "gpu"]:
        return TOP
    if parts[0] == "app":
        return APP
    if len(parts) > 1 and parts[1] in CORE_PACKAGES:
        return 0
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in WINGS):   # a wing's package or one of its modules
        return WINGS[parts[1]]
    return 0


def core() -> list[str]:
    return sorted(m for m in import_graph() if layer(m) == 0)


def test_imports_point_down():
    g = import_graph()
    assert g.number_of_edges() > 50, "the graph misses the imports: the test would prove nothing"
    up = [(a, b) for a, b in g.edges if layer(b) > layer(a)]
    across = [(a, b) for a, b in g.edges if layer(a) == layer(b) == WINGS["bench"] and a.split(".")[1] != b.split(".")[1]]
    assert not up, f"imports pointing up the layers: {sorted(up)}"
    assert not across, f"bench and train import each other: {sorted(across)}"
    assert {"engine.tree", "engine.options", "engine.trace", "engine"} <= set(core())


def test_no_import_circle():
    g = import_graph()
    assert g.number_of_edges() > 50, "the graph misses the imports: the test would prove nothing"
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import circles: {cycles[:5]}"


MAX_LINES = 500
SIZE_MARKER = "Size: "   # a docstring line starting so says why a big module is one room


def test_big_modules_say_why():
    """A module of engine/ or app/ over MAX_LINES lines says in its docstring, on a line starting SIZE_MARKER, why it
    is one room; the others are split by what they do."""
    big = []
    for p in sorted(p for d in ("engine", "app") for p in (ROOT / d).rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if len(text.splitlines()) > MAX_LINES and f"\n{SIZE_MARKER}" not in f"\n{doc}":
            big.append(f"{p.relative_to(ROOT)}: {len(text.splitlines())} lines")
    assert not big, f"modules over {MAX_LINES} lines without a reason in their docstring: {big}"


def test_the_core_needs_no_torch():
    code = ("import sys\nimport " + ", ".join(core()) + "\n"
            "from engine.trace import load_trace\n"
            "import glob\n[load_trace(p) for p in glob.glob('assets/traces/*.json')]\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_page_needs_no_torch_and_writes_no_component_stubs():
    """The app's page is built without torch and transformers (4 s of imports): the model loader imports them
    in its thread once the server is up, so the page comes up before the model (3.8 s against 9.5 s). Gradio's
    import skips re-deriving its components' .pyi stubs (app/gradio_stubs.py: 1 s of the 2.6 s import)."""
    code = ("import sys\nimport app.__main__ as M\nfrom app.loader import ModelLoader\nfrom app.ui import build_ui\n"
            "args = M.parse_args([])\nbuild_ui(ModelLoader(args), M.sessions_from_args(args))\n"
            "import gradio.component_meta as cm\nprint(cm.create_or_modify_pyi.__module__)\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["app.gradio_stubs", "[]"], out.stdout[-500:]


def test_the_command_line_needs_no_torch_for_help_explain_or_check_trace():
    """`python -m engine --help` lists every subcommand, `explain` prints a round and `check-trace` checks a trace
    without torch (bench's and train's flags are added only when they are named): 0.15 s and 0.3 s for --help and
    explain, against 1.7 s and 2.3 s with torch."""
    trace = next(iter(sorted((ROOT / "assets" / "traces").glob("*.json"))))
    for argv, shows in ((["--help"], "check-trace"), (["explain", str(trace), "--round", "1"], "earliest*"),
                        (["check-trace", str(trace)], ": valid, ")):
        code = ("import runpy, sys\nsys.argv = ['engine', *sys.argv[1:]]\n"
                "try:\n    runpy.run_module('engine', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code, e\n"
                "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert shows in out.stdout and out.stdout.strip().splitlines()[-1] == "[]", (argv, out.stdout[-500:])


def test_openmp_threads_sleep_unless_the_user_says_otherwise():
    """Importing the engine (as `python -m app` and `python -m engine` do, before torch) sets OpenMP's passive wait
    policy; a user's own OMP_WAIT_POLICY is kept."""
    import os

    code = "import engine, torch, os; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for given, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        e = env if given is None else env | {"OMP_WAIT_POLICY": given}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == expected, (given, out.stdout, out.stderr[-500:])

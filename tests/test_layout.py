"""The project's layout (docs/architecture.md): no module imports in a circle, not even through an import
inside a function or a type-only one, and the pure core reads traces without torch."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
CORE = ("engine.options", "engine.errors", "engine.paths", "engine.attach", "engine.trie", "engine.trace",
        "engine.analyses", "engine.sampling")


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


def test_no_import_circle():
    g = import_graph()
    assert g.number_of_edges() > 50, "the graph misses the imports: the test would prove nothing"
    # a package's __init__ importing its own modules is how packages work, not a circle
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import circles: {cycles[:5]}"


def test_the_core_needs_no_torch():
    code = ("import sys\nimport " + ", ".join(CORE) + "\n"
            "from engine.trace import load_trace\n"
            "import glob\n[load_trace(p) for p in glob.glob('assets/traces/*.json')]\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_page_needs_no_torch():
    """The app's page is built without torch and transformers (4 s of imports): the model loader imports them
    in its thread once the server is up, so the page comes up before the model (3.8 s against 9.5 s)."""
    code = ("import sys\nimport app.__main__ as M\nfrom app.loader import ModelLoader\nfrom app.ui import build_ui\n"
            "args = M.parse_args([])\nbuild_ui(ModelLoader(args), M.sessions_from_args(args))\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


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

"""The page's JavaScript and CSS live in app/static/ as files (linted by ESLint, unit-tested under Node), never in
Python strings; Python values reach them as one JSON block (app.assets)."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app import assets, page, palette, plots, race_view, render

ROOT = Path(__file__).resolve().parent.parent
# What gives a string away as JavaScript or CSS: a function, an arrow, the DOM, a declaration, a CSS rule
JS_MARKERS = re.compile(r"\bfunction\s*\w*\s*\([^()]*\)\s*\{|=>|\bdocument\.|\bwindow\.|addEventListener|\b(?:const|let|var)\s+\w+\s*="
                        r"|\bsetTimeout\(")
CSS_RULE = re.compile(r"[\w\]\)*>-]\s*\{[^{}]*[a-z-]+\s*:\s*[^{};]+;?\s*\}")
# The two places that write JS or CSS syntax from Python values, on purpose: the constants block and the custom
# properties (app/assets.py), each a wrapper around data
ALLOWED = {("app/assets.py", "const RX = "), ("app/assets.py", ":root{")}


def string_literals(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a module but its docstrings: plain ones, and an f-string's text with each {field}
    as "\\0"."""
    tree, out = ast.parse(path.read_text(encoding="utf-8")), []
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def code_in_strings(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for line, text in string_literals(path):
            if (rel, text) in ALLOWED:
                continue
            marker = JS_MARKERS.search(text) or CSS_RULE.search(text)
            if marker:
                found.append(f"{rel}:{line}: {marker.group(0)!r} in {text[:60]!r}")
    return found


def test_no_javascript_or_css_in_python_strings():
    files = sorted((ROOT / "app").rglob("*.py"))
    assert len(files) > 15
    found = code_in_strings(files)
    assert not found, "JavaScript or CSS inside Python strings (move it to app/static/):\n" + "\n".join(found)


@pytest.mark.parametrize("snippet", [
    "element.addEventListener('click', (e) => {})",
    "const cap = document.querySelector('#rx-caption');",
    ".rx-text span.cur{outline:2px solid #111}",
    "#rx-timeline {min-height: 120px}",
])
def test_the_scan_finds_a_snippet_put_back(tmp_path, snippet):
    """The check above can fail: each kind of snippet, put back into a module as the page held it, is found."""
    module = ROOT / "app" / "_scan_probe.py"
    module.write_text(f"X = {snippet!r}\n", encoding="utf-8")
    try:
        assert code_in_strings([module])
    finally:
        module.unlink()


def test_scripts_read_their_constants_from_one_json_block():
    """Each script gets the same `const RX = {...};` line, the JSON of page.CONSTANTS, and reads every key it uses
    from it; no placeholder is left to replace."""
    timeline = {**page.CONSTANTS, "FRAME": True, "OTHER": False}   # the figure's own two (page.js_round_plot)
    for js, names, constants in ((page.JS_PLOT, ("rounds.js", "page.js"), page.CONSTANTS),
                                 (page.JS_TIMELINE, ("timeline.js",), timeline)):
        head, body = js.split("\n", 1)
        assert head.startswith("const RX = ") and head.endswith(";")
        assert json.loads(head[len("const RX = "):-1]) == constants
        assert body == "".join(assets.read(n) for n in names)
        used = set(re.findall(r"\bRX\.(\w+)", body))
        assert used and used <= set(constants), used - set(constants)
        assert not re.search(r"__[A-Z_]+__", body)
    assert page.CONSTANTS["VIEW_MARK"] == plots.VIEW_MARK


def test_every_palette_colour_has_its_token_rule():
    """text.css and race.css colour each source with var(--rx-...); render.PALETTE_VARS defines every one they read,
    and every shifted offset's colour (palette.D_COLORS) has its rule in each file (the lanes in their own shade)."""
    used = set()
    for css in (assets.read("text.css"), assets.read("race.css")):
        read = set(re.findall(r"var\(--([\w-]+)\)", css))
        assert read <= set(render.PALETTE_VARS), read - set(render.PALETTE_VARS)
        assert all(f".rx-s{i}{{" in css for i in range(len(palette.D_COLORS)))
        used |= read
    assert used == set(render.PALETTE_VARS), set(render.PALETTE_VARS) - used
    assert len(render.PALETTE_VARS) == 3 * len(palette.D_COLORS) + 2
    assert render.CSS.startswith(render.PALETTE_CSS) and palette.BASE_COLOR + "22" in render.PALETTE_CSS


def test_css_vars_refuses_what_would_break_out_of_the_block():
    with pytest.raises(ValueError, match="rx-bad"):
        assets.css_vars({"rx-bad": "red}body{display:none"})


def test_the_race_export_inlines_the_same_files():
    html = race_view.export_html({"lanes": [], "phase": "done"}, "a race", "/* plotly */")
    for name in ("race.js", "race_export.js", "race.css", "race_export.css"):
        assert assets.read(name).strip() in html, name
    assert render.PALETTE_CSS in html


def test_node_unit_tests_of_the_page_logic_pass():
    """tests/js/ (Node's built-in runner): the prefetch window, its re-aiming, the cache's bounds (rounds.js)."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the page's unit tests (Debian: apt-get install nodejs; .ci/run does)"
    files = sorted(str(p) for p in (ROOT / "tests" / "js").glob("*.test.js"))
    assert files
    run = subprocess.run([node, "--test", "--test-reporter=tap", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"^# pass [1-9]", run.stdout, re.M) and re.search(r"^# fail 0$", run.stdout, re.M), run.stdout


def test_the_linter_is_pinned():
    """package.json names exact versions, the ones package-lock.json installs (`npm ci` in .ci/run), and CI lints
    every folder of page code."""
    wanted = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["devDependencies"]
    locked = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))["packages"]
    assert "eslint" in wanted
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: {version} is not one version"
        assert locked[f"node_modules/{name}"]["version"] == version, name
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert "npm ci" in ci and "eslint app/static tests/js" in ci


def asgi_get(middleware_cls, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[dict, bytes]:
    """What a client gets for GET `path` from `middleware_cls` around an app answering `body` with `headers`."""
    import asyncio

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": headers + [(b"content-length", str(len(body)).encode())]})
        half = len(body) // 2   # in two parts, as a streamed response comes
        await send({"type": "http.response.body", "body": body[:half], "more_body": True})
        await send({"type": "http.response.body", "body": body[half:]})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    asyncio.run(middleware_cls(inner)(scope, receive, send))
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_frame_guard_comes_first_in_the_page_and_nowhere_else():
    """app.early_script puts frame_guard.js at the top of the page's <head> (before Gradio's scripts, which its
    comment says why) with the length set to match; other paths, other types and encoded bodies pass as they are."""
    from app.early_script import EarlyScript

    html = b"<!doctype html><html><head><meta charset='utf-8'><script type='module' src='x.js'></script></head></html>"
    start, got = asgi_get(EarlyScript, "/", html, [(b"content-type", b"text/html; charset=utf-8")])
    guard = assets.read("frame_guard.js").encode()
    assert got.startswith(b"<!doctype html><html><head><script>" + guard + b"</script><meta")
    assert got.count(b"frame_guard") <= guard.count(b"frame_guard") and got.endswith(b"</head></html>")
    assert dict(start["headers"])[b"content-length"] == str(len(got)).encode()
    for path, ctype, extra in (("/config", b"text/html", []), ("/", b"application/json", []),
                               ("/", b"text/html", [(b"content-encoding", b"gzip")])):
        start, got = asgi_get(EarlyScript, path, html, [(b"content-type", ctype)] + extra)
        assert got == html and dict(start["headers"])[b"content-length"] == str(len(html)).encode(), (path, ctype)

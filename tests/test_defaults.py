"""Each run default is written once, in engine/options.py (DecodeConfig's fields read it there): the CLI, the
benchmark, its report, the sweep's --resume check, the app's controls and its readers of traces name the constant.
Greps the code of engine/ and app/ (comments and docstrings left out: they may say what the default is) for each
default's literal where it is used as one: a flag's or a control's default, a field's, a missing field's, an
argument given in its place."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from engine import options as O

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "engine" / "options.py"


def _uses(word: str, field: str, args: bool = False) -> str:
    """Where a string literal stands for a default: `default=`/`value=`, a field's or parameter's default, a
    missing field's (`.get("field", ...)`, getattr), `or [...]`, a comparison with the default, and (`args`) a
    call's argument (a word that is also a name, such as the default mode, is not looked for there)."""
    w = re.escape(f'"{word}"')
    return (rf'(?:default|value)\s*=\s*{w}|:\s*[\w\[\]|. ]+=\s*{w}|\.get\(\s*"{field}"\s*,\s*{w}'
            rf'|getattr\([^()]*"{field}"\s*,\s*{w}|\bor\s+[\[(]?\s*{w}|!=\s*[\[(]?{w}'
            + (rf'|\w\([^()]*,\s*{w}\s*[,)]' if args else ""))


DEFAULTS = {  # the default's constant -> what writes it again
    "DEFAULT_MODE": _uses(O.DEFAULT_MODE, "mode"),
    "DEFAULT_RULE": _uses(O.DEFAULT_RULE, "rule", args=True),
    "DEFAULT_ACCEPTANCE": _uses(O.DEFAULT_ACCEPTANCE, "acceptance"),
    "DEFAULT_CALIBRATION": _uses(O.DEFAULT_CALIBRATION, "calibration"),
    "DEFAULT_TREE_RANK": rf'"tree_rank"[^\n]*"{O.DEFAULT_TREE_RANK}"|tree_rank\s*:\s*str\s*=\s*"',
    "DEFAULT_TREE_NODES": rf'verify\(\s*{O.DEFAULT_TREE_NODES}\s*\)|\b{O.DEFAULT_TREE_NODES}[- ]node|'
                          rf'(?:NODES|nodes)\s*(?::\s*int\s*)?=\s*{O.DEFAULT_TREE_NODES}\b|default\s*=\s*{O.DEFAULT_TREE_NODES}\b',
    "DEFAULT_MAX_NEW_TOKENS": rf'max_new\w*\s*(?::\s*int\s*)?=\s*{O.DEFAULT_MAX_NEW_TOKENS}\b|'
                              rf'"--max-new-tokens"[^\n]*default\s*=\s*{O.DEFAULT_MAX_NEW_TOKENS}\b',
    "DEFAULT_APP_MAX_NEW_TOKENS": rf'(?:max_new\w*\s*(?::\s*int\s*)?|value)\s*=\s*{O.DEFAULT_APP_MAX_NEW_TOKENS}\b',
    "MAX_UPLOAD_MB": rf'\b{O.MAX_UPLOAD_MB}\s*\*\s*1024\s*\*\s*1024|"{O.MAX_UPLOAD_MB}mb"|\b{O.MAX_UPLOAD_MB} ?MB\b',
    "UPLOAD_PARSED_MB": r'\b1[2-5]\d ?MB once parsed',
}


def code_lines(path: Path) -> list[tuple[int, str]]:
    """A file's lines as code: comments blanked, docstrings dropped."""
    src = path.read_text(encoding="utf-8")
    docs = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = src.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return [(i, line) for i, line in enumerate(lines, 1) if i not in docs]


def written_again() -> list[str]:
    hits = []
    for path in sorted(p for d in ("engine", "app") for p in (ROOT / d).rglob("*.py")):
        if path == HOME:
            continue
        for i, line in code_lines(path):
            hits += [f"{path.relative_to(ROOT)}:{i}: {name}: {line.strip()}"
                     for name, pattern in DEFAULTS.items() if re.search(pattern, line)]
    return hits


def test_each_default_is_written_once():
    assert all(hasattr(O, name) for name in DEFAULTS)
    hits = written_again()
    assert not hits, "defaults written outside engine/options.py:\n" + "\n".join(hits)


def test_the_grep_finds_a_default_written_again(tmp_path):
    """The patterns catch each way a default was written before it had one home (the sites this test found)."""
    before = {"DEFAULT_RULE": ['p.add_argument("--rules", default="earliest",', 'rules = x or ["earliest"]',
                               'run.get("rule", "earliest")', 'mode_rule(label, "earliest")',
                               'parse_inputs(prompt, REFERENCE, "earliest", 0.0, 0, max_new)',
                               'RULE_MODES = tuple(run_label("reanchor", r) for r in RULES if r != "earliest")'],
              "DEFAULT_ACCEPTANCE": ['acceptance: str = "speculative"', 'r.get("acceptance", "speculative")'],
              "DEFAULT_CALIBRATION": ['calibration=getattr(args, "calibration", "online"))'],
              "DEFAULT_TREE_RANK": ['tree_rank=run.get("tree_rank", "drafter"))', '    tree_rank: str = "drafter"'],
              "DEFAULT_TREE_NODES": ["DDTREE_NODES = 32", "return profile.verify(32) / 2", '"DDTree: a 32-node draft tree"',
                                     'p.add_argument("--nodes", type=int, default=32)'],
              "DEFAULT_MAX_NEW_TOKENS": ['p.add_argument("--max-new-tokens", type=int, default=128)',
                                         "def own_work(n: int, max_new: int = 128) -> dict:"],
              "DEFAULT_APP_MAX_NEW_TOKENS": ["    max_new_tokens: int = 96", "gr.Number(value=96, label='x')"],
              "MAX_UPLOAD_MB": ["MAX_UPLOAD_BYTES = 20 * 1024 * 1024", 'launch(max_file_size="20mb")']}
    for name, lines in before.items():
        for line in lines:
            assert re.search(DEFAULTS[name], line), (name, line)
    assert not re.search(DEFAULTS["DEFAULT_RULE"], 'if rule == "earliest":')   # the rule itself, not a default

"""The install pins have one meaning: the README's two commands, .ci/run and requirements.txt agree."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9_.\-]*)")


def readme_commands() -> list[str]:
    """The setup lines of the README's fenced bash blocks (the two commands)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    return [line for b in blocks for line in b.splitlines() if line.startswith("python3 -m venv")]


def ci_commands() -> list[str]:
    return [line for line in (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
            if line.startswith("python3 -m venv")]


def pins(text: str) -> dict[str, str]:
    return {name.lower(): version for name, version in PIN.findall(text)}


def requirements() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return pins("\n".join(line.split("#")[0] for line in lines))


def test_readme_and_ci_install_the_same():
    app, tests = readme_commands()
    (ci,) = ci_commands()
    assert app.endswith("&& python -m app") and tests.endswith("&& python -m pytest -q -n 2 --dist loadfile tests")
    assert app.rsplit("&&", 1)[0] == tests.rsplit("&&", 1)[0], "the two commands set up different things"
    # CI runs the README's test command verbatim but for pip's quiet flag
    assert ci.replace("pip install -q ", "pip install ") == tests
    assert pins(ci) and pins(ci) == pins(tests)


def test_commands_and_requirements_do_not_pin_one_package_twice():
    cmd, req = pins(readme_commands()[1]), requirements()
    assert "-r requirements.txt" in readme_commands()[1]
    assert len(req) >= 10, "requirements.txt lost its pins: the test would prove nothing"
    both = {n: (cmd[n], req[n]) for n in cmd.keys() & req.keys()}
    assert not both, f"pinned in the commands and in requirements.txt: {both}"


def test_requirements_setup_comment_matches():
    """requirements.txt's setup comment is what a reader of that file copies: it names the command's pins."""
    comment = next(line for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
                   if line.startswith("# Setup:"))
    assert pins(comment) == pins(readme_commands()[1])

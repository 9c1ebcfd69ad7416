"""Record the example traces shown before anything runs: python -m app.make_traces [--out assets/traces].

Uses the embedded target and the lesson drafter (app.examples.LESSON_DRAFTER) unless told otherwise; the traces'
recorded settings reproduce them (tests/test_example_traces.py).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.__main__ import OFFLINE_ENV

os.environ.update(OFFLINE_ENV)  # as the app: offline whatever the user's environment says

from app.examples import LESSON_DRAFTER, WRITTEN  # noqa: E402
from engine.options import DEFAULT_MODE, DEFAULT_RULE  # noqa: E402

# (file name, one of the page's written example prompts, max new tokens)
PROMPTS = [("code-fibonacci", WRITTEN[0][1], 96), ("math-speed", WRITTEN[2][1], 80), ("chat-focus", WRITTEN[4][1], 64)]


def main(argv=None) -> int:
    from engine.paths import REPO
    from engine.paths import TRACES as TRACES_DIR

    p = argparse.ArgumentParser(prog="python -m app.make_traces", description=__doc__)
    p.add_argument("--out", default=str(TRACES_DIR))
    p.add_argument("--target", default=None)
    p.add_argument("--drafter", default=str(LESSON_DRAFTER))
    p.add_argument("--mode", default=DEFAULT_MODE)
    p.add_argument("--rule", default=DEFAULT_RULE)
    a = p.parse_args(argv)

    from engine.decode import DecodeConfig, Engine
    from engine.models import load_models
    from engine.trace import load_trace, save_trace

    eng = Engine(load_models(a.target, a.drafter))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, prompt, n in PROMPTS:
        trace = eng.generate(prompt, DecodeConfig(mode=a.mode, rule=a.rule, max_new_tokens=n))
        for key in ("target", "drafter"):  # repository paths stored relative (the traces are committed)
            value = str(trace["config"].get(key) or "")
            if value.startswith(str(REPO) + os.sep):
                trace["config"][key] = os.path.relpath(value, REPO)
        path = out / f"{name}-{a.mode}.json"
        save_trace(path, trace)
        load_trace(path)  # validates
        s = trace["stats"]
        print(f"{path}: {s['rounds']} rounds, tau {s['tau']:.2f}, {os.path.getsize(path) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

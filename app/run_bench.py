"""The Explore tab's default run (the controls as the page opens: engine/options.py DEFAULT_APP_*), through the app's
own run path (app.runs: the per-run time limit included) on the page's example prompts, with plain decoding (`ar`)
in the same process beside it: tokens written, seconds, whether it finished within the limit, ×N. What docs/app.md's
figures come from; rerun it:

    python -m app.run_bench                 # a quiet machine
    python -m app.run_bench --busy          # beside a busy second process (one core spinning)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

from engine.models.args import add_model_args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m app.run_bench", description=__doc__.split("\n\n")[0])
    add_model_args(ap)
    ap.add_argument("--prompts", type=int, default=4, help="the page's first N example prompts, then every 5th (default 4)")
    ap.add_argument("--busy", action="store_true", help="a second process spinning one core during the runs")
    a = ap.parse_args(argv)
    if a.prompts < 1:
        ap.error(f"--prompts: at least 1, got {a.prompts}")
    return a


def prompts(k: int) -> list[tuple[str, str]]:
    """The page's example prompts: the written ones first, then HumanEval and MT-Bench, spread over the list."""
    from .examples import example_prompts

    every = example_prompts()
    picked = every[:2] + every[2::5]
    return picked[:k]


def timed(engine, settings) -> dict:
    """One run as the Run button makes it (start_run, stream_run under the per-run limit)."""
    from . import runs

    run, ids = runs.start_run(engine, settings)
    t0, live = time.monotonic(), None
    for live, _ in runs.stream_run(engine, run, ids, {"mode": settings.mode}):
        pass
    s = time.monotonic() - t0
    # the target's first token (after the prefill), then each round's
    n = (live["first_token"] is not None) + sum(len(r["new_tokens"]) for r in live["rounds"]) if live else 0
    return {"tokens": n, "s": s, "status": runs.end_status(run)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from engine.options import DEFAULT_APP_MAX_NEW_TOKENS, DEFAULT_APP_MAX_SHIFTED, DEFAULT_APP_MODE, DEFAULT_RULE

    from . import runs, session
    from .race_bench import load

    # as the app's: loaded, profiled (the auto budget's profile, as a page's first run finds it); the Race tab's
    # bfloat16 copy and calibration race are left out (no Explore run reads them)
    ld = load(args, race=False)
    engine = ld.engine_for(ld.default_drafter())
    print(f"drafter {ld.default_drafter()}; {DEFAULT_APP_MODE}, shifted {DEFAULT_APP_MAX_SHIFTED}, "
          f"{DEFAULT_APP_MAX_NEW_TOKENS} tokens, limit {session.RUN_SECONDS:g} s a run", flush=True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    done = 0
    try:
        for label, prompt in prompts(args.prompts):
            load0 = open("/proc/loadavg").read().split()[0]
            out = {}
            for mode, shifted in ((DEFAULT_APP_MODE, DEFAULT_APP_MAX_SHIFTED), ("ar", "all")):
                settings = runs.parse_inputs(prompt, mode, DEFAULT_RULE, 0.0, 0, DEFAULT_APP_MAX_NEW_TOKENS, shifted)
                out[mode] = timed(engine, settings)
            d, ar = out[DEFAULT_APP_MODE], out["ar"]
            done += d["status"] == "done"   # its tokens, or a stop token first; not cut at the limit
            x = (d["tokens"] / d["s"]) / (ar["tokens"] / ar["s"]) if d["s"] and ar["s"] and ar["tokens"] else 0.0
            print(f"{label[:40]}: {d['tokens']} tokens in {d['s']:.1f} s ({d['status']}); plain decoding "
                  f"{ar['tokens']} in {ar['s']:.1f} s; ×{x:.2f} (load {load0} -> "
                  f"{open('/proc/loadavg').read().split()[0]})", flush=True)
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait()
    print(f"finished within the limit ({DEFAULT_APP_MAX_NEW_TOKENS} tokens or a stop token): {done} of "
          f"{len(prompts(args.prompts))} prompts")


if __name__ == "__main__":
    main()

"""The Race tab's demo preset, raced N times back to back as the page races it (no browser): each lane's ×N against
plain decoding, passes and same-text verdict per race, then each lane's spread over the races and the ×N gap of
lanes that took the same passes. What docs/race.md's figures come from; rerun it on a quiet machine:

    python -m app.race_bench --races 3            # the preset (after the load's profile and calibration race)
    python -m app.race_bench --races 3 --busy     # beside a busy second process (one core spinning)
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from engine.models.args import add_model_args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m app.race_bench", description=__doc__.split("\n\n")[0])
    add_model_args(ap)
    ap.add_argument("--races", type=int, default=3, help="preset races back to back (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="tokens a lane (default: the preset's)")
    ap.add_argument("--busy", action="store_true", help="a second process spinning one core during the races")
    ap.add_argument("--json", action="store_true", help="one JSON object per race instead of the table")
    a = ap.parse_args(argv)
    if a.races < 1:
        ap.error(f"--races: at least 1, got {a.races}")
    return a


def load(args: argparse.Namespace, race: bool = True):
    """A ModelLoader as the app's, loaded and profiled; with `race`, as the Race tab finds it too (its bfloat16 copy
    profiled, the calibration race run)."""
    from .loader import ModelLoader

    ld = ModelLoader(args, race=race).start()
    ld.wait()
    ld.profiles_done.wait()
    if ld.error:
        raise SystemExit(f"error: {ld.error}")
    return ld


def one_race(racer, preset: tuple, tokens: int | None) -> dict:
    """The preset's race through the Race tab's own callback: its final payload."""
    from . import session

    prompt, lanes, n, repeatable, dtype, drafter, _ = preset
    out = None
    for out in racer.on_race(prompt, lanes, tokens or n, repeatable, dtype, session.new_state(), drafter):
        pass
    return json.loads(out[0])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from . import race, session

    ld = load(args)
    session.RUN_SECONDS = 3600.0   # a loaded machine's lanes outlast the page's per-run limit: no lane cut
    racer = race.Race(ld, session.Sessions(), callbacks=None)
    preset = racer.preset()
    print(preset[-1].split("\n\n")[0].replace("**", ""), flush=True)
    # the calibration race's own figures (each candidate's tokens/s), to set beside the races' below
    print("calibration race: " + "; ".join(f"{m['label']} ({m['drafter']}, {m['dtype']}) {m['tps']} tok/s"
                                           for m in ld.race_calibration or []), flush=True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    xs: dict[str, list[float]] = {}
    try:
        for k in range(args.races):
            load0 = open("/proc/loadavg").read().split()[0]
            t0 = time.monotonic()
            p = one_race(racer, preset, args.max_new_tokens)
            lanes = p["lanes"]
            row = {ln["label"]: {"tokens": ln["tokens"], "passes": ln["passes"], "tps": ln["tps"],
                                 "x": ln.get("speedup"), "same": ln.get("same"), "shifted": ln.get("shifted"),
                                 "gain": ln.get("gain")} for ln in lanes}
            for label, r in row.items():
                if r["x"] is not None:
                    xs.setdefault(label, []).append(r["x"])
            if args.json:
                print(json.dumps({"race": k + 1, "load": load0, "s": round(time.monotonic() - t0, 1), "lanes": row}))
                continue
            print(f"race {k + 1} ({time.monotonic() - t0:.0f} s, load {load0} -> "
                  f"{open('/proc/loadavg').read().split()[0]}): " + "; ".join(
                      f"{lb} {r['tps']} tok/s, {r['passes']} passes" + (
                          f", ×{r['x']:.2f}, {'same text' if r['same'] else 'DIFFERS'}" if r["x"] is not None else "")
                      + (f", {r['shifted']} from shifted blocks, gain {r['gain']}" if lb.startswith("reanchor") else "")
                      for lb, r in row.items()), flush=True)
            same = [(a, b) for a in row for b in row if a < b and row[a]["x"] and row[b]["x"]
                    and row[a]["passes"] == row[b]["passes"]]
            for a, b in same:
                print(f"  same passes ({row[a]['passes']}): {a} ×{row[a]['x']:.2f}, {b} ×{row[b]['x']:.2f}: "
                      f"{abs(row[a]['x'] / row[b]['x'] - 1) * 100:.1f}% apart")
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait()
    for label, v in xs.items():
        m = statistics.mean(v)
        print(f"{label}: ×N {', '.join(f'{x:.2f}' for x in v)}; mean {m:.2f}, spread "
              f"{(min(v) / m - 1) * 100:+.0f}% .. {(max(v) / m - 1) * 100:+.0f}%")


if __name__ == "__main__":
    main()

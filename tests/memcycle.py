"""Memory of the app's server over cycles of 8 viewers + 4 runners (python tests/memcycle.py [APP ARGS]).

Starts `python -m app` on a free port, waits for the model, then per cycle: 8 clients each load a shipped example
trace and step through rounds (a 13 MB tiled trace for half of them), and 4 clients each run a prompt (the one
queue slot serialises them) and export; every client closes; once the server has released their sessions (the
heartbeat ends: ~12-30 s) the RSS is read. Prints the fresh, peak and after-close RSS per cycle.
"""
from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_fixtures import REPO, AppProcess, real_trace, tiled_trace  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402


def rss_mib(pid: int) -> float:
    status = open(f"/proc/{pid}/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def main(argv: list[str]) -> None:
    cycles = 2
    tmp = Path(tempfile.mkdtemp(prefix="memcycle-"))
    big = tmp / "big.json"
    big.write_text(json.dumps(tiled_trace(real_trace(), 600)))
    example = sorted((REPO / "assets" / "traces").glob("*.json"))[0]
    app = AppProcess(argv, tmp / "app.log")
    peak = [0.0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(app.proc.pid))
            time.sleep(0.2)

    try:
        app.wait_up(300)
        app.wait_model(Client(app.url, verbose=False), timeout=900)
        # the server's start work done ("ready" comes first): the profiles of float32 and of its bfloat16 copy
        app.wait_log("hardware profile measured", timeout=600, count=1 if "bfloat16" in argv else 2)
        time.sleep(5)
        fresh = rss_mib(app.proc.pid)
        print(f"fresh (model loaded, no client): {fresh:.0f} MiB", flush=True)
        threading.Thread(target=watch, daemon=True).start()
        for cycle in range(cycles):
            errors: list[str] = []

            def viewer(k: int):
                c = Client(app.url, verbose=False)
                try:
                    c.predict(handle_file(str(big if k % 2 else example)), api_name="/load_trace")
                    for _ in range(10):
                        c.predict(api_name="/next_round")
                    c.predict(api_name="/last_round")
                except Exception as e:  # noqa: BLE001  (counted and printed)
                    errors.append(f"viewer {k}: {e}")
                finally:
                    c.close()

            def runner(k: int):
                c = Client(app.url, verbose=False)
                try:
                    c.predict("Write a haiku about the sea.", "reanchor", "earliest", 0, k, 24, "all", "all",
                              None, api_name="/run")
                except Exception as e:  # noqa: BLE001
                    errors.append(f"runner {k}: {e}")
                finally:
                    c.close()

            threads = [threading.Thread(target=viewer, args=(k,)) for k in range(8)]
            threads += [threading.Thread(target=runner, args=(k,)) for k in range(4)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            held = rss_mib(app.proc.pid)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and rss_mib(app.proc.pid) > fresh * 1.1:
                time.sleep(2)
            time.sleep(5)
            after = rss_mib(app.proc.pid)
            print(f"cycle {cycle + 1}: clients done in {time.monotonic() - t0:.0f} s, {len(errors)} errors; "
                  f"RSS with clients {held:.0f} MiB, peak so far {peak[0]:.0f} MiB, after close {after:.0f} MiB "
                  f"({100 * (after / fresh - 1):+.1f}% of fresh)", flush=True)
            for e in errors[:5]:
                print("  ", e[:300], flush=True)
    finally:
        stop.set()
        app.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

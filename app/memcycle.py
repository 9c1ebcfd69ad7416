"""The app server's memory over cycles of 8 viewers + 4 runners: python -m app.memcycle [APP ARGS] [--cycles N].

Starts `python -m app APP ARGS` on a free port and waits for its model and hardware profiles; then, per cycle, 8
clients each load an example trace and step through rounds (half of them a copy of it tiled to ~13 MB),
4 clients each run a prompt (the one queue slot serialises them), and every client closes; once the server has
released their sessions (the heartbeat ends: ~12-30 s) its RSS is read. Prints the fresh, peak and after-close
RSS per cycle: a server that keeps what closed sessions held grows cycle by cycle (docs/security.md)."""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from engine.options import DEFAULT_RULE
from engine.paths import REPO
from engine.trace import tiled_trace


def rss_mib(pid: int) -> float:
    """A process's resident memory, from /proc (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def _serve(app_args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """`python -m app` on a free loopback port, its output in `log`; returns once the page answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port), *app_args], cwd=REPO,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"the app exited ({proc.returncode}): {log}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the app did not answer in 5 minutes: {log}")


def _profiled(client, timeout: float = 1500.0) -> None:
    """Waits for the model and the hardware profiles (the server's start work) to be done."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        status = client.predict(api_name="/model_status")[0]
        if "failed" in status:
            raise SystemExit(status)
        if status.startswith("ready") and "measuring" not in status:
            return
        time.sleep(1.0)
    raise SystemExit("the model and its profile took over 25 minutes")


def main(argv: list[str] | None = None) -> None:
    from gradio_client import Client, handle_file

    p = argparse.ArgumentParser(prog="python -m app.memcycle", description=__doc__)
    p.add_argument("--cycles", type=int, default=2)
    a, app_args = p.parse_known_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="memcycle-"))
    example = sorted((REPO / "assets" / "traces").glob("*.json"))[0]
    big = tmp / "big.json"   # ~13 MB, under the upload limit (engine.options.MAX_UPLOAD_MB)
    big.write_text(json.dumps(tiled_trace(json.loads(example.read_text()), max(1, 13_000_000 // example.stat().st_size))))
    proc, url = _serve(app_args, tmp / "app.log")
    peak, stop = [0.0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(proc.pid))
            time.sleep(0.2)

    def viewer(k: int, errors: list[str]) -> None:
        c = Client(url, verbose=False)
        try:
            c.predict(handle_file(str(big if k % 2 else example)), api_name="/load_trace")
            for _ in range(10):
                c.predict(api_name="/next_round")
            c.predict(api_name="/last_round")
        except Exception as e:  # noqa: BLE001  (counted and printed)
            errors.append(f"viewer {k}: {e}")
        finally:
            c.close()

    def runner(k: int, errors: list[str]) -> None:
        c = Client(url, verbose=False)
        try:
            c.predict("Write a haiku about the sea.", "reanchor", DEFAULT_RULE, 0, k, 24, "all", "all", None,
                      api_name="/run")
        except Exception as e:  # noqa: BLE001
            errors.append(f"runner {k}: {e}")
        finally:
            c.close()

    try:
        _profiled(Client(url, verbose=False))
        time.sleep(5)
        fresh = rss_mib(proc.pid)
        print(f"fresh (model loaded, no client): {fresh:.0f} MiB", flush=True)
        threading.Thread(target=watch, daemon=True).start()
        for cycle in range(a.cycles):
            errors: list[str] = []
            threads = [threading.Thread(target=viewer, args=(k, errors)) for k in range(8)]
            threads += [threading.Thread(target=runner, args=(k, errors)) for k in range(4)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            held = rss_mib(proc.pid)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and rss_mib(proc.pid) > fresh * 1.1:
                time.sleep(2)
            time.sleep(5)
            after = rss_mib(proc.pid)
            print(f"cycle {cycle + 1}: clients done in {time.monotonic() - t0:.0f} s, {len(errors)} errors; "
                  f"RSS with clients {held:.0f} MiB, peak so far {peak[0]:.0f} MiB, after close {after:.0f} MiB "
                  f"({100 * (after / fresh - 1):+.1f}% of fresh)", flush=True)
            for e in errors[:5]:
                print("  ", e[:300], flush=True)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()

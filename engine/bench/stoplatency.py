"""How long Run.stop() takes to end a run at the node bound (python -m engine.bench.stoplatency [MODE NODES]).

The embedded target and its shipped drafter, mode ddtree at engine.options.MAX_TRIE_NODES (every round verifies
that many nodes): stop() is called from another thread at several points inside rounds; prints the time from
stop() to the loop's end, beside the round times it cut short.
"""
from __future__ import annotations

import sys
import threading
import time

from engine.decode import DecodeConfig, Engine
from engine.models import load_models
from engine.options import MAX_TRIE_NODES


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else "ddtree"
    nodes = int(argv[1]) if len(argv) > 1 else MAX_TRIE_NODES
    eng = Engine(load_models())
    ids = eng.encode_prompt("Write a Python function that returns the n-th Fibonacci number iteratively.")
    cfg = DecodeConfig(mode=mode, max_new_tokens=256, max_trie_nodes=nodes, ignore_eos=True)
    for delay in (0.5, 3.0, 7.0, 12.0):
        run = eng.run(ids, cfg)
        ended = {}

        def consume():
            for _ in run:
                pass
            ended["t"] = time.perf_counter()

        th = threading.Thread(target=consume)
        t0 = time.perf_counter()
        th.start()
        time.sleep(delay)
        pressed = time.perf_counter()
        run.stop()
        th.join()
        rounds = [r["round_ms"] / 1e3 for r in run.rounds if "round_ms" in r]
        print(f"{mode} @ {nodes} nodes: stop at {pressed - t0:.1f} s took effect in {ended['t'] - pressed:.2f} s "
              f"({len(run.rounds)} rounds done; their times {', '.join(f'{x:.1f}' for x in rounds[:4]) or '-'} s)",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

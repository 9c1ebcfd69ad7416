"""DFlash 2 drafters (the dflash package's DFlash2DraftModel) run through the same engine, losslessly."""
import time

import dflash.model
import torch
from dflash.model import dflash_generate

from engine.decode import DecodeConfig, Engine
from engine.decode.checks import greedy_reference
from tiny import dflash2_models


def test_dflash2_is_lossless_and_matches_reference(monkeypatch):
    monkeypatch.setattr(dflash.model, "_cuda_time", time.perf_counter)
    for seed in range(3):
        m = dflash2_models(seed)
        eng = Engine(m, draft_head_dtype=None)
        ids = eng.encode_prompt("ab c")
        want = greedy_reference(m.target, ids, 16)
        for mode in ("dflash", "reanchor", "extension"):
            run = eng.run(ids, DecodeConfig(mode=mode, max_new_tokens=16, ignore_eos=True))
            assert run.finish()["output_ids"] == want, (seed, mode)
        ref = dflash_generate(m.drafter, m.target, torch.tensor([ids]), 16, None, return_stats=True)
        run = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=16, ignore_eos=True))
        rounds = list(run)
        assert [len(r["new_tokens"]) for r in rounds] == ref.acceptance_lengths


def test_dflash2_runs_on_two_threads_keep_their_seeds():
    """DFlash 2's selector samples with the process-wide RNG, which each run seeds from its own
    generator: two runs on two threads at once give what each gives alone."""
    import threading
    eng = Engine(dflash2_models(1, init=0.12))
    ids = eng.encode_prompt("ab c")

    def cfg(seed):
        return DecodeConfig(mode="reanchor", temperature=1.0, seed=seed, max_new_tokens=60, ignore_eos=True)

    alone = {s: eng.run(ids, cfg(s)).finish()["output_ids"] for s in (3, 4)}
    for _ in range(4):
        together = {}

        def go(s):
            together[s] = eng.run(ids, cfg(s)).finish()["output_ids"]
        threads = [threading.Thread(target=go, args=(s,)) for s in (3, 4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert together == alone

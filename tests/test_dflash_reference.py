"""`dflash` mode reproduces the dflash package's own dflash_generate: tokens and per-round lengths."""
import time

import dflash.model
import pytest
import torch
from dflash.model import dflash_generate

from engine.decode import DecodeConfig, Engine
from tiny import tiny_models


@pytest.mark.parametrize("kind,seed,n", [("llama", 0, 30), ("llama", 4, 17), ("qwen3", 2, 30),
                                         ("qwen3", 5, 9)])
def test_dflash_mode_matches_reference(kind, seed, n, monkeypatch):
    # its stats clock calls torch.cuda.synchronize; on the CPU a plain clock does the same job
    monkeypatch.setattr(dflash.model, "_cuda_time", time.perf_counter)
    m = tiny_models(kind, seed)
    eng = Engine(m, draft_head_dtype=None)  # the reference projects the vocabulary in fp32 too
    ids = eng.encode_prompt("ab c ba")
    ref = dflash_generate(m.drafter, m.target, torch.tensor([ids]), n, None, return_stats=True)
    run = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=n, ignore_eos=True))
    rounds = list(run)
    assert run.result["output_ids"] == ref.output_ids[0, len(ids):].tolist()
    assert [len(r["new_tokens"]) for r in rounds] == ref.acceptance_lengths

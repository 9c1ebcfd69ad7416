"""`dflash` mode reproduces the dflash package's own dflash_generate (tokens and per-round lengths), and
`ddtree` DDTree's ddtree_generate (tokens and, in every round that drafts a full block, the tree itself)
where DDTree's code is at hand: REANCHOR_DDTREE=<checkout folder> or an importable `ddtree` (CI has neither:
skipped). Both with fp32 drafts, as a user gets them with --draft-dtype float32."""
import os
import time
from dataclasses import replace

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
    m = replace(tiny_models(kind, seed), draft_dtype="float32")  # as --draft-dtype float32 loads them
    eng = Engine(m)  # the reference projects the vocabulary in fp32 too
    ids = eng.encode_prompt("ab c ba")
    ref = dflash_generate(m.drafter, m.target, torch.tensor([ids]), n, None, return_stats=True)
    run = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=n, ignore_eos=True))
    rounds = list(run)
    assert run.result["output_ids"] == ref.output_ids[0, len(ids):].tolist()
    assert [len(r["new_tokens"]) for r in rounds] == ref.acceptance_lengths


def test_draft_dtype_float32_drafts_in_fp32_end_to_end():
    """--draft-dtype float32 (Models.draft_dtype) keeps the vocabulary projection in fp32: the drafter's
    logits are those of the target's own LM head; the default keeps the cheaper bf16 projection; the
    trace says which."""
    m = tiny_models("qwen3", 2)
    asked, auto, own = Engine(replace(m, draft_dtype="float32")), Engine(m), Engine(m, draft_head_dtype=None)
    assert asked.draft_head_dtype == own.draft_head_dtype == torch.float32
    assert auto.draft_head_dtype == torch.bfloat16
    h = torch.randn(2, 7, m.target.config.hidden_size)
    assert torch.equal(asked.draft_head(h), m.target.lm_head(h))
    assert not torch.equal(auto.draft_head(h), m.target.lm_head(h))
    cfg = DecodeConfig(mode="dflash", max_new_tokens=6, ignore_eos=True)
    ids = asked.encode_prompt("ab")
    runs = [e.run(ids, cfg) for e in (asked, auto)]
    for r in runs:
        r.finish()
    assert runs[0].trace()["config"]["draft_head_dtype"] == "float32"
    assert runs[1].trace()["config"]["draft_head_dtype"] == "bfloat16"
    assert runs[0].trace()["config"]["draft_dtype"] == "float32"


def _ddtree():
    from engine.bench.reference import load_ddtree
    try:
        return load_ddtree(os.environ.get("REANCHOR_DDTREE") or None)
    except ImportError as e:  # a checkout without its dependencies (loguru, numpy, datasets)
        pytest.skip(f"DDTree's ddtree.py does not import here: {e}")


@pytest.mark.parametrize("kind,seed,n", [("qwen3", 2, 40), ("llama", 0, 33)])
def test_ddtree_mode_builds_ddtree_generates_trees(kind, seed, n):
    dd = _ddtree()
    if dd is None:
        pytest.skip("DDTree's code is not at hand (REANCHOR_DDTREE=<checkout> or an importable ddtree)")
    from engine.bench.reference import compare, engine_run, reference_run
    m = replace(tiny_models(kind, seed, block_size=16), draft_dtype="float32")
    eng = Engine(m)
    ids = eng.encode_prompt("ab c ba")
    mine, ref = engine_run(eng, ids, "ddtree", n), reference_run("ddtree", m, ids, n, dd)
    c = compare(mine, ref, eng.block_size, m.drafter.mask_token_id)
    assert c["same_tokens"] and c["aligned"] == mine["rounds"], c
    assert c["full_rounds"] >= 2 and c["same_tree"] == c["full_rounds"], c


def test_the_reference_loop_runs_on_the_models_without_the_engines_hooks():
    # the bench times dflash_generate on the engine's own models: it must not pay for the engine's feature hooks,
    # stop checks and rotary lookups there (a layer with a hook takes nn.Module's slow path; a forward set on a
    # module is a check per call), nor get their speed, and the engine gets them back after
    from engine.bench.reference import reference_run

    eng = Engine(tiny_models("qwen3", 2), draft_head_dtype=None)
    ids = eng.encode_prompt("ab c")
    before = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=12, ignore_eos=True)).finish()
    layers = [m for model in (eng.models.target, eng.models.drafter) for m in model.modules()]
    seen = []

    def look(*args, **kwargs):
        seen.append((sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in layers),
                     sum("forward" in m.__dict__ for m in layers)))
        return real(*args, **kwargs)

    real, dflash.model.dflash_generate = dflash.model.dflash_generate, look
    try:
        ref = reference_run("dflash", eng.models, ids, 12)
    finally:
        dflash.model.dflash_generate = real
    assert seen == [(0, 0)]
    assert sum(len(m._forward_hooks) for m in layers) > 0 and sum("forward" in m.__dict__ for m in layers) > 0
    after = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=12, ignore_eos=True)).finish()
    assert after["output_ids"] == before["output_ids"] == ref["output_ids"]

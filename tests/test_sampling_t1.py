"""Decoding at T=1 through the engine: the target's law in every mode, DFlash's own acceptance.

- One round from a fixed state with retained features (so shifted blocks are drafted and attach),
  repeated with fresh seeds: its first two committed tokens (completed by the target when it
  commits one) follow the target's law, by a chi-square test, in every mode, the trie modes with
  rule "all" too, and with a DFlash 2 drafter (sequential laws over top-k candidates).
- `dflash` mode's acceptance equals the `dflash` package's dflash_generate (rejection sampling)
  in law: per-run mean acceptance over many seeds, same prompts; the same statistic rejects
  sample-and-match. Speculative sampling accepts more than sample-and-match in reanchor mode too.

Breakages seen to fail here (by hand, then reverted): the residual p instead of max(p - q, 0) and
drafts' laws recorded at 2T (most modes' law tests); DFlash 2's q scattered onto the wrong
candidates (the DFlash 2 law test); its selector left on the unseeded global RNG (the seed test).
The exact walk itself is tests/test_spec_sampling.py's.
"""
from __future__ import annotations

import time

import dflash.model
import pytest
import torch

from engine.bench.reference import dflash_vs_reference, engine_runs, per_run_acceptance, z
from engine.decode import DecodeConfig, Engine
from engine.decode.checks import LAW_MODES, law_case
from tiny import dflash2_models, tiny_models


@pytest.mark.parametrize("mode,rule", LAW_MODES)
def test_round_follows_the_target_law(mode, rule):
    recs = law_case(tiny_models("qwen3", 0, block_size=6, init=0.12), mode, rule)
    if mode not in ("ar", "dflash"):  # the shifted blocks, or a tree's branches, took part
        assert sum(len(r["paths"]) - 1 for r in recs) >= 10
    if mode not in ("ar", "dflash", "ddtree", "reanchor-tree"):  # sampled drafts with their laws
        assert all(b["q"] is not None for r in recs for b in r["shifted"])
    if mode in ("ddtree", "reanchor-tree"):  # point-mass branches: the target took one off the chain
        assert any(r["trie"]["rank"][n] > 0 for r in recs for n in r["accepted_nodes"][1:])
    if mode in ("reanchor", "in-block") and rule != "auto-nodes":  # and tokens came through them
        assert sum(1 for r in recs for n in r["accepted_nodes"][1:]
                   if 0 not in [r["paths"][p]["source"] for p in r["trie"]["provenance"][n]]) >= 30


def test_dflash2_round_follows_the_target_law():
    """DFlash 2's selector: q given the previous token, over its top-k (scattered); global RNG."""
    recs = law_case(dflash2_models(1, init=0.12), "reanchor", "earliest")
    assert all(0 < q <= 1 for r in recs for q in r["baseline_q"])


def test_dflash2_runs_follow_the_seed_and_leave_the_global_rng():
    """Its selector samples with the global RNG: the engine seeds that from the run's generator
    and restores it, so a seed gives one output and callers' global draws are untouched."""
    eng = Engine(dflash2_models(1, init=0.12))
    ids = eng.encode_prompt("ab c")
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    outs = [eng.run(ids, DecodeConfig(mode="reanchor", temperature=1.0, seed=3, max_new_tokens=12,
                                      ignore_eos=True)).finish()["output_ids"] for _ in range(3)]
    assert torch.equal(torch.rand(3), before)
    assert outs[0] == outs[1] == outs[2]


def test_dflash_acceptance_matches_dflash_generate(monkeypatch):
    """Same prompts, 2 x 25 seeds, T=1: dflash mode's per-run mean acceptance is within 3.5
    standard errors of dflash_generate's; sample-and-match's is not (and is lower)."""
    monkeypatch.setattr(dflash.model, "_cuda_time", time.perf_counter)
    # a flat target and drafter: rejection sampling accepts much more than sample-and-match
    r = dflash_vs_reference(tiny_models("qwen3", 2, init=0.05), range(25))
    assert abs(z(r["speculative"], r["reference"])) < 3.5, r
    assert z(r["reference"], r["match"]) > 5 and z(r["speculative"], r["match"]) > 5, r


def test_speculative_accepts_more_than_match_in_reanchor():
    m = tiny_models("llama", 3, init=0.1)
    eng = Engine(m)
    prompts = [eng.encode_prompt(p) for p in ("ab c ba", "c")]
    spec = per_run_acceptance(engine_runs(eng, prompts, range(15), 16, mode="reanchor"))
    match = per_run_acceptance(engine_runs(eng, prompts, range(15), 16, mode="reanchor", acceptance="match"))
    assert z(spec, match) > 2, (spec, match)

"""Lossless: every mode and rule at T=0 (fp32) returns exactly target-only greedy decoding."""
import torch

from engine.options import MODES
from engine.decode import DecodeConfig, Engine
from engine.decode.checks import LOSSLESS_PROMPTS, greedy_reference, lossless_configs
from tiny import tiny_models

N_NEW = 20


def test_every_mode_and_rule_is_lossless():
    gained = 0
    pairs = [(kind, seed, p) for kind in ("llama", "qwen3") for seed, p in enumerate(LOSSLESS_PROMPTS)]
    for kind, seed, prompt in pairs:                  # 20 prompt/seed pairs
        eng = Engine(tiny_models(kind, seed, block_size=4 + seed % 3))
        ids = eng.encode_prompt(prompt)
        want = greedy_reference(eng.models.target, ids, N_NEW)
        for mode, rule in lossless_configs():
            run = eng.run(ids, DecodeConfig(mode=mode, rule=rule, max_new_tokens=N_NEW, seed=seed,
                                            ignore_eos=True))
            rounds = list(run)
            assert run.result["output_ids"] == want, (kind, seed, mode, rule)
            assert sum(len(r["new_tokens"]) for r in rounds) + 1 == N_NEW
            gained += sum(1 for r in rounds for n in r["accepted_nodes"]
                          if 0 not in [r["paths"][p]["source"] for p in r["trie"]["provenance"][n]])
    assert gained > 0, "no token was ever accepted through a shifted block: the test proves little"
    assert set(m for m, _ in lossless_configs()) == set(MODES)


def test_budgets_stay_lossless():
    eng = Engine(tiny_models("llama", 3))
    ids = eng.encode_prompt("ab c")
    want = greedy_reference(eng.models.target, ids, N_NEW)
    for k, n in [(0, None), (1, None), (3, 6), (None, 2), (None, 1)]:
        run = eng.run(ids, DecodeConfig(max_new_tokens=N_NEW, max_shifted=k, max_trie_nodes=n,
                                        ignore_eos=True))
        rounds = list(run)
        assert run.result["output_ids"] == want
        assert all(len(r["shifted"]) <= (k if k is not None else 99) for r in rounds)
        assert all(len(r["trie"]["tokens"]) <= (n or 999) for r in rounds)


def test_calibrated_tree_ranking_is_lossless():
    """tree_rank "calibrated" (trees ranked by the acceptance the run measures, engine/decode/cost.py
    TreeRanker), under a fixed and the auto node budget: the target's own greedy decoding, the ranker
    learning from the rounds (it is handed to the run and observes them), and the trees it grows under
    the fixed budget not always the drafter-ranked ones."""
    from engine.decode.cost import budget_for
    from engine.trace import validate_trace
    differ = 0
    for kind, seed, prompt in (("llama", 3, "ab c"), ("qwen3", 4, "bbb aa")):
        eng = Engine(tiny_models(kind, seed, block_size=5))
        ids = eng.encode_prompt(prompt)
        want = greedy_reference(eng.models.target, ids, N_NEW)
        for mode in ("ddtree", "reanchor-tree"):
            for nodes in (6, "auto"):
                trees = {}
                for rank in ("drafter", "calibrated"):
                    cfg = DecodeConfig(mode=mode, max_new_tokens=N_NEW, max_trie_nodes=nodes, ignore_eos=True,
                                       tree_rank=rank)
                    budget = budget_for(eng, cfg)
                    run = eng.run(ids, cfg, budget)
                    trees[rank] = [r["trie"]["tokens"] for r in run]
                    assert run.result["output_ids"] == want, (kind, mode, nodes, rank)
                    assert validate_trace(run.trace())["config"]["tree_rank"] == rank
                    if rank == "calibrated":
                        assert sum(getattr(budget, "ranker", budget).seen.values()) > 0
                differ += nodes == 6 and trees["drafter"] != trees["calibrated"]  # auto: timing differs too
    assert differ > 0


def test_stop_token_ends_the_run():
    eng = Engine(tiny_models("llama", 1))
    ids = eng.encode_prompt("ab")
    full = greedy_reference(eng.models.target, ids, 60)
    stop = full[5]
    eng.stop_ids = [stop]
    first = full.index(stop)
    run = eng.run(ids, DecodeConfig(max_new_tokens=60))
    list(run)
    assert run.result["output_ids"] == full[: first + 1]


def test_sliding_window_targets_are_lossless():
    """Targets whose layers see only the last W positions (Qwen3 with use_sliding_window: the upper
    half of the layers; Mistral: every layer), with runs several windows long: every mode equals
    the target's own greedy decoding, whose masks transformers builds."""
    for kind, seed in (("qwen3", 0), ("mistral", 5)):
        eng = Engine(tiny_models(kind, seed, block_size=5, window=6))
        ids = eng.encode_prompt("ab c ab")
        want = greedy_reference(eng.models.target, ids, 30)
        for mode, rule in lossless_configs():
            if rule in ("earliest", "fixed"):
                run = eng.run(ids, DecodeConfig(mode=mode, rule=rule, max_new_tokens=30, ignore_eos=True))
                assert run.finish()["output_ids"] == want, (kind, mode, rule)


def test_targets_with_other_attention_kinds_are_refused():
    """Chunked or linear attention cannot take a tree mask over a compacted cache: a named error."""
    import pytest
    from engine.errors import InputError
    from transformers import Qwen3Config
    models = tiny_models("qwen3", 0)
    models.target.config = Qwen3Config(num_hidden_layers=4, eos_token_id=2,
                                       layer_types=["full_attention", "chunked_attention"] * 2)
    with pytest.raises(InputError, match="target: attention layers of kind chunked_attention"):
        Engine(models)


def test_a_run_left_early_still_gives_its_trace():
    """A caller that breaks out of the loop, after stop() or without it, gets the trace of the run
    so far, marked stopped, and it validates."""
    from engine.trace import validate_trace
    eng = Engine(tiny_models("llama", 1))
    ids = eng.encode_prompt("ab")
    for stop in (True, False):
        run = eng.run(ids, DecodeConfig(max_new_tokens=40, ignore_eos=True))
        for i, _ in enumerate(run):
            if i == 1:
                run.stop() if stop else None
                break
        trace = validate_trace(run.trace())
        assert run.result["stopped"] and len(trace["rounds"]) == 2
        assert len(trace["output_ids"]) == 1 + sum(len(r["new_tokens"]) for r in trace["rounds"]) < 40


def test_round_records_stage_times():
    """Every round records where its time went (trace.STAGES), within its round_ms; validation takes them
    and refuses a negative one."""
    import pytest
    from engine.trace import STAGES, TraceError, validate_trace
    eng = Engine(tiny_models("qwen3", 2))
    for mode in ("reanchor", "ddtree", "ar"):
        run = eng.run(eng.encode_prompt("ab c"), DecodeConfig(mode=mode, max_new_tokens=12, ignore_eos=True))
        run.finish()
        trace = validate_trace(run.trace())
        for r in trace["rounds"]:
            st = r["stages_ms"]
            assert list(st) == list(STAGES) and min(st.values()) >= 0, st
            assert sum(st.values()) <= r["round_ms"] + 0.01 and st["draft"] == r["draft_ms"], (st, r["round_ms"])
            assert st["verify"] == r["verify_ms"] > 0
    trace["rounds"][0]["stages_ms"]["build"] = -1.0
    with pytest.raises(TraceError, match=r"rounds\[0\].stages_ms.build: is negative"):
        validate_trace(trace)


def test_edges_are_lossless():
    """The last rounds (blocks shrinking to max_new_tokens, paths cut at its depth) and node caps of 1
    and 2, in every mode and rule, for a DFlash and a shift-label Domino drafter (block = B + 1)."""
    from tiny import tiny_variant_models
    for models in (tiny_models("qwen3", 4, block_size=5),
                   tiny_variant_models("domino", 1, block_size=5, shift_label=True)):
        eng = Engine(models)
        ids = eng.encode_prompt("ab c")
        want = greedy_reference(eng.models.target, ids, 7)
        for mode, rule in lossless_configs():
            for n in (2, 5, 7):
                for k, nodes in ((None, None), (1, 1), (None, 2), (0, 3)):
                    run = eng.run(ids, DecodeConfig(mode=mode, rule=rule, max_new_tokens=n, max_shifted=k,
                                                    max_trie_nodes=nodes, ignore_eos=True))
                    assert run.finish()["output_ids"] == want[:n], (models.drafter_name, mode, rule, n, k, nodes)

"""Lossless: every mode and rule at T=0 (fp32) returns exactly target-only greedy decoding."""
import torch
from transformers import DynamicCache

from engine.options import MODES, RULES
from engine.decode import DecodeConfig, Engine
from tiny import tiny_models

PROMPTS = ["ab", "c a b", "bbb aa", "a", "cab cab", "b c", "aaa", "ba ab c", "cc", "abc abc abc"]
N_NEW = 20


def greedy_reference(target, ids: list[int], n: int) -> list[int]:
    """Plain target-only greedy decoding, one token per forward."""
    cache, out = DynamicCache(), []
    x = torch.tensor([ids], device=target.device)
    with torch.no_grad():
        for _ in range(n):
            logits = target(input_ids=x, past_key_values=cache, use_cache=True).logits
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]], device=target.device)
    return out


def configs():
    yield "ar", "earliest"
    yield "dflash", "earliest"
    yield "shifted-fixed", "fixed"
    yield "ddtree", "earliest"
    for mode in ("reanchor", "in-block", "extension", "reanchor-tree"):
        for rule in RULES:
            yield mode, rule


def test_every_mode_and_rule_is_lossless():
    gained = 0
    pairs = [(kind, seed, p) for kind in ("llama", "qwen3") for seed, p in enumerate(PROMPTS)]
    for kind, seed, prompt in pairs:                  # 20 prompt/seed pairs
        eng = Engine(tiny_models(kind, seed, block_size=4 + seed % 3))
        ids = eng.encode_prompt(prompt)
        want = greedy_reference(eng.models.target, ids, N_NEW)
        for mode, rule in configs():
            run = eng.run(ids, DecodeConfig(mode=mode, rule=rule, max_new_tokens=N_NEW, seed=seed,
                                            ignore_eos=True))
            rounds = list(run)
            assert run.result["output_ids"] == want, (kind, seed, mode, rule)
            assert sum(len(r["new_tokens"]) for r in rounds) + 1 == N_NEW
            gained += sum(1 for r in rounds for n in r["accepted_nodes"]
                          if 0 not in [r["paths"][p]["source"] for p in r["trie"]["provenance"][n]])
    assert gained > 0, "no token was ever accepted through a shifted block: the test proves little"
    assert set(m for m, _ in configs()) == set(MODES)


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

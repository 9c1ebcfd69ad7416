"""The checks that decoding is exact, on any device: every mode and rule at T=0 against plain greedy decoding,
and one round's first two tokens at T=1 against the target's law (chi-square). The test suite runs them on
the CPU (tests/test_lossless.py, tests/test_sampling_t1.py), engine/gpu/gpu_check.py on a lent GPU, both over
the tiny random models of engine/models/tiny.py."""
from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Iterator

import torch
from transformers import DynamicCache

from ..options import RULES
from .config import DecodeConfig
from .cost import budget_for
from .engine import Engine
from .laws import target_law
from .round import decode_round, start

# prompts over the tiny tokenizer's alphabet "ab c": repeats, so that shifted blocks find sites
LOSSLESS_PROMPTS = ["ab", "c a b", "bbb aa", "a", "cab cab", "b c", "aaa", "ba ab c", "cc", "abc abc abc"]
LAW_TRIALS = 250   # rounds per mode in the law check
# the law check's cases: every mode, the trie modes with rule "all" too, and the auto budget cutting the trie
LAW_MODES = [("ar", "earliest"), ("dflash", "earliest"), ("shifted-fixed", "fixed"), ("reanchor", "earliest"),
             ("in-block", "earliest"), ("extension", "latest"), ("reanchor", "all"), ("in-block", "all"),
             ("extension", "all"), ("ddtree", "earliest"), ("reanchor-tree", "earliest"), ("reanchor", "auto-nodes")]


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


def lossless_configs() -> Iterator[tuple[str, str]]:
    """Every (mode, rule) whose T=0 output must equal greedy decoding's: each rule where the mode has a choice."""
    yield "ar", "earliest"
    yield "dflash", "earliest"
    yield "shifted-fixed", "fixed"
    yield "ddtree", "earliest"
    for mode in ("reanchor", "in-block", "extension", "reanchor-tree"):
        for rule in RULES:
            yield mode, rule


@torch.no_grad()
def fixed_state(eng: Engine, ids: list[int], cfg: DecodeConfig, budget=None):
    """The state after one T=0 round (retained features: shifted blocks come next) and the round
    config of `cfg` (T=1)."""
    rc = eng.run(ids, cfg, budget).round_config
    rc0 = replace(rc, temperature=0.0)
    _, st = start(eng, ids, rc0, 0)
    _, st = decode_round(eng, st, rc0, 0)
    return st, rc


@torch.no_grad()
def round_pairs(eng: Engine, st, rc, trials: int):
    """The first two tokens of round 1 from state `st`, `trials` times with fresh seeds; a round
    that commits one token is completed by a target sample. Also the rounds' records."""
    dev = eng.models.device
    p2 = target_law(eng.models.target(input_ids=torch.tensor([st.x + [a] for a in range(
        eng.models.target.config.vocab_size)], device=dev)).logits[:, -1], 1.0)
    bare = replace(st, gen=None)
    pairs, recs = {}, []
    for i in range(trials):
        s = copy.deepcopy(bare)
        s.gen, s.rng = torch.Generator(device=dev).manual_seed(1000 + i), random.Random(i)
        rec, _ = decode_round(eng, s, rc, 1)
        toks = rec["new_tokens"][:2]
        if len(toks) < 2:
            toks.append(int(torch.multinomial(p2[toks[0]], 1, generator=s.gen)))
        pairs[tuple(toks)] = pairs.get(tuple(toks), 0) + 1
        recs.append(rec)
    return pairs, recs, p2


def expected_pairs(eng: Engine, x: list[int], p2: torch.Tensor, n: int) -> dict:
    """What `n` draws of the target's first two tokens after `x` are expected to give, pair by pair."""
    with torch.no_grad():
        p1 = target_law(eng.models.target(input_ids=torch.tensor([x], device=p2.device)).logits[0, -1], 1.0)
    return {(a, b): float(p1[a] * p2[a, b]) * n for a in range(len(p1)) for b in range(len(p1))}


def assert_chi_square(observed: dict, expect: dict, min_dof: int = 3) -> None:
    """Pearson's chi-square of observed counts against expected ones (cells under 5 pooled) below
    its 99.9% quantile: dof + 3.1*sqrt(2 dof) + 10 bounds it well for dof in 3..60. AssertionError if not."""
    chi2, dof, pooled_obs, pooled_exp = 0.0, -1, 0, 0.0
    for key, e in sorted(expect.items(), key=lambda kv: -kv[1]):
        o = observed.get(key, 0)
        if e >= 5:
            chi2 += (o - e) ** 2 / e
            dof += 1
        else:
            pooled_obs, pooled_exp = pooled_obs + o, pooled_exp + e
    if pooled_exp > 0:
        chi2 += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        dof += 1
    if dof < min_dof:
        raise AssertionError(f"{dof} degrees of freedom, under {min_dof}: the check would prove nothing")
    if chi2 >= dof + 3.1 * (2 * dof) ** 0.5 + 10:
        raise AssertionError((chi2, dof))


def law_case(m, mode: str, rule: str, prompt: str = "ab c", trials: int = LAW_TRIALS) -> list[dict]:
    """The chi-square law check of one mode and rule over Models `m` (rule "auto-nodes": the auto budget cuts
    the trie by the drafted tokens); the rounds' records, for what they drafted."""
    eng = Engine(m)
    ids = eng.encode_prompt(prompt)
    nodes = "auto" if rule == "auto-nodes" else None
    # the auto budget's costs fixed from the profile: costs learned from round times on a loaded machine (CI's
    # two workers) can price every tree below a plain step, and then no round drafts (the check sees no branch)
    cfg = DecodeConfig(mode=mode, rule="earliest" if nodes else rule, temperature=1.0, max_new_tokens=12,
                       ignore_eos=True, max_trie_nodes=nodes, calibration="fixed" if nodes else "online")
    st, rc = fixed_state(eng, ids, cfg, budget_for(eng, cfg))
    pairs, recs, p2 = round_pairs(eng, st, rc, trials)
    assert_chi_square(pairs, expected_pairs(eng, st.x, p2, trials))
    return recs

"""How the shifted blocks are drafted (docs/algorithm.md, steps 0 and 1), recomputed from scratch.

Losslessness holds whatever the drafts are, so none of the lossless tests notices a broken
ReAnchor. Here each round of a real run (tiny random target and drafter, T=0, fp32) is checked
against an independent recomputation from the committed text alone:
- a_d is the target's own prediction after retained node d: a fresh target forward over the
  committed tokens x[<s] and the retained tokens R[0..d-1];
- row d of the batched drafter call equals a standalone drafter forward, without cache or mask,
  whose context is the committed features F[<s] plus the retained features F[s..s+d-1] (fresh
  from that forward) and whose block [a_d, MASK, ...] sits at positions s+d .. s+d+L-1;
- the baseline row is the same whether or not retained features are in the call.

Breakages each test was seen to catch (applied by hand to engine/decode, then reverted):
(a) every row, the baseline included, sees all retained features (Engine.draft's mask):
    test_drafted_rows_equal_standalone_drafter, test_baseline_row_ignores_retained_features;
(b) the shifted blocks sit at the baseline's positions s .. s+L-1 (Engine.draft's positions):
    test_drafted_rows_equal_standalone_drafter;
(c) a_d is the rejected draft itself instead of the target's token after retained node d
    (round.decode_round): test_anchors_are_the_targets_predictions;
(d) ours: an off-by-one in the mask, row d seeing R[0..d] (`<= d`):
    test_drafted_rows_equal_standalone_drafter, test_baseline_row_ignores_retained_features;
(e) ours: R kept from the wrong nodes (node n-1 for each retained node n):
    test_drafted_rows_equal_standalone_drafter;
and at T=1 (test_sampled_drafts_carry_their_laws): speculative sampling handed the baseline's law
for every block, or the law of the next position; Drafts.probs not the law the drafts came from.
"""
from __future__ import annotations

import pytest
import torch

from engine.analyses import path_nodes
from engine.decode import DecodeConfig, Engine
from engine.decode.kv import ContextKV
from tiny import tiny_models

N_NEW = 28


def recorded_run(kind: str, seed: int, T: float = 0.0, prompt: str = "ab c ba", mode: str = "reanchor"):
    """A run (reanchor unless `mode` says) with every drafter call's Drafts kept: (engine, prompt ids, output ids,
    [(round record, its Drafts)] for the rounds that drafted, every round)."""
    m = tiny_models(kind, seed, block_size=6, init=0.5 if T == 0 else 0.12)
    eng = Engine(m, draft_head_dtype=None)  # fp32 vocabulary projection: comparable to 1e-4
    calls, draft = [], eng.draft
    eng.draft = lambda *a, **k: calls.append(draft(*a, **k)) or calls[-1]
    ids = eng.encode_prompt(prompt)
    run = eng.run(ids, DecodeConfig(mode=mode, temperature=T, max_new_tokens=N_NEW, ignore_eos=True))
    rounds = list(run)
    drafted = [r for r in rounds if r["block_size"] >= 2]
    assert len(drafted) == len(calls)
    return eng, ids, run.result["output_ids"], list(zip(drafted, calls)), rounds


def retained_tokens(prev: dict) -> list[int]:
    """The previous round's retained nodes' tokens: the first path through its accepted chain, past it."""
    chain = prev["accepted_nodes"]
    for p in prev["paths"]:
        if path_nodes(prev, p["tokens"])[: len(chain)] == chain:
            return p["tokens"][len(chain): len(chain) + prev["retained"]]
    raise AssertionError("no path through the accepted chain")


def fresh_target(eng: Engine, tokens: list[int]):
    """(logits, features) of one plain target forward: what the cache-free reference sees."""
    out = eng.models.target(input_ids=torch.tensor([tokens]), output_hidden_states=True)
    feats = torch.cat([out.hidden_states[l + 1] for l in eng.layer_ids], -1)[0]
    return out.logits[0].float(), feats


def standalone_draft(eng: Engine, context: torch.Tensor, anchor: int, start: int, L: int) -> torch.Tensor:
    """Drafter logits [L-1, V] for block [anchor, MASK...] at positions start..start+L-1 after the
    context features (positions 0..len-1): no cache, no mask."""
    d = eng.models.drafter
    block = torch.full((1, L), eng.mask_id)
    block[0, 0] = anchor
    noise = torch.nn.functional.embedding(block, eng.draft_embed) * eng.embed_scale
    pos = torch.arange(context.shape[0] + L)[None]
    pos[0, context.shape[0]:] = start + torch.arange(L)
    out = d(target_hidden=context[None].to(eng.draft_dtype), noise_embedding=noise, position_ids=pos)
    return d.compute_logits(out[:, 1:], eng.draft_head).float()[0]


def shifted_rounds(kind: str, seed: int, T: float = 0.0):
    """Per round with shifted blocks: (engine, record, Drafts, committed x[<s], retained tokens,
    reference logits and features over x[<s] + retained)."""
    eng, ids, out, pairs, rounds = recorded_run(kind, seed, T)
    x = ids + out
    prev = {r["round"]: r for r in rounds}
    found = 0
    for rec, drafts in pairs:
        if not rec["shifted"]:
            continue
        s = rec["anchor_pos"]
        ret = retained_tokens(prev[rec["round"] - 1])
        logits, feats = fresh_target(eng, x[:s] + ret)
        found += len(rec["shifted"]) >= 2
        yield eng, rec, drafts, x[:s + 1], ret, logits, feats
    assert found, "no round drafted two shifted blocks: the checks would prove little"


CASES = [("llama", 0), ("qwen3", 1), ("llama", 5)]


@pytest.mark.parametrize("kind,seed", CASES)
def test_anchors_are_the_targets_predictions(kind, seed):
    """(c): a_d = the target's token after retained node d, i.e. at position s+d-1 of x[<s] + R."""
    with torch.no_grad():
        for eng, rec, _, x, ret, logits, _ in shifted_rounds(kind, seed):
            s = rec["anchor_pos"]
            for b in rec["shifted"]:
                d = b["d"]
                assert b["tokens"][0] == int(logits[s + d - 1].argmax()), (rec["round"], d)


@pytest.mark.parametrize("kind,seed", CASES)
def test_drafted_rows_equal_standalone_drafter(kind, seed):
    """(a), (b), (d), (e): row d (0 = the baseline) = a standalone drafter forward over F[<s] and
    F[s..s+d-1], its block at s+d .. s+d+L-1; the tokens are that forward's argmax."""
    with torch.no_grad():
        for eng, rec, drafts, x, ret, logits, feats in shifted_rounds(kind, seed):
            s, L = rec["anchor_pos"], rec["block_size"]
            rows = [(0, x[s])] + [(b["d"], b["tokens"][0]) for b in rec["shifted"]]
            for r, (d, anchor) in enumerate(rows):
                want = standalone_draft(eng, feats[: s + d], anchor, s + d, L)
                torch.testing.assert_close(drafts.logits[r], want, rtol=1e-4, atol=1e-4,
                                           msg=lambda m: f"round {rec['round']}, row d={d}: {m}")
                assert drafts.tokens[r][1:] == want.argmax(-1).tolist()


@pytest.mark.parametrize("kind,seed", CASES[:2])
def test_baseline_row_ignores_retained_features(kind, seed):
    """(a): the baseline row of a call with retained features equals a call without any."""
    with torch.no_grad():
        for eng, rec, _, x, ret, logits, feats in shifted_rounds(kind, seed):
            s, L, k = rec["anchor_pos"], rec["block_size"], len(rec["shifted"])
            anchors = [x[s]] + [b["tokens"][0] for b in rec["shifted"]]
            gen = torch.Generator().manual_seed(0)
            alone = Engine.draft(eng, ContextKV(), feats[:s], feats[s:s], anchors[:1], s, L, 0.0, gen, True)
            batched = Engine.draft(eng, ContextKV(), feats[:s], feats[s: s + k], anchors, s, L, 0.0, gen, True)
            torch.testing.assert_close(batched.logits[0], alone.logits[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,seed", CASES[:2])
def test_chain_facts_are_the_drafters_log_q_summed_along_the_chain(kind, seed):
    """A dflash round's per-node facts in its trace (drafting.node_facts, whose argmax chains take a path that
    reads no token): node k is g(0)[k], its rank 0, its prob q_k(g(0)[k]) = softmax of the drafter's logits at
    position k, its score sum_{i<=k} log q_i: recomputed here from the call's own logits."""
    import math
    _, _, _, pairs, _ = recorded_run(kind, seed, mode="dflash")
    for rec, drafts in pairs:
        t, toks = rec["trie"], rec["baseline"]
        n = len(t["tokens"])
        assert t["tokens"] == toks[:n] and t["parents"] == list(range(-1, n - 1)), rec["round"]
        lq = [float(torch.log_softmax(drafts.logits[0, k - 1].double(), -1)[toks[k]]) for k in range(1, n)]
        assert t["rank"] == [0] * n and t["block"] == [0] * n
        assert t["prob"] == pytest.approx([1.0] + [math.exp(x) for x in lq], abs=2e-6), rec["round"]
        assert t["score"] == pytest.approx([0.0] + [sum(lq[:k]) for k in range(1, n)], abs=2e-4), rec["round"]


def test_sampled_drafts_carry_their_laws(monkeypatch):
    """T=1: each row's law is softmax(its standalone logits / T) (Drafts.probs), the trace's q is
    that law at the drafted token, and speculative sampling gets row d's law for g(d)[j]."""
    import engine.decode.round as round_module

    handed = []  # per verified round: (sources, draws, law_of) as the round hands them over
    accept = round_module.speculative_accept
    monkeypatch.setattr(round_module, "speculative_accept",
                        lambda trie, src, dr, tgt, law_of, laws: handed.append((dr, law_of))
                        or accept(trie, src, dr, tgt, law_of, laws))
    with torch.no_grad():
        for eng, rec, drafts, x, ret, logits, feats in shifted_rounds("qwen3", 0, T=1.0):
            s, L = rec["anchor_pos"], rec["block_size"]
            draws, law_of = handed[rec["round"]]
            blocks = [(0, x[s], rec["baseline_q"], drafts.tokens[0])] + [
                (b["d"], b["tokens"][0], b["q"], b["tokens"]) for b in rec["shifted"]]
            for r, (d, anchor, q, toks) in enumerate(blocks):
                law = torch.softmax(standalone_draft(eng, feats[: s + d], anchor, s + d, L), -1)
                torch.testing.assert_close(drafts.probs[r], law, rtol=1e-4, atol=1e-6)
                want = [float(law[j - 1, toks[j]]) for j in range(1, L)]
                assert q == pytest.approx(want, rel=1e-4), (rec["round"], d)
                for j in {j for path in draws for src, j in path[1:] if src == d}:
                    got = law_of(d, j)   # a laws.Law: the row, and the value looked up before the walk
                    torch.testing.assert_close(got.row(), law[j - 1], rtol=1e-4, atol=1e-6)
                    assert got.known == {toks[j]: pytest.approx(float(law[j - 1, toks[j]]), rel=1e-4)}


@pytest.mark.parametrize("field,value", [(None, None), ("output_multiplier", 3.0), ("final_logit_softcapping", 0.5)])
def test_draft_logits_are_the_drafters_compute_logits(field, value):
    """variants.draft_logits skips compute_logits' scaling only where the drafter scales and caps nothing."""
    from engine.models.variants import draft_logits
    m = tiny_models("qwen3", 0)
    d = m.drafter
    if field:
        d.config.dflash_config[field] = value
    h = torch.randn(2, 3, d.config.hidden_size, generator=torch.Generator().manual_seed(0))
    head = m.target.get_output_embeddings()
    with torch.no_grad():
        got = draft_logits(d, h, head)
        assert torch.equal(got, d.compute_logits(h, head))
        assert torch.equal(got, head(h)) == (field is None)   # the setting changes the logits

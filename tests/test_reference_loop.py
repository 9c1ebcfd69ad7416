"""The one-screen reference loop (engine/decode/reference_loop.py) is greedy ReAnchor: token for token the target's
own greedy decoding, and round for round what the Engine's `reanchor` run does (the same anchors, blocks attached
at the same sites, the same trie, the same committed tokens, and the drafter called with the same anchors, positions
and features); docs/algorithm.md quotes it as it is.

The tiny random drafters draft nearly the same tokens whatever their context, so equal tokens alone would not
notice wrong retained features R: the drafter's inputs are compared too. Breakages seen to turn the round-for-round
test red (applied by hand to reference_loop.py, then reverted): the attachment offset g(0)[..t-1] or g(0)[..t+1] for
g(0)[..t]; the latest site for the earliest; the retained nodes taken from the chain's last node on; R from the node
before each retained one; a_d the retained node's own token; the bonus the root's y."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from engine.decode import DecodeConfig, Engine
from engine.decode.checks import greedy_reference
from engine.decode.reference_loop import reanchor_greedy
from tiny import tiny_models

ROOT = Path(__file__).resolve().parent.parent
N_NEW = 24
# (kind, seed, block size, prompt): cases where some round commits drafts that only a shifted block proposed
CASES = [("llama", 3, 4, "a"), ("llama", 0, 4, "ab"), ("qwen3", 0, 4, "ab"), ("qwen3", 3, 4, "a")]


def with_draft_calls(eng: Engine, fn):
    """fn()'s result and the Engine's draft calls during it: per call (s, block length, anchors, the committed
    features new to the drafter, the retained features R)."""
    calls, draft = [], eng.draft

    def recorded(ctx, F, R, anchors, s, L, *rest):
        calls.append((s, L, list(anchors), F.clone(), R.clone()))
        return draft(ctx, F, R, anchors, s, L, *rest)

    eng.draft = recorded
    try:
        return fn(), calls
    finally:
        del eng.draft


def baseline_agrees(new: list[int], g0: list[int]) -> int:
    """How many of the round's committed drafts g(0) alone proposed (its prefix the target agreed with)."""
    k = 0
    while k < len(new) - 1 and k + 1 < len(g0) and new[k] == g0[k + 1]:
        k += 1
    return k


def test_the_reference_loop_is_greedy_decoding_and_the_engines_reanchor_round_for_round():
    gained = attached = 0
    for kind, seed, block, prompt in CASES:
        eng = Engine(tiny_models(kind, seed, block_size=block))
        ids, B = eng.encode_prompt(prompt), eng.block_size
        (out, rounds), ours = with_draft_calls(eng, lambda: reanchor_greedy(eng, ids, N_NEW))
        assert out == greedy_reference(eng.models.target, ids, N_NEW), (kind, seed)
        # 2B more tokens: the loop's rounds all lie at s <= len(ids) + N_NEW - 2, where the Engine's run neither
        # shortens the block (L = B) nor cuts a path (depth <= 2B - 2)
        run = eng.run(ids, DecodeConfig(mode="reanchor", rule="earliest", max_new_tokens=N_NEW + 2 * B,
                                        ignore_eos=True))
        recs, its = with_draft_calls(eng, lambda: [rec for _, rec in zip(rounds, run)])
        assert len(recs) == len(rounds) == len(ours) == len(its)
        for i, (a, b) in enumerate(zip(ours, its)):
            assert a[:3] == b[:3] and torch.equal(a[3], b[3]) and torch.equal(a[4], b[4]), (kind, seed, i)
        s = len(ids)                                    # the first anchor: the target's first token
        for i, (r, rec) in enumerate(zip(rounds, recs)):
            where = (kind, seed, i)
            assert (rec["anchor_pos"], rec["block_size"]) == (s, B), where
            assert rec["new_tokens"] == r.new and rec["accepted"] == len(r.new) - 1, where
            assert {b["d"]: b["chosen"] for b in rec["shifted"] if b["chosen"] is not None} == r.sites, where
            assert (rec["trie"]["tokens"], rec["trie"]["parents"]) == (r.trie.tokens, r.trie.parents), where
            s += len(r.new)
            gained += len(r.new) - 1 - baseline_agrees(r.new, r.trie.tokens[:B])
            attached += len(r.sites)
    # shifted blocks attached, and some committed drafts came from them alone: the comparison covers steps 2 and 6
    assert attached > 0 and gained > 0, (attached, gained)


def test_the_algorithm_doc_quotes_the_loop_as_it_is():
    doc = (ROOT / "docs/algorithm.md").read_text(encoding="utf-8")
    quoted = re.search(r"^## The round in one screen\n.*?^```python\n(.*?)^```$", doc, re.S | re.M)
    assert quoted, "docs/algorithm.md has no section 'The round in one screen' with a python block"
    assert quoted.group(1) == (ROOT / "engine/decode/reference_loop.py").read_text(encoding="utf-8"), \
        "docs/algorithm.md quotes another reference_loop.py: paste the file's text into its python block again"

"""Cache compaction equals recomputing the prefix; T>0 verification samples the target exactly."""
import torch
from transformers import DynamicCache

from engine.decode import DecodeConfig, Engine
from engine.decode.checks import assert_chi_square
from engine.trie import build_trie
from tiny import tiny_models


def test_compaction_equals_recomputed_prefix():
    m = tiny_models("qwen3", 0)
    eng = Engine(m)
    prefix = eng.encode_prompt("ab c")
    s = len(prefix)
    cache = eng.new_cache()
    with torch.no_grad():
        eng.target_forward(torch.tensor([prefix]), torch.arange(s)[None], None, cache)
        # a trie with branches; accept a chain that is NOT a prefix of node order: 0 -> 3 -> 4
        trie = build_trie([[5, 6, 7], [5, 4, 7], [5, 6, 4]])
        eng.verify(trie, s, cache)
        chain = [0, 3, 4]
        before = [layer.keys.data_ptr() for layer in cache.layers]
        Engine.compact(cache, s, chain)
        kept = [trie.tokens[n] for n in chain]
        ref = DynamicCache()
        m.target(input_ids=torch.tensor([prefix + kept]), past_key_values=ref, use_cache=True)
    assert cache.get_seq_length() == s + len(chain)
    # only the round's tail moved: the prefix was not copied into a new tensor
    assert [layer.keys.data_ptr() for layer in cache.layers] == before
    for got, want in zip(cache.layers, ref.layers):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-5, atol=1e-5)


def test_tree_verify_logits_equal_sequential_logits():
    m = tiny_models("llama", 2)
    eng = Engine(m)
    prefix = eng.encode_prompt("ba")
    s = len(prefix)
    trie = build_trie([[5, 6, 7], [5, 4, 7, 6]])
    with torch.no_grad():
        cache = eng.new_cache()
        eng.target_forward(torch.tensor([prefix]), torch.arange(s)[None], None, cache)
        logits, _ = eng.verify(trie, s, cache)
        for path in trie.path_nodes:
            toks = [trie.tokens[n] for n in path]
            full = m.target(input_ids=torch.tensor([prefix + toks])).logits[0, s:]
            torch.testing.assert_close(logits[path], full, rtol=1e-4, atol=1e-4)


def test_sampling_matches_target_distribution():
    """Tokens 2 and 3 come from verification rounds. Their joint law under reanchor must equal the
    target's own (computed exactly), conditioned on the first token, by a chi-square test."""
    m = tiny_models("llama", 7, block_size=4)
    eng = Engine(m)
    ids = eng.encode_prompt("ab")
    with torch.no_grad():  # condition on the most likely first token (it comes from the prefill)
        x1 = int(m.target(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    joint = {}
    for seed in range(600):
        run = eng.run(ids, DecodeConfig(mode="reanchor", temperature=1.0, seed=seed, max_new_tokens=3,
                                        ignore_eos=True))
        out = run.finish()["output_ids"]
        if out[0] == x1:
            joint[(out[1], out[2])] = joint.get((out[1], out[2]), 0) + 1
    total = sum(joint.values())
    with torch.no_grad():
        p2 = torch.softmax(m.target(input_ids=torch.tensor([ids + [x1]])).logits[0, -1], -1)
        expect = {}
        for a in range(p2.shape[0]):
            p3 = torch.softmax(m.target(input_ids=torch.tensor([ids + [x1, a]])).logits[0, -1], -1)
            for b in range(p3.shape[0]):
                expect[(a, b)] = float(p2[a] * p3[b]) * total
    assert total > 100
    assert_chi_square(joint, expect)

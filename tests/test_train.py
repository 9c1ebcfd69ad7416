"""Drafter training (engine/train/) and the prompt set (engine/train/prompts.py) on a tiny random Llama target.

No network, no downloads, CPU only; the whole file runs in well under a minute.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.errors import InputError
from engine.train import checkpoint as CK
from engine.train import cli as C
from engine.train import data as D
from engine.train import evaluation as E
from engine.train import loss as L
from engine.train import recipe as R
from engine.train.prompts import build_prompts, heldout_prompts

VOCAB, H, B, MASK = 256, 64, 4, 3
SHIPPED = Path(__file__).parents[1] / "assets" / "drafters"


@pytest.fixture(scope="module")
def target():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      tie_word_embeddings=True, initializer_range=0.2,  # a head able to make peaked logits
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def drafter_for(target, **kw):
    torch.manual_seed(1)
    return R.make_drafter(target, num_layers=2, block_size=B, mask_id=MASK, target_layer_ids=[0, 2], **kw)


def seqs_for(n: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (length - i,), generator=g).tolist() for i in range(n)]


def test_block_mask_sees_only_earlier_context_and_own_block():
    anchors = torch.tensor([[3, 7], [5, 0]])  # the second row's last anchor is padding
    m = R.block_mask(anchors, ctx_len=10, block_size=B)
    assert m.shape == (2, 1, 2 * B, 10 + 2 * B)
    m = m[:, 0]
    for b, row in enumerate(anchors.tolist()):
        for a, p in enumerate(row):
            for q in range(a * B, (a + 1) * B):
                ctx = m[b, q, :10].tolist()
                assert ctx == [j < p for j in range(10)]            # context strictly before the anchor
                blocks = m[b, q, 10:].tolist()
                assert blocks == [a * B <= j < (a + 1) * B for j in range(2 * B)]  # own block, both ways


def test_batched_forward_equals_per_anchor_reference(target):
    """The one-forward training view gives each block exactly what inference computes for it alone."""
    drafter = drafter_for(target).eval()
    seqs = seqs_for(2, 20)
    anchors = [[5, 9, 14], [6, 18]]
    batch = R.make_batch(seqs, anchors, block_size=B, mask_id=MASK, gamma=2.0)
    feats, _ = R.Features(target, drafter.target_layer_ids, cache_gb=1).get([0, 1], seqs, batch["T"])
    embed = target.get_input_embeddings().weight
    with torch.no_grad():
        h = R.draft_forward(drafter, embed, feats, batch, torch.float32)
        for i, (s, a) in enumerate(zip(seqs, anchors)):
            for j, p in enumerate(a):
                block = torch.tensor([[s[p]] + [MASK] * (B - 1)])
                ref = drafter(position_ids=torch.arange(p + B)[None], noise_embedding=F.embedding(block, embed),
                              target_hidden=feats[i:i + 1, :p])  # the inference call: context < p, no mask
                torch.testing.assert_close(h[i, j * B:(j + 1) * B], ref[0], atol=1e-5, rtol=1e-4)


def test_rows_labels_and_weights():
    seqs = [[10, 11, 12, 13, 14, 15, 16]]
    batch = R.make_batch(seqs, [[2, 5]], block_size=B, mask_id=MASK, gamma=2.0)
    # anchor 2 predicts x3..x5 (k=1..3); anchor 5 only x6 (k=1), the rest is past the end
    assert batch["labels"].tolist() == [13, 14, 15, 16]
    assert batch["k"].tolist() == [1, 2, 3, 1]
    assert batch["trow"].tolist() == [2, 3, 4, 5]                 # target state at p+k-1
    assert batch["drow"].tolist() == [1, 2, 3, B + 1]
    assert batch["block_ids"].tolist() == [[12, MASK, MASK, MASK, 15, MASK, MASK, MASK]]
    w = torch.exp(-(batch["k"] - 1).float() / 2.0)
    torch.testing.assert_close(batch["weights"], w / w.sum())


def test_loss_depth_keeps_only_the_first_positions():
    seqs = [[10, 11, 12, 13, 14, 15, 16]]
    batch = R.make_batch(seqs, [[2, 5]], block_size=B, mask_id=MASK, gamma=2.0, depth=2)
    assert batch["k"].tolist() == [1, 2, 1] and batch["labels"].tolist() == [13, 14, 16]
    assert batch["drow"].tolist() == [1, 2, B + 1]
    assert batch["block_ids"].tolist() == [[12, MASK, MASK, MASK, 15, MASK, MASK, MASK]]  # whole blocks drafted


@pytest.mark.parametrize("kl", [0.0, 0.5, 1.0])
def test_head_loss_value_and_gradient_match_autograd(target, kl):
    torch.manual_seed(0)
    W = target.get_output_embeddings().weight
    hd = torch.randn(7, H, requires_grad=True)
    ht, labels = torch.randn(7, H), torch.randint(0, VOCAB, (7,))
    w = torch.rand(7)
    w = w / w.sum()
    loss, hit = L.head_loss(hd, ht, labels, w, W, kl=kl, chunk=3)
    loss.backward()
    ref_h = hd.detach().clone().requires_grad_(True)
    logp = F.log_softmax(ref_h @ W.T, -1)
    q = kl * F.softmax(ht @ W.T, -1) + (1 - kl) * F.one_hot(labels, VOCAB)
    ref = (-(q * logp).sum(-1) * w).sum()
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach())
    torch.testing.assert_close(hd.grad, ref_h.grad, atol=1e-6, rtol=1e-4)
    assert hit.tolist() == ((ref_h @ W.T).argmax(-1) == (ht @ W.T).argmax(-1)).tolist()


def test_sparse_head_loss_value_and_gradient_match_autograd(target):
    torch.manual_seed(0)
    W = target.get_output_embeddings().weight
    hd, ht = torch.randn(7, H, requires_grad=True), torch.randn(7, H)
    top = torch.topk(ht @ W.T, 5, dim=-1)
    neg = L.negatives(top.indices, VOCAB, 12, torch.Generator().manual_seed(1))
    assert len(neg) == len(set(neg.tolist())) and neg.max() < VOCAB
    assert set(neg.tolist()) & set(top.indices.reshape(-1).tolist())  # some overlap: each must count once
    w = torch.rand(7)
    w = w / w.sum()
    loss, hit = L.sparse_head_loss(hd, top.indices.to(torch.int32), top.values, w, W, neg, chunk=3)
    loss.backward()
    # reference: per row, the softmax over the union of its top-5 and the negatives, target q on its top-5
    ref_h = hd.detach().clone().requires_grad_(True)
    ref, hits = 0.0, []
    for r in range(7):
        cols = top.indices[r].tolist() + [t for t in neg.tolist() if t not in top.indices[r].tolist()]
        logp = F.log_softmax(ref_h[r] @ W[cols].T, -1)
        ref = ref - (F.softmax(top.values[r], -1) * logp[:5]).sum() * w[r]
        hits.append(int(logp.argmax()) == 0)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach())
    torch.testing.assert_close(hd.grad, ref_h.grad, atol=1e-6, rtol=1e-4)
    assert hit.tolist() == hits


def test_features_topk_keeps_the_targets_top_tokens(target):
    seqs = seqs_for(2, 12, seed=4)
    full = R.Features(target, [0, 2], cache_gb=1)
    sparse = R.Features(target, [0, 2], cache_gb=1, topk=3)
    f, fin = full.get([0, 1], seqs, 16)
    f2, ids, lg = sparse.get([0, 1], seqs, 16)
    torch.testing.assert_close(f2, f)
    W = target.get_output_embeddings().weight
    for i, s in enumerate(seqs):
        ref = torch.topk(fin[i, :len(s)] @ W.T, 3, dim=-1)
        assert torch.equal(ids[i, :len(s)].long(), ref.indices)
        torch.testing.assert_close(lg[i, :len(s)], ref.values)
    assert not ids[1, len(seqs[1]):].any()  # padding


def test_loss_decreases_when_overfitting(target):
    drafter = drafter_for(target).train()
    seqs = seqs_for(2, 24, seed=3)
    feats = R.Features(target, drafter.target_layer_ids, cache_gb=1)
    W, embed = target.get_output_embeddings().weight, target.get_input_embeddings().weight
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-2)
    anchors = [list(range(4, 22, 2)), list(range(5, 21, 3))]
    losses = []
    for _ in range(30):
        batch = R.make_batch(seqs, anchors, block_size=B, mask_id=MASK, gamma=2.0)
        f, fin = feats.get([0, 1], seqs, batch["T"])
        h = R.draft_forward(drafter, embed, f, batch, torch.float32).reshape(-1, H)
        loss, _ = L.head_loss(h[batch["drow"]], fin.reshape(-1, H)[batch["trow"]], batch["labels"],
                              batch["weights"], W, kl=0.0, chunk=64)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses


def test_init_from_target_copies_top_layers(target):
    drafter = drafter_for(target)
    copied = R.init_from_target(drafter, target)
    assert len(copied) == 2 * 9 + 1
    torch.testing.assert_close(drafter.layers[1].mlp.up_proj.weight, target.model.layers[3].mlp.up_proj.weight)
    torch.testing.assert_close(drafter.layers[0].self_attn.k_proj.weight, target.model.layers[2].self_attn.k_proj.weight)
    assert torch.equal(drafter.fc.weight[:, H:], torch.eye(H)) and not drafter.fc.weight[:, :H].any()
    assert torch.equal(drafter.layers[0].self_attn.q_norm.weight, torch.ones(16))
    assert torch.equal(drafter.norm.weight, target.model.norm.weight)


def test_export_loads_with_dflash(tmp_path, target):
    from dflash import DFlashDraftModel

    drafter = drafter_for(target)
    out = tmp_path / "drafter"
    CK.export(drafter, out, "# card\n", {"steps": 0}, max_shard=15 * 2**20)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors", "train_log.json"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["block_size"] == B and cfg["num_target_layers"] == 4 and cfg["dtype"] == "bfloat16"
    assert cfg["dflash_config"] == {"mask_token_id": MASK, "target_layer_ids": [0, 2]}
    loaded = DFlashDraftModel.from_pretrained(out)
    assert loaded.block_size == B and loaded.mask_token_id == MASK and loaded.target_layer_ids == [0, 2]
    assert next(loaded.parameters()).dtype == torch.bfloat16
    torch.testing.assert_close(loaded.fc.weight, drafter.fc.weight.to(torch.bfloat16))
    CK.export(drafter, out, "# card\n", {"steps": 1}, max_shard=15 * 2**20)  # re-export in place
    assert json.loads((out / "train_log.json").read_text())["steps"] == 1


def test_init_from_loads_a_trained_drafter_and_refuses_another_shape(tmp_path, target):
    trained = drafter_for(target)
    with torch.no_grad():
        trained.fc.weight.normal_()
    CK.export(trained, tmp_path / "d", "# card\n", {"steps": 3}, max_shard=15 * 2**20)
    torch.manual_seed(5)
    fresh = R.make_drafter(target, num_layers=2, block_size=2 * B, mask_id=MASK, target_layer_ids=[0, 2])
    CK.load_weights(fresh, tmp_path / "d")  # another block size is fine: no weight depends on it
    for (k, a), b in zip(fresh.state_dict().items(), trained.state_dict().values()):
        torch.testing.assert_close(a, b.to(torch.bfloat16).float(), msg=k)
    for other in (R.make_drafter(target, num_layers=1, block_size=B, mask_id=MASK, target_layer_ids=[0, 2]),
                  R.make_drafter(target, num_layers=2, block_size=B, mask_id=MASK, target_layer_ids=[0, 1, 2])):
        with pytest.raises(InputError, match="does not fit"):
            CK.load_weights(other, tmp_path / "d")


def test_init_from_grows_a_drafter_that_drafts_exactly_as_before(tmp_path, target):
    trained = drafter_for(target)
    R.init_from_target(trained, target)
    with torch.no_grad():
        trained.fc.weight.add_(0.05 * torch.randn_like(trained.fc.weight))
    CK.export(trained, tmp_path / "d", "# card\n", {"steps": 3}, max_shard=15 * 2**20)
    same = R.make_drafter(target, num_layers=2, block_size=B, mask_id=MASK, target_layer_ids=[0, 2])
    grown = R.make_drafter(target, num_layers=4, block_size=B, mask_id=MASK, target_layer_ids=[0, 2])
    assert CK.load_weights(same, tmp_path / "d") == [] and CK.load_weights(grown, tmp_path / "d") == [2, 3]
    seqs = seqs_for(2, 20, seed=5)
    batch = R.make_batch(seqs, [[3, 9], [5]], block_size=B, mask_id=MASK, gamma=2.0)
    f, _ = R.Features(target, [0, 2], cache_gb=1).get([0, 1], seqs, batch["T"])
    embed = target.get_input_embeddings().weight
    out = [R.draft_forward(d.eval(), embed, f, batch, torch.float32) for d in (same, grown)]
    torch.testing.assert_close(out[1], out[0], atol=1e-5, rtol=1e-5)
    assert grown.layers[3].mlp.up_proj.weight.abs().sum() > 0  # only the outputs start at zero: it can learn


def test_replay_rounds():
    # response positions 10..19; accepted drafts per anchor position
    acc = [2, 0, 0, 5, 0, 0, 0, 0, 0, 0]
    assert E.replay_rounds(acc, 10, 20) == [3, 6]   # anchors 10 -> 13 -> 19 (the last token: done)
    assert E.replay_rounds([0] * 5, 3, 8) == [1, 1, 1, 1]


def test_eval_tau_runs(target):
    drafter = drafter_for(target)
    feats = R.Features(target, drafter.target_layer_ids, cache_gb=1)
    seqs = [(s, 6) for s in seqs_for(2, 16, seed=5)]
    r = E.eval_tau(drafter, feats, seqs, W=target.get_output_embeddings().weight,
                   embed_w=target.get_input_embeddings().weight, dtype=torch.float32,
                   autocast=lambda: torch.autocast("cpu", enabled=False), anchors_per_forward=4)
    assert r["prompts"] == 2 and r["tau_sim"] >= 1.0 and len(r["accept_rate_by_depth"]) == B - 1


def test_lr_schedule():
    assert R.lr_at(0.02, 1.0, 0.04) == pytest.approx(0.5)
    assert R.lr_at(0.04, 1.0, 0.04) == pytest.approx(1.0)
    assert R.lr_at(1.0, 1.0, 0.04) == pytest.approx(0.0, abs=1e-12)


def test_cli_parsers():
    import argparse

    args = C.build_parser().parse_args(["--prompts", "16", "--block-size", "8", "--max-minutes", "0.5"])
    assert args.prompts == 16 and args.block_size == 8 and args.kl == 1.0
    sub = argparse.ArgumentParser().add_subparsers(dest="cmd")
    C.add_train_args(sub)


def test_prompts_deterministic_distinct_and_plenty():
    a = build_prompts(6500, seed=0)
    assert a == build_prompts(6500, seed=0)
    assert len(set(a)) == 6500 and all(p.strip() for p in a)
    assert build_prompts(50, seed=0) == a[:50]          # a prefix: more prompts never move earlier ones
    assert build_prompts(200, seed=1) != a[:200]
    held = heldout_prompts(30, a)
    assert len(held) == 30 and not set(held) & set(a)
    kinds = sum(p.startswith(("Write a Python", "Implement a function in Python")) for p in a)
    assert kinds > 300  # code tasks are a real share of the mix


def test_prompt_families_restrict_the_mix():
    stubs = build_prompts(300, seed=0, families=["complete"])
    assert len(set(stubs)) == 300 and all("def " in p for p in stubs)
    assert sum("```python" in p and '"""' in p for p in stubs) > 150   # mostly stubs to complete, with docstrings
    passages = build_prompts(100, seed=0, families=["extract"])
    assert all("$" in p.split("\n\n", 1)[1] for p in passages)          # an instruction, then a text to work on
    mixed = build_prompts(2000, seed=0)
    assert 0 < sum(p in set(stubs) for p in mixed) and set(stubs) != set(mixed[:300])
    held = heldout_prompts(20, stubs, families=["complete"])
    assert all("def " in p for p in held) and not set(held) & set(stubs)


class _Tok:
    """Just enough of a tokenizer for generate_shards: a chat template and ids in the tiny vocabulary."""

    chat_template = "<user>{content}<assistant>"  # present, so engine.models.chat_ids applies it

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "<user>" + messages[0]["content"] + "<assistant>"
        return self(text)["input_ids"] if tokenize else text

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [4 + ord(c) % 200 for c in text[:10 + len(text) % 7]]}

    def get_vocab(self):
        return {}  # no end-of-turn tokens of its own: the target config's eos ends a response


def test_generate_shards_resume_and_mix(tmp_path, target):
    prompts = build_prompts(6, seed=0)
    kw = dict(shard_size=2, batch_size=2, max_new_tokens=5, sample_frac=0.5, temperature=0.7, seed=0)
    D.generate_shards(target, _Tok(), prompts, tmp_path, "train", deadline=float("inf"), **kw)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["train-00000.jsonl", "train-00001.jsonl", "train-00002.jsonl"]
    recs = D.load_shards(tmp_path, "train")
    assert [r["i"] for r in recs] == list(range(6)) and [r["prompt"] for r in recs] == prompts
    assert [r["temperature"] for r in recs] == [0.0, 0.0, 0.7, 0.7, 0.0, 0.0]  # whole shards, alternating
    assert all(1 <= len(r["response_ids"]) <= 5 for r in recs)
    first = (tmp_path / "train-00001.jsonl").read_text()
    (tmp_path / "train-00002.jsonl").unlink()
    D.generate_shards(target, _Tok(), prompts, tmp_path, "train", deadline=float("inf"), **kw)  # resume
    assert (tmp_path / "train-00001.jsonl").read_text() == first and (tmp_path / "train-00002.jsonl").exists()


def test_cli_trains_sparse_then_trains_on_with_init_from(tmp_path, capsys):
    """`python -m engine train` end to end on a tiny folder target: gen, the sparse loss, export; then a second run
    that starts from the first one's weights and records it in its log and card. Each run is the CLI's main in this
    process, as `python -m engine` calls it (test_cli.py runs that command line): a subprocess per run re-imported
    torch and transformers, 4-5 s for a 0.1 s training."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import save_tiny

    from engine.__main__ import main

    target_dir, _ = save_tiny(tmp_path, "llama", 0)
    common = ["train", "--target", str(target_dir), "--data", str(tmp_path / "data"),
              "--prompts", "8", "--eval-prompts", "2", "--max-new-tokens", "12", "--gen-batch", "4", "--layers", "1",
              "--block-size", "4", "--mask-id", "3", "--batch", "2", "--anchors", "4", "--max-minutes", "5"]

    def run(*extra):
        capsys.readouterr()
        code = main(common + list(extra))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    first = run("--out", str(tmp_path / "d1"), "--steps", "3", "--head-topk", "4", "--negatives", "8", "--loss-depth", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    log1 = json.loads((tmp_path / "d1" / "train_log.json").read_text())
    assert log1["steps"] == 3 and log1["final"] and log1["lineage"] == []
    assert "top-4 + 8 negatives" in (tmp_path / "d1" / "README.md").read_text()
    second = run("--out", str(tmp_path / "d2"), "--steps", "2", "--no-gen", "--fresh", "--init-from", str(tmp_path / "d1"))
    assert second.returncode == 0, second.stderr[-2000:]
    log2 = json.loads((tmp_path / "d2" / "train_log.json").read_text())
    assert log2["steps"] == 2 and [r["steps"] for r in log2["lineage"]] == [3]
    assert log2["evals"][0]["tau_sim"] == log1["evals"][-1]["tau_sim"]  # step 0 of run 2 is run 1's drafter
    assert "earlier run 1 | 3 steps" in (tmp_path / "d2" / "README.md").read_text()
    ev = run("--out", str(tmp_path / "d4"), "--eval-only", "--init-from", str(tmp_path / "d1"), "--eval-sets",
             "math,chat", "--eval-prompts", "2")
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "eval math: tau_sim " in ev.stdout and "eval chat: tau_sim " in ev.stdout and "(2 prompts" in ev.stdout
    assert not (tmp_path / "d4").exists()  # nothing exported
    other = run("--out", str(tmp_path / "d6"), "--prompt-seed", "5")   # the folder holds seed 0's responses
    assert other.returncode == 2 and other.stderr.startswith("error: data: ") and "prompt-seed 0" in other.stderr
    ev3 = run("--out", str(tmp_path / "d4"), "--eval-only", "--init-from", str(tmp_path / "d1"), "--eval-prompts", "3")
    assert ev3.returncode == 0 and "answers other prompts" in ev3.stdout and "(3 prompts" in ev3.stdout, ev3.stderr
    grow = run("--out", str(tmp_path / "d5"), "--steps", "1", "--no-gen", "--fresh", "--layers", "2",
               "--init-from", str(tmp_path / "d1"), "--prompt-seed", "5")
    assert grow.returncode == 0 and "layers [1] added on top" in grow.stdout, grow.stderr[-2000:]
    log5 = json.loads((tmp_path / "d5" / "train_log.json").read_text())
    assert log5["evals"][0]["tau_sim"] == log1["evals"][-1]["tau_sim"]  # the grown drafter drafts as before
    # --no-gen trains on the folder's responses: the card names the prompts they were made from, not --prompt-seed's
    assert "seed=0)" in log5["data"]["prompt_set"], log5["data"]
    # --more-data: another folder's responses (another prompt seed) trained on too, each named on the card
    assert run("--out", str(tmp_path / "d7"), "--gen-only", "--data", str(tmp_path / "data5"), "--prompt-seed",
               "5").returncode == 0
    n5 = sum(len(json.loads(x)["response_ids"]) >= 2 for f in (tmp_path / "data5").glob("train-*.jsonl")
             for x in f.read_text().splitlines() if x.strip())
    both = run("--out", str(tmp_path / "d7"), "--steps", "1", "--no-gen", "--fresh", "--init-from", str(tmp_path / "d1"),
               "--more-data", str(tmp_path / "data5"))
    assert both.returncode == 0, both.stderr[-2000:]
    log7 = json.loads((tmp_path / "d7" / "train_log.json").read_text())
    assert n5 > 0 and log7["data"]["sequences"] == log5["data"]["sequences"] + n5, (log7["data"], n5)
    assert "build_prompts(8, seed=0) + build_prompts(8, seed=5)" in log7["data"]["prompt_set"], log7["data"]
    nothing = run("--out", str(tmp_path / "d8"), "--no-gen", "--more-data", str(tmp_path / "d1"))
    assert nothing.returncode == 2 and nothing.stderr.startswith("error: more_data: "), nothing.stderr[-2000:]
    bad = run("--out", str(tmp_path / "d3"), "--steps", "1", "--no-gen", "--fresh", "--target-layers", "0,1,2",
              "--init-from", str(tmp_path / "d1"))
    assert bad.returncode == 2 and "error: init_from: " in bad.stderr and "does not fit" in bad.stderr


@pytest.mark.parametrize("flags, field", [
    (["--loss-depth", "4", "--block-size", "4"], "loss_depth"), (["--head-topk", "8", "--kl", "0"], "head_topk"),
    (["--kl", "1.5"], "kl"), (["--anchors", "0"], "anchors"), (["--init-from", "/nonexistent"], "init_from"),
    (["--families", "code,poetry"], "families"), (["--variant", "opd", "--head-topk", "64"], "head_topk"),
    (["--variant", "opd", "--opd-suffix", "-1"], "opd_suffix"), (["--threads", "-1"], "threads"),
    (["--variant", "opd", "--opd-reanchor", "1", "--opd-reanchor-depth", "16"], "opd_reanchor_depth"),
    (["--variant", "opd", "--opd-reanchor", "1", "--opd-reanchor-offsets", "0"], "opd_reanchor_offsets"),
    (["--variant", "domino", "--opd-reanchor", "1"], "opd_reanchor"),
    (["--variant", "opd", "--init-from", str(SHIPPED / "smollm2-135m-dflash-b16"), "--backbone-from",
      str(SHIPPED / "smollm2-135m-opd-b16")], "backbone_from"),
    (["--variant", "domino", "--init-from", str(SHIPPED / "smollm2-135m-domino-b16"), "--backbone-from",
      "/nonexistent"], "backbone_from")])
def test_cli_bad_settings_exit_2_naming_the_option(flags, field):
    from engine.__main__ import main
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["train", "--out", "/nonexistent/out", *flags]) == 2
    assert err.getvalue().startswith(f"error: {field}: "), err.getvalue()


def test_train_state_is_per_out_folder(tmp_path, capsys):
    """A run resumes its own state from --data, and only its own: a second run on the same data folder with another
    --out (two learning rates side by side) starts fresh and does not overwrite the first one's state."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import save_tiny

    from engine.__main__ import main

    target_dir, _ = save_tiny(tmp_path, "llama", 0)
    common = ["train", "--target", str(target_dir), "--data", str(tmp_path / "data"), "--prompts", "6",
              "--eval-prompts", "0", "--max-new-tokens", "10", "--gen-batch", "3", "--layers", "1", "--block-size", "4",
              "--mask-id", "3", "--batch", "2", "--anchors", "4", "--max-minutes", "5"]
    steps = lambda out: json.loads((tmp_path / out / "train_log.json").read_text())["steps"]
    assert main(common + ["--out", str(tmp_path / "a"), "--steps", "2"]) == 0
    assert main(common + ["--out", str(tmp_path / "b"), "--steps", "1", "--no-gen"]) == 0
    assert "resumed from" not in capsys.readouterr().out and steps("b") == 1   # not a's state
    assert main(common + ["--out", str(tmp_path / "a"), "--steps", "3", "--no-gen"]) == 0
    assert "at step 2" in capsys.readouterr().out and steps("a") == 3          # a's own, after b saved
    assert len(list((tmp_path / "data").glob("train_state-*.pt"))) == 2


@pytest.mark.parametrize("flags, field", [(["--target-layers", "-1"], "target_layers"),
                                          (["--target-layers", "0,4"], "target_layers"),
                                          (["--target-layers", "x"], "target_layers"),
                                          (["--target-layers", "1,,2"], "target_layers"),
                                          (["--mask-id", "500"], "mask_id"), (["--mask-id", "-1"], "mask_id")])
def test_cli_flags_out_of_the_targets_range_exit_2(tmp_path_factory, flags, field, capsys):
    """Layer ids and the mask id are checked (against the loaded target) before any generation: -1 trained and exported
    a drafter the engine then refuses; 4 (of 4 layers) and a mask id past the vocabulary were tracebacks; x did
    not name the option."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import save_tiny

    from engine.__main__ import main

    tmp = tmp_path_factory.mktemp("range")
    target_dir, _ = save_tiny(tmp, "llama", 0)   # 4 layers, 8 tokens
    capsys.readouterr()
    assert main(["train", "--target", str(target_dir), "--data", str(tmp / "data"), "--out", str(tmp / "out"),
                 "--prompts", "2", "--eval-prompts", "0", "--max-new-tokens", "4", "--gen-batch", "2", "--steps", "1",
                 "--batch", "1", "--anchors", "2", "--layers", "1", "--block-size", "4", "--mask-id", "3", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and len(err.strip().splitlines()) == 1, err
    assert not list((tmp / "data").glob("*.jsonl")) and not (tmp / "out").exists()   # before any generation


def test_opd_loss_puts_each_row_through_the_head_once_per_side():
    """Draft-OPD's first rejected draft is also the response stream's correction: its p_T(x) was a second pass of
    the target's state through the 49152-wide head, after head_loss's. Head rows (V-wide matmul outputs) counted:
    opd_accepted's argmaxes, the rejected rows' log q (with grad), head_loss's drafter and target rows; no more."""
    from torch.overrides import TorchFunctionMode

    from engine.train.variants import opd_accepted, opd_loss

    class HeadRows(TorchFunctionMode):
        rows = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in ("matmul", "__matmul__", "mm") and out.shape[-1] == V:
                self.rows += out.shape[0]
            return out

    torch.manual_seed(0)
    V, Hd, Bk, n = 12, 6, 4, 6
    W, ht = torch.randn(V, Hd), torch.randn(n * (Bk - 1), Hd)
    labels = (ht @ W.T).argmax(-1)
    hd = torch.where(torch.rand(len(ht), 1) < 0.6, ht * 3, torch.randn_like(ht)).requires_grad_(True)
    block, k = torch.arange(n).repeat_interleave(Bk - 1), torch.arange(1, Bk).repeat(n)
    with HeadRows() as seen_acc:
        acc = opd_accepted(hd.detach(), labels, block, k, W, 5)
    resp, rej = (k <= acc + 1).sum().item(), (k == acc + 1).sum().item()
    assert 0 < rej < n   # some blocks miss inside, some are accepted whole
    with HeadRows() as seen:
        opd_loss(hd, ht, labels, block, k, W, gamma=0.7, reject_weight=0.5, chunk=5)
    assert seen.rows == seen_acc.rows + rej + 2 * resp

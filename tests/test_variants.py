"""The paper's drafter variants (engine/models/variants.py): Domino and DSpark heads on a DFlash backbone.

Tiny random models in each released format: the sequential head's math (GRU step, teacher forcing = drafting),
losslessness over every variant x alignment x mode x rule at T=0 in fp32, folders saved in the released formats
and loaded back through load_models / --drafter, and clear errors for folders that do not fit.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.decode import DecodeConfig, Engine
from engine.decode.drafting import propose
from engine.errors import InputError
from engine.models import load_models
from engine.models.variants import DominoDraftModel, DSparkDraftModel
from engine.trace import TraceError, validate_trace
from engine.decode.checks import greedy_reference, lossless_configs
from tiny import save_tiny, tiny_variant_models

VARIANTS = [("domino", False), ("domino", True), ("dspark", False), ("dspark", True)]
N_NEW = 16


def test_gru_step_is_torchs_gru():
    m = tiny_variant_models("domino", 0)
    d = m.drafter
    x = torch.randn(3, 5, d.config.hidden_size)
    out, _ = d.prefix_gru(x)
    h = torch.zeros(3, d.prefix_gru.hidden_size)
    for j in range(5):
        h = d.gru_step(x[:, j], h)
        assert torch.allclose(h, out[:, j], atol=1e-5)


@pytest.mark.parametrize("variant", ["domino", "dspark"])
def test_teacher_forcing_computes_what_drafting_does(variant):
    """The training path (all positions at once, fed the tokens) equals the sequential head that drafted them."""
    m = tiny_variant_models(variant, 1)
    d = m.drafter
    d.use_target_embeddings(m.target.get_input_embeddings().weight)
    head = m.target.get_output_embeddings()
    hidden = torch.randn(4, 5, d.config.hidden_size)
    anchors = torch.tensor([4, 5, 6, 7])
    p = propose(d, hidden, anchors, head, 0.0, None, True)
    prev = torch.cat([anchors[:, None], p.tokens[:, :-1]], 1)
    u, W2 = d.teacher_forced(hidden, prev)
    want = d.compute_logits(hidden, head).float() + u @ W2.T
    assert torch.allclose(p.logits, want, atol=1e-4)
    assert (p.tokens != p.backbone).any(), "the head never changed a token: the test proves little"
    if variant == "dspark":
        e, _ = d.teacher_forced(hidden, prev)
        assert torch.allclose(p.confidence, torch.sigmoid(d.confidence_logit(hidden, e)), atol=1e-5)


def test_every_variant_mode_and_rule_is_lossless():
    """Domino and DSpark, DFlash-aligned and shift-label, every mode and rule: target-only greedy, token for token."""
    gained = 0
    for variant, shift in VARIANTS:
        corrected = 0
        for seed, prompt in ((0, "ab"), (1, "c a b"), (3, "a")):
            m = tiny_variant_models(variant, seed, block_size=4 + seed % 3, shift_label=shift)
            eng = Engine(m, draft_head_dtype=None)
            assert eng.block_size == m.drafter.block_size + shift  # a shift-label block drafts one more token
            ids = eng.encode_prompt(prompt)
            want = greedy_reference(m.target, ids, N_NEW)
            for mode, rule in lossless_configs():
                run = eng.run(ids, DecodeConfig(mode=mode, rule=rule, max_new_tokens=N_NEW, seed=seed,
                                                ignore_eos=True))
                rounds = list(run)
                assert run.result["output_ids"] == want, (variant, shift, seed, mode, rule)
                corrected += sum(len(r.get("backbone", [])) for r in rounds)
                gained += sum(1 for r in rounds for n in r["accepted_nodes"]
                              if 0 not in [r["paths"][p]["source"] for p in r["trie"]["provenance"][n]])
                if variant == "dspark" and mode != "ar":
                    assert all(len(r["confidence"]) == len(r["baseline"]) - 1 for r in rounds)
            validate_trace(run.trace())
        assert corrected > 0, f"{variant} never changed a backbone token: the test proves little"
    assert gained > 0, "no token was ever accepted through a shifted block: the test proves little"


@pytest.mark.parametrize("variant", ["domino", "dspark"])
def test_sampling_draws_from_the_corrected_law(variant):
    """T > 0: drafts are samples of the corrected logits, and the run still verifies (a trace that validates)."""
    m = tiny_variant_models(variant, 2)
    eng = Engine(m, draft_head_dtype=None)
    run = eng.run(eng.encode_prompt("ab c"), DecodeConfig(mode="reanchor", temperature=0.8, max_new_tokens=12,
                                                           ignore_eos=True, seed=3))
    run.finish()
    validate_trace(run.trace())
    d = m.drafter
    p = propose(d, torch.randn(2, 4, d.config.hidden_size), torch.tensor([4, 5]), m.target.get_output_embeddings(),
                0.8, torch.Generator().manual_seed(0), False)
    assert torch.allclose(p.probs, torch.softmax(p.logits / 0.8, -1), atol=1e-5)


@pytest.mark.parametrize("variant", ["domino", "dspark"])
def test_sequential_heads_keep_the_target_law(variant):
    """T=1, speculative acceptance: a round's first two tokens follow the target's law (chi-square) when the
    head's drafts are tested against q = their law given the row's drafts before them (engine/sampling.py)."""
    from engine.decode.checks import law_case

    m = tiny_variant_models(variant, 0, block_size=6, init=0.12)   # a strong head: q far from the backbone's
    recs = law_case(m, "reanchor", "earliest")
    assert all(b["q"] is not None for r in recs for b in r["shifted"]) and any(r["shifted"] for r in recs)
    assert sum(len(r.get("backbone", [])) for r in recs) > 0, "the head never changed a draft: the test proves little"


def _drafts(eng, prompt="ab c"):
    run = eng.run(eng.encode_prompt(prompt), DecodeConfig(mode="reanchor", max_new_tokens=N_NEW, ignore_eos=True))
    run.finish()
    return run.trace()


@pytest.mark.parametrize("variant, shift", VARIANTS)
def test_saved_folder_loads_back_through_load_models(tmp_path, variant, shift):
    m = tiny_variant_models(variant, 3, shift_label=shift)
    target_dir, _ = save_tiny(tmp_path, "qwen3", 3)
    m.drafter.save_pretrained(tmp_path / "drafter")
    cfg = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert cfg["architectures"] == [{"domino": "DFlashDraftModel", "dspark": "Qwen3DSparkModel"}[variant]]
    if variant == "dspark":  # DSpark's released fields sit at the top level
        assert "dflash_config" not in cfg and cfg["markov_rank"] == 8 and "mask_token_id" in cfg
    else:
        assert cfg["dflash_config"]["projector_type"] == "domino"
    loaded = load_models(str(target_dir), str(tmp_path / "drafter"), "cpu", "float32")
    assert type(loaded.drafter) is type(m.drafter)
    a = _drafts(Engine(m, draft_head_dtype=None))
    b = _drafts(Engine(loaded, draft_head_dtype=None))
    assert [r["baseline"] for r in a["rounds"]] == [r["baseline"] for r in b["rounds"]]


def test_saved_domino_folder_has_emb_dim_at_the_top_level(tmp_path):
    """SGLang's Domino loader reads emb_dim at config.json's top level: a saved folder has it there and in
    dflash_config (it had it only in dflash_config), and loads back with the same head."""
    m = tiny_variant_models("domino", 3)
    target_dir, _ = save_tiny(tmp_path, "qwen3", 3)
    m.drafter.save_pretrained(tmp_path / "drafter")
    cfg = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert cfg["emb_dim"] == cfg["dflash_config"]["emb_dim"] == 8
    loaded = load_models(str(target_dir), str(tmp_path / "drafter"), "cpu", "float32")
    assert type(loaded.drafter) is DominoDraftModel and loaded.drafter.embed_proj[0].out_features == 8
    loaded.drafter.save_pretrained(tmp_path / "again")   # saved again from the loaded folder: still both places
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["emb_dim"] == again["dflash_config"]["emb_dim"] == 8


def test_released_key_variants_load(tmp_path):
    """Domino heads nested under `logit_head.` (early checkpoints) and DSpark's copies of the target's embedding
    and head (ignored) load; the drafts are the same."""
    target_dir, _ = save_tiny(tmp_path, "qwen3", 0)
    for variant, rename in (("domino", lambda k: "logit_head." + k if k.startswith(("prefix_gru", "embed_proj")) else k),
                            ("dspark", lambda k: k)):
        m = tiny_variant_models(variant, 0)
        folder = tmp_path / variant
        m.drafter.save_pretrained(folder)
        w = load_file(folder / "model.safetensors")
        w = {rename(k): v for k, v in w.items()}
        if variant == "dspark":
            emb = m.target.get_input_embeddings().weight.detach().clone()
            w |= {"embed_tokens.weight": emb, "lm_head.weight": emb.clone()}
        save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
        loaded = load_models(str(target_dir), str(folder), "cpu", "float32")
        a = _drafts(Engine(m, draft_head_dtype=None))
        b = _drafts(Engine(loaded, draft_head_dtype=None))
        assert [r["baseline"] for r in a["rounds"]] == [r["baseline"] for r in b["rounds"]], variant


@pytest.mark.parametrize("variant, field, weight", [
    ("domino", "gru_hidden_dim", "prefix_gru.weight_hh_l0"), ("domino", "emb_dim", "embed_proj.2.weight"),
    ("dspark", "markov_rank", "markov_head.markov_w2.weight")])
def test_a_folder_that_does_not_fit_names_what_is_missing(tmp_path, variant, field, weight):
    from engine.__main__ import main

    target_dir, _ = save_tiny(tmp_path, "qwen3", 0)
    m = tiny_variant_models(variant, 0)
    for what in ("field", "weight"):
        folder = tmp_path / f"{variant}-{what}"
        m.drafter.save_pretrained(folder)
        if what == "field":
            cfg = json.loads((folder / "config.json").read_text())
            (cfg["dflash_config"] if variant == "domino" else cfg).pop(field)
            cfg.pop(field, None)   # Domino's emb_dim sits at the top level too (read from either place)
            (folder / "config.json").write_text(json.dumps(cfg))
        else:
            w = load_file(folder / "model.safetensors")
            w.pop(weight)
            save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
        with pytest.raises(InputError) as e:
            load_models(str(target_dir), str(folder), "cpu", "float32")
        assert e.value.field == "drafter" and (field if what == "field" else weight) in str(e.value)
        assert main(["generate", "--prompt", "ab", "--target", str(target_dir), "--drafter", str(folder),
                     "--max-new-tokens", "4"]) == 2


def test_head_notes_in_the_trace_schema():
    m = tiny_variant_models("dspark", 0)
    tr = _drafts(Engine(m, draft_head_dtype=None))
    assert any(r["backbone"] for r in tr["rounds"]) and all("confidence" in r for r in tr["rounds"])
    ids = {int(k) for k in tr["token_texts"]}
    assert all(b["token"] in ids for r in tr["rounds"] for b in r["backbone"])
    old = json.loads(json.dumps(tr))
    for r in old["rounds"]:  # a trace of a plain DFlash drafter: no head notes
        r.pop("backbone"), r.pop("confidence")
        for b in r["shifted"]:
            b.pop("confidence", None)
    validate_trace(old)
    for bad in ({"d": 99, "j": 1, "token": 1}, {"d": 0, "j": 0, "token": 1}, {"d": 0, "j": 1}):
        broken = json.loads(json.dumps(tr))
        broken["rounds"][0]["backbone"] = [bad]
        with pytest.raises(TraceError, match="backbone"):
            validate_trace(broken)
    broken = json.loads(json.dumps(tr))
    broken["rounds"][0]["confidence"] = [1.5] * (len(broken["rounds"][0]["baseline"]) - 1)
    with pytest.raises(TraceError, match="confidence"):
        validate_trace(broken)


def test_classes_come_from_the_config():
    from engine.models import drafter_class

    assert drafter_class(tiny_variant_models("domino", 0).drafter.config) is DominoDraftModel
    assert drafter_class(tiny_variant_models("dspark", 0).drafter.config) is DSparkDraftModel


def _released_folder(tmp_path, variant: str, name: str | None = None, seed: int = 0, **fields):
    """A drafter folder written as the released checkpoints are, not by our save_pretrained: config.json in the
    reference's layout (Domino: jianuo-huang/Domino's dflash_config, emb_dim also at the top level where SGLang
    reads it, shift_label and pure prefix 1 as Huang2020/*-Domino-b16; DSpark: deepseek-ai/DeepSpec's
    build_draft_config, fields at the top level, num_anchors, no shift_label) and random weights under the
    reference's key names (DSpark's frozen copies of the target's embed_tokens / lm_head included). `fields`
    override config entries (None removes one). Returns (folder, the raw head weights, the target folder)."""
    from tiny import tiny_models

    target_dir, _ = save_tiny(tmp_path, "qwen3", 0)
    m = tiny_models("qwen3", 0, block_size=6)
    cfg = m.drafter.config.to_dict()
    V, H, G, R = cfg["vocab_size"], cfg["hidden_size"], 16, 8
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape, scale=1.0: (scale * torch.randn(*shape, generator=g)).contiguous()   # noqa: E731
    w = {k: v.contiguous() for k, v in m.drafter.state_dict().items()}
    if variant == "domino":
        cfg.update(architectures=["DFlashDraftModel"], auto_map={"AutoModel": "dflash.DFlashDraftModel"}, emb_dim=R)
        cfg["dflash_config"] = dict(cfg["dflash_config"], projector_type="domino", gru_hidden_dim=G, emb_dim=R,
                                    pure_draft_prefix_len=1, shift_label=True)
        head = {"prefix_gru.weight_ih_l0": rnd(3 * G, H, scale=0.5), "prefix_gru.weight_hh_l0": rnd(3 * G, G, scale=0.5),
                "embed_proj.0.weight": rnd(R, H + G), "embed_proj.2.weight": rnd(V, R, scale=4.0)}
    else:
        dc = cfg.pop("dflash_config")
        r = fields.get("markov_rank", R)
        with_markov = fields.get("confidence_head_with_markov", True)
        cfg.update(architectures=["Qwen3DSparkModel"], mask_token_id=dc["mask_token_id"],
                   target_layer_ids=dc["target_layer_ids"], num_anchors=512, enable_confidence_head=True,
                   confidence_head_with_markov=True, markov_rank=R, markov_head_type="vanilla",
                   layer_types=["full_attention"] * cfg["num_hidden_layers"])
        head = {"confidence_head.proj.weight": rnd(1, H + (r if with_markov else 0)), "confidence_head.proj.bias": rnd(1)}
        if r:
            head |= {"markov_head.markov_w1.weight": rnd(V, r), "markov_head.markov_w2.weight": rnd(V, r, scale=4.0)}
        emb = m.target.get_input_embeddings().weight.detach()
        w |= {"embed_tokens.weight": emb.clone(), "lm_head.weight": m.target.get_output_embeddings().weight.detach().clone()}
    for k, v in fields.items():
        cfg.pop(k) if v is None else cfg.__setitem__(k, v)
    folder = tmp_path / (name or variant)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(w | head, folder / "model.safetensors", metadata={"format": "pt"})
    return folder, head, target_dir


def _raw_reference_block(variant: str, head: dict, cfg: dict, z, anchors, base):
    """One block drafted greedily from the raw checkpoint tensors, as the released decoders write it
    (Domino: code/dflash.py spec_generate; DSpark: deepspec/eval/dspark draft_ops + markov_head.VanillaMarkov):
    (tokens, corrected logits, per-position confidence or None), independently of the engine's classes."""
    toks, logits, conf = [], [], []
    if variant == "domino":
        p = cfg["dflash_config"]["pure_draft_prefix_len"]
        W_ih, W_hh = head["prefix_gru.weight_ih_l0"], head["prefix_gru.weight_hh_l0"]
        gru = torch.nn.GRU(W_ih.shape[1], W_hh.shape[1], num_layers=1, batch_first=True, bias=False)
        with torch.no_grad():
            gru.weight_ih_l0.copy_(W_ih), gru.weight_hh_l0.copy_(W_hh)
        E = cfg["_target_embed"]
        prefix = torch.cat([anchors[:, None], base[:, :p].argmax(-1)], 1)       # anchor + the pure prefix's drafts
        toks += list(prefix[:, 1:].T)
        logits += list(base[:, :p].transpose(0, 1))
        _, h = gru(E[prefix])                                                     # the GRU over the realized prefix
        for i in range(p, z.shape[1]):
            u = torch.nn.functional.silu(torch.cat([z[:, i], h[0]], -1) @ head["embed_proj.0.weight"].T)
            lg = base[:, i] + u @ head["embed_proj.2.weight"].T
            toks.append(lg.argmax(-1)), logits.append(lg)
            _, h = gru(E[toks[-1]][:, None], h)
        return torch.stack(toks, 1), torch.stack(logits, 1), None
    prev = anchors
    for j in range(z.shape[1]):
        lg = base[:, j]
        if "markov_head.markov_w1.weight" in head:
            e = head["markov_head.markov_w1.weight"][prev]
            lg = lg + e @ head["markov_head.markov_w2.weight"].T
        feats = torch.cat([z[:, j], e], -1) if cfg.get("confidence_head_with_markov") else z[:, j]
        conf.append(torch.sigmoid(feats @ head["confidence_head.proj.weight"][0] + head["confidence_head.proj.bias"][0]))
        prev = lg.argmax(-1)
        toks.append(prev), logits.append(lg)
    return torch.stack(toks, 1), torch.stack(logits, 1), torch.stack(conf, 1)


@pytest.mark.parametrize("variant, fields", [
    ("domino", {}), ("dspark", {}), ("dspark", {"markov_head_type": "Vanilla"}),
    ("dspark", {"markov_rank": 0, "markov_head_type": None, "confidence_head_with_markov": False})])
def test_released_format_folders_draft_what_the_reference_computes(tmp_path, variant, fields):
    """A folder in the released layout (reference key names and config fields) loads through load_models into our
    class, and its block drafts equal the reference's formula computed from the raw tensors: Domino's GRU over the
    anchor and the pure prefix's drafts, then W2 SiLU(W1 [z; h]) fed back the corrected argmax; DSpark's
    W_M E_M[previous draft] and sigmoid(w [z; E_M[previous]] + b). DeepSpec lower-cases markov_head_type, and
    markov_rank 0 means no Markov head (its confidence head then reads z alone); it decodes losslessly."""
    folder, head, target_dir = _released_folder(tmp_path, variant, **fields)
    cfg = json.loads((folder / "config.json").read_text())
    m = load_models(str(target_dir), str(folder), "cpu", "float32")
    d = m.drafter
    assert type(d) is {"domino": DominoDraftModel, "dspark": DSparkDraftModel}[variant] and d.block_offset == 0
    loaded = dict(d.named_parameters())
    assert all(torch.equal(loaded[k], v) for k, v in head.items())
    emb, out = m.target.get_input_embeddings().weight.detach(), m.target.get_output_embeddings()
    d.use_target_embeddings(emb)
    cfg["_target_embed"] = emb
    g = torch.Generator().manual_seed(1)
    z = torch.randn(6, d.block_size, d.config.hidden_size, generator=g)    # shift-label: B inputs draft B tokens
    anchors = torch.randint(4, d.config.vocab_size, (6,), generator=g)
    with torch.no_grad():
        p = propose(d, z, anchors, out, 0.0, None, True)
        base = out(z).float()
        toks, logits, conf = _raw_reference_block(variant, head, cfg, z, anchors, base)
    assert torch.equal(p.tokens, toks)
    assert torch.allclose(p.logits, logits, atol=1e-4)
    assert torch.equal(p.backbone, base.argmax(-1))
    if fields.get("markov_rank") != 0:
        assert (p.tokens != p.backbone).any(), "the head never changed a token: the test proves little"
    if variant == "dspark":
        assert torch.allclose(p.confidence, conf, atol=1e-5)
    eng = Engine(m, draft_head_dtype=None)
    ids = eng.encode_prompt("ab c")
    run = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=N_NEW, ignore_eos=True))
    assert run.finish()["output_ids"] == greedy_reference(m.target, ids, N_NEW)


@pytest.mark.parametrize("variant, fields, named", [
    ("domino", {"dflash_config": "causal_v3"}, "projector_type"),   # a projector the released loaders refuse
    ("domino", {"dflash_config": "use_bias_gate"}, "use_bias_gate"),
    ("domino", {"dflash_config": "use_bias_norm"}, "use_bias_norm"),
    ("dspark", {"architectures": ["Gemma4DSparkModel"]}, "Gemma4DSparkModel"),   # another backbone, same keys
    ("dspark", {"markov_head_type": "gated"}, "markov_head_type"),
    ("dspark", {"markov_rank": 0}, "confidence_head_with_markov")])
def test_released_heads_we_do_not_implement_are_refused(tmp_path, variant, fields, named):
    """Configs naming a head or backbone the engine does not implement fail naming the field, instead of loading
    as a plain DFlash drafter without its head (an unknown projector_type: its weights were dropped as unexpected)
    or as a head without its gate, or a Gemma4 DSpark as a Qwen3 one (its layer keys match)."""
    if "dflash_config" in fields:
        folder, _, target_dir = _released_folder(tmp_path, variant)
        cfg = json.loads((folder / "config.json").read_text())
        what = fields.pop("dflash_config")
        cfg["dflash_config"] |= {"projector_type": what} if what == "causal_v3" else {what: True}
        (folder / "config.json").write_text(json.dumps(cfg))
    else:
        folder, _, target_dir = _released_folder(tmp_path, variant, **fields)
    with pytest.raises(InputError) as e:
        load_models(str(target_dir), str(folder), "cpu", "float32")
    assert e.value.field == "drafter" and named in str(e.value)


def _reference_drafts(d, target, x: list[int], n_in: int, offset: int) -> list[int]:
    """The released decoders' drafting, written out independently of the engine (no caches, no batching):
    the drafter over the whole committed context's features and [x_s, MASK...], then the head step by step
    (Domino: torch's GRU and embed_proj on [z; h]; DSpark: z + W_M E_M[previous])."""
    s = len(x) - 1
    with torch.no_grad():
        out = target(input_ids=torch.tensor([x[:s]]), output_hidden_states=True)
        ctx = torch.cat([out.hidden_states[l + 1] for l in d.target_layer_ids], -1)
        block = torch.tensor([[x[s]] + [int(d.mask_token_id)] * (n_in - 1)])
        emb = target.get_input_embeddings()
        z = d(target_hidden=ctx, noise_embedding=emb(block), position_ids=torch.arange(s + n_in)[None])[0, offset:]
        base = target.get_output_embeddings()(z)
        toks, prev = [], x[s]
        h = None
        if isinstance(d, DominoDraftModel):
            _, h = d.prefix_gru(emb(torch.tensor([[prev]])))
        for j in range(len(z)):
            lg = base[j]
            if isinstance(d, DominoDraftModel) and j >= d.pure_prefix:
                lg = lg + d.embed_proj(torch.cat([z[j], h[0, 0]]))
            elif isinstance(d, DSparkDraftModel):
                lg = lg + d.markov_head.markov_w2(d.markov_head.markov_w1(torch.tensor(prev)))
            prev = int(lg.argmax())
            toks.append(prev)
            if isinstance(d, DominoDraftModel):
                _, h = d.prefix_gru(emb(torch.tensor([[prev]])), h)
    return toks


@pytest.mark.parametrize("variant, shift", VARIANTS)
def test_dflash_mode_matches_the_released_decoding(variant, shift):
    """Every round's drafted block and accepted length, against the released decoders' loop written out here."""
    m = tiny_variant_models(variant, 5, block_size=5, shift_label=shift)
    d, target = m.drafter, m.target
    eng = Engine(m, draft_head_dtype=None)
    ids = eng.encode_prompt("ab c ba")
    rounds = list(eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=24, ignore_eos=True)))
    x = ids + [rounds[0]["anchor"]]
    for r in rounds:
        L = r["block_size"]
        want = _reference_drafts(d, target, x, L - 1 + (0 if shift else 1), 0 if shift else 1)
        assert r["baseline"][1:] == want[:L - 1], (r["round"], r["baseline"], want)
        x = x + r["new_tokens"]


def test_confidence_scores_the_nodes_the_budget_calibrates():
    """A confidence head's c_j replaces the drafter's probability in every node's score (chain and tree
    modes), and the auto node budget calibrates and cuts by that score; the runs stay lossless."""
    import math
    import random

    from engine.decode.cost import Budget, Profile
    from engine.tree import head_logq, tree_proposal

    assert head_logq(-0.1, -0.1, 0.5, True) == pytest.approx(math.log(0.5))
    # another token: its share (q / (1 - q_drafted)) of the head's 1 - c
    assert head_logq(math.log(0.2), math.log(0.6), 0.5, False) == pytest.approx(math.log(0.5 * 0.2 / 0.4))
    assert head_logq(math.log(0.2), math.log(0.6), 1.0, False) > -30   # floored, never -inf
    ranked = [[[(5, math.log(0.6)), (6, math.log(0.3))], [(7, math.log(0.9)), (8, math.log(0.05))]]]
    _, _, trie, plain = tree_proposal([4, 5, 7], {}, ranked, "ddtree", "earliest", random.Random(0), 2, 5)
    _, _, _, head = tree_proposal([4, 5, 7], {}, ranked, "ddtree", "earliest", random.Random(0), 2, 5,
                                  [[0.5, 0.25]])
    # (parent's token, token): under the sibling 6, the drafted 7 keeps the head's c of that position
    want = {(4, 5): math.log(0.5), (4, 6): math.log(0.5 * 0.3 / 0.4), (5, 7): math.log(0.5 * 0.25),
            (6, 7): math.log(0.5 * 0.3 / 0.4 * 0.25)}
    seen = {(trie.tokens[trie.parents[n]], trie.tokens[n]): head["score"][n] for n in range(1, len(trie))}
    assert set(want) <= set(seen)
    for key, x in want.items():
        assert seen[key] == pytest.approx(x, abs=1e-3), key
    assert head["prob"] == plain["prob"] and head["score"] != plain["score"]

    m = tiny_variant_models("dspark", 1)
    eng = Engine(m, draft_head_dtype=None)
    ids = eng.encode_prompt("ab c")
    want_ids = greedy_reference(m.target, ids, N_NEW)
    for mode in ("reanchor", "reanchor-tree"):
        budget = Budget(Profile(eng.block_size, [1, 2, 4], [1.0, 1.5, 2.5], [1, 8, 16], [1.0, 1.2, 1.5]))
        cfg = DecodeConfig(mode=mode, max_shifted="auto", max_trie_nodes="auto", max_new_tokens=N_NEW, ignore_eos=True)
        run = eng.run(ids, cfg, budget)
        run.finish()
        assert run.result["output_ids"] == want_ids, mode
        assert sum(budget.calib.seen) == sum(len(r["trie"]["tokens"]) - 1 for r in run.rounds)
        checked = 0
        for r in run.rounds:  # the baseline's chain: score = sum of log c along it
            t, acc, node = r["trie"], 0.0, 0
            for j in range(1, len(r["baseline"])):   # follow g(0)'s own tokens down the trie
                kids = [n for n in range(len(t["tokens"])) if t["parents"][n] == node and t["tokens"][n] == r["baseline"][j]]
                if not kids or t["block"][kids[0]] != 0:   # a node a shifted block proposed first: its own c
                    break
                node = kids[0]
                acc += math.log(max(r["confidence"][j - 1], 1e-9))
                assert t["score"][node] == pytest.approx(acc, abs=2e-3), (mode, r["round"], j)
                checked += 1
        assert checked > 0, f"{mode}: the baseline's chain was never verified: the test proves little"


def test_train_variants_end_to_end(tmp_path):
    """`python -m engine train --variant domino|dspark|opd` on a tiny target, from a DFlash drafter it trained first:
    heads train on the frozen backbone (step 0 drafts as the backbone: W2 starts at zero), Draft-OPD trains the
    whole drafter; each export loads through load_models and decodes losslessly."""
    from safetensors.torch import load_file

    from engine.__main__ import main

    target_dir, _ = save_tiny(tmp_path, "llama", 0)
    common = ["train", "--target", str(target_dir), "--data", str(tmp_path / "data"), "--prompts", "8",
              "--eval-prompts", "2", "--max-new-tokens", "12", "--gen-batch", "4", "--layers", "1", "--block-size", "4",
              "--mask-id", "3", "--batch", "2", "--anchors", "4", "--max-minutes", "5", "--steps", "3"]
    assert main(common + ["--out", str(tmp_path / "dflash")]) == 0
    base = load_file(tmp_path / "dflash" / "model.safetensors")
    for variant, anchors, suffix in (("domino", "", 0), ("dspark", "", 0), ("opd", "random", 2), ("opd", "rollout", 0)):
        out = tmp_path / (variant + anchors)
        replay = ["--opd-reanchor", "1", "--opd-reanchor-depth", "2"] if anchors == "rollout" else []
        assert main(common + ["--no-gen", "--variant", variant, "--init-from", str(tmp_path / "dflash"), "--out", str(out),
                              "--head-depth", "2", "--negatives", "8", "--head-rank", "8", "--gru-hidden", "16"]
                    + (["--opd-anchors", anchors, "--opd-suffix", str(suffix)] if anchors else []) + replay) == 0
        log = json.loads((out / "train_log.json").read_text())
        start = json.loads((tmp_path / "dflash" / "train_log.json").read_text())["evals"][-1]["tau_sim"]
        assert log["steps"] == 3 and log["final"] and log["evals"][-1]["by_set"]
        w = load_file(out / "model.safetensors")
        moved = [k for k in base if not torch.equal(w[k], base[k])]
        if variant == "opd":
            assert moved and log["data"]["opd_sequences"] > 0 and log["data"]["opd_anchors"] == anchors
            # the replay stream ran: its shifted blocks were drafted, attached and trained on
            assert bool(replay) == ("reanchor_replay_acc_by_depth" in log["evals"][-1])
            assert bool(replay) == ("ReAnchor replay weight 1.0" in (out / "README.md").read_text())
        else:
            assert moved == [] and log["evals"][0]["tau_sim"] == start  # frozen backbone; a head that starts at zero
            assert any(k.startswith(("prefix_gru", "markov_head")) for k in w)
        assert f"# smollm2-135m-{variant}-b4" in (out / "README.md").read_text()
        m = load_models(str(target_dir), str(out), "cpu", "float32")
        eng = Engine(m, draft_head_dtype=None)
        ids = eng.encode_prompt("ab c")
        run = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=N_NEW, ignore_eos=True))
        assert run.finish()["output_ids"] == greedy_reference(m.target, ids, N_NEW)
    assert main(common + ["--no-gen", "--variant", "domino", "--out", str(tmp_path / "x")]) == 2  # no --init-from
    # --backbone-from: the Domino head trained above moves onto the Draft-OPD backbone, which stays frozen
    head = ["--head-depth", "2", "--negatives", "8"]
    out = tmp_path / "domino-on-opd"
    assert main(common + ["--no-gen", "--variant", "domino", "--init-from", str(tmp_path / "domino"),
                          "--backbone-from", str(tmp_path / "opdrandom"), "--out", str(out)] + head) == 0
    w, opd, dom = (load_file(f / "model.safetensors") for f in (out, tmp_path / "opdrandom", tmp_path / "domino"))
    assert all(torch.equal(w[k], opd[k]) for k in base) and any(not torch.equal(opd[k], base[k]) for k in base)
    assert {k for k in w if k not in base} == {k for k in dom if k not in base}   # the head's own shape, kept
    assert "(head; backbone: " in (out / "README.md").read_text()
    m = load_models(str(target_dir), str(out), "cpu", "float32")
    ids = Engine(m, draft_head_dtype=None).encode_prompt("ab c")
    run = Engine(m, draft_head_dtype=None).run(ids, DecodeConfig(mode="reanchor", max_new_tokens=N_NEW, ignore_eos=True))
    assert run.finish()["output_ids"] == greedy_reference(m.target, ids, N_NEW)
    assert main(common + ["--no-gen", "--variant", "dspark", "--init-from", str(tmp_path / "dspark"),
                          "--backbone-from", str(tmp_path / "domino"), "--out", str(tmp_path / "y")] + head) == 2


def test_head_rows_cache_is_reused_and_extended(tmp_path, monkeypatch):
    """The heads' cached backbone rows (--data/head-rows/, a file per SEQS_PER_FILE sequences): another variant on
    the same backbone, and a head trained on from its own export, read every file back; data added to --data adds
    files for the new sequences only; the rows read back equal rows computed afresh with other file boundaries."""
    import shutil

    from engine.__main__ import main
    from engine.train import variants as V

    got = []
    real = V.HeadTrainer.head_rows
    def every_row(self):   # the store, and all its rows gathered in order
        store = real(self)
        got.append(store.take(torch.arange(len(store))))
        return store

    monkeypatch.setattr(V.HeadTrainer, "head_rows", every_row)
    target_dir, _ = save_tiny(tmp_path, "llama", 0)
    common = ["train", "--target", str(target_dir), "--data", str(tmp_path / "data"), "--prompts", "8",
              "--eval-prompts", "2", "--max-new-tokens", "12", "--gen-batch", "4", "--layers", "1", "--block-size", "4",
              "--mask-id", "3", "--batch", "2", "--anchors", "4", "--max-minutes", "5", "--steps", "2"]
    head = ["--no-gen", "--head-depth", "2", "--negatives", "8", "--head-rank", "8", "--gru-hidden", "16"]
    assert main(common + ["--out", str(tmp_path / "dflash")]) == 0
    monkeypatch.setattr(V, "SEQS_PER_FILE", 3)
    cache = tmp_path / "data" / "head-rows"

    def files() -> dict:
        return {p.name: p.stat().st_mtime_ns for p in cache.glob("*.pt")}

    def train(variant: str, init: str, data: str = "data", *extra: str) -> None:
        assert main(common + head + ["--variant", variant, "--init-from", str(tmp_path / init), "--data",
                                     str(tmp_path / data), "--out", str(tmp_path / f"{variant}-{len(got)}"), *extra]) == 0

    train("domino", "dflash")
    first = files()
    n_seqs = json.loads((tmp_path / "domino-0" / "train_log.json").read_text())["data"]["sequences"]
    assert len(first) == -(-n_seqs // 3) >= 2
    train("dspark", "dflash")
    train("domino", "domino-0", "data", "--head-rank", "4")   # trained on: the same backbone, another head
    assert files() == first         # read back, not rewritten
    assert "Domino head (GRU state 16, rank 8, pure prefix 1)" in (tmp_path / "domino-2" / "README.md").read_text()
    assert all(torch.equal(getattr(got[0], k), getattr(r, k)) for r in got[1:] for k in V.HeadRows.__dataclass_fields__)

    shard = sorted((tmp_path / "data").glob("train-*.jsonl"))[0]
    shutil.copy(shard, tmp_path / "data" / "train-99999.jsonl")   # more data, after the old
    train("domino", "dflash")
    grown = files()
    assert {k: grown[k] for k in first} == first and len(grown) > len(first)
    assert len(got[-1]) > len(got[0]) and torch.equal(got[-1].z[:len(got[0])], got[0].z)

    shutil.copytree(tmp_path / "data", tmp_path / "fresh", ignore=shutil.ignore_patterns("head-rows"))
    monkeypatch.setattr(V, "SEQS_PER_FILE", 5)   # other file boundaries, computed afresh
    train("domino", "dflash", "fresh")
    assert all(torch.equal(getattr(got[-1], k), getattr(got[-2], k)) for k in V.HeadRows.__dataclass_fields__)


def test_row_store_gathers_rows_across_cache_files_in_order(tmp_path):
    """The memory-mapped store returns exactly the rows a joined copy would, for indices spanning files, in their
    order, repeats included."""
    from engine.train.variants import HeadRows, RowStore, _cat

    g, parts, files = torch.Generator().manual_seed(0), [], []
    for i, n in enumerate((5, 1, 7)):
        r = HeadRows(torch.randn(n, 2, 3, generator=g).bfloat16(), torch.randint(-1, 9, (n, 3), generator=g),
                     torch.randint(0, 9, (n, 2, 4), generator=g).int(), torch.randn(n, 2, 4, generator=g).half(),
                     torch.randn(n, 2, 4, generator=g).half())
        parts.append(r)
        files.append(tmp_path / f"{i}.pt")
        torch.save({k: getattr(r, k) for k in HeadRows.__dataclass_fields__}, files[-1])
    store, joined = RowStore(files), _cat(parts)
    idx = torch.tensor([12, 0, 5, 5, 6, 4, 11, 0, 3])
    got = store.take(idx)
    assert len(store) == 13
    assert all(torch.equal(getattr(got, k), getattr(joined, k)[idx]) for k in HeadRows.__dataclass_fields__)


def test_head_loss_trains_the_head():
    """On cached rows, the head's loss falls when it overfits a few anchors, and only head weights get gradients."""
    from engine.train.variants import HeadRows, head_loss_rows

    m = tiny_variant_models("domino", 0, strength=1.0, out_scale=0.0)
    d, W = m.drafter, m.target.get_output_embeddings().weight.detach()
    d.use_target_embeddings(m.target.get_input_embeddings().weight.detach())
    g = torch.Generator().manual_seed(0)
    N, D, K, V = 6, 3, 4, W.shape[0]
    z = torch.randn(N, D, d.config.hidden_size, generator=g)
    tids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(N * D)]).view(N, D, K)
    rows = HeadRows(z.bfloat16(), torch.randint(4, V, (N, D + 1), generator=g), tids.int(),
                    torch.tensor([8.0, 0.0, 0.0, 0.0]).expand(N, D, K).half(),  # sharp: the loss can fall
                    torch.einsum("ndh,ndkh->ndk", z.bfloat16().float(), W[tids]).half())
    d.requires_grad_(False)
    params = d.head_parameters()
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=0.05)
    losses = []
    for _ in range(30):
        loss, hit, k = head_loss_rows(d, rows, W, gamma=4.0, n_neg=4, conf_weight=0.0, gen=g)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0] and len(hit) == len(k) == N * D
    assert all(p.grad is None for p in d.layers.parameters())


def test_head_policy_floor_weighs_only_what_a_greedy_round_reaches():
    """--head-policy-floor 0: a position past the head's first miss (drafts hit, hit, miss, hit) adds nothing to
    the loss, the miss itself does; with the default 1 every position counts (the target law there moves it)."""
    from engine.train.variants import HeadRows, head_loss_rows

    m = tiny_variant_models("domino", 0, strength=1.0, out_scale=0.0)   # W2 = 0: the logits are the backbone's
    d, W = m.drafter, m.target.get_output_embeddings().weight.detach()
    d.use_target_embeddings(m.target.get_input_embeddings().weight.detach())
    g = torch.Generator().manual_seed(1)
    D, K, V = 5, 4, W.shape[0]
    z = 0.01 * torch.randn(1, D, d.config.hidden_size, generator=g)
    tids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(D)])[None]
    blg = torch.zeros(1, D, K)
    blg[0, :, 0] = torch.tensor([30.0, 30.0, 30.0, -30.0, 30.0])   # k=1 is the pure prefix; the miss is at k=4
    tlg = torch.tensor([4.0, 1.0, 0.0, 0.0]).expand(1, D, K).clone()

    def loss(floor, at=None):
        t = tlg.clone()
        if at is not None:
            t[0, at] = torch.tensor([0.0, 4.0, 1.0, 0.0])
        rows = HeadRows(z.bfloat16(), torch.randint(4, V, (1, D + 1), generator=g), tids.int(), t.half(), blg.half())
        return head_loss_rows(d, rows, W, gamma=4.0, n_neg=4, conf_weight=0.0,
                              gen=torch.Generator().manual_seed(0), policy_floor=floor)[0].item()

    assert loss(0.0, at=4) == pytest.approx(loss(0.0))        # past the miss: not reached
    assert loss(0.0, at=3) != pytest.approx(loss(0.0))        # the miss: reached, trained
    assert loss(1.0, at=4) != pytest.approx(loss(1.0))        # the default: every position
    assert loss(0.5, at=4) != pytest.approx(loss(0.5))


def test_opd_accepted_is_the_greedy_prefix_that_matches():
    """a = the number of leading offsets whose greedy draft is the label; a hit after the first miss counts not."""
    from engine.train.variants import opd_accepted

    V = 8
    W = torch.eye(V)
    # block 0: hit, hit, miss, hit -> 2; block 1: miss, hit -> 0; block 2: hit, hit (its sequence ended) -> 2
    drafts = [[1, 2, 3, 4], [5, 6], [7, 1]]
    labels = [[1, 2, 0, 4], [0, 6], [7, 1]]
    hd = torch.cat([torch.eye(V)[d] for d in drafts])
    block = torch.tensor([b for b, d in enumerate(drafts) for _ in d])
    k = torch.tensor([j + 1 for d in drafts for j in range(len(d))])
    acc = opd_accepted(hd, torch.tensor(sum(labels, [])), block, k, W, chunk=2)
    assert acc.tolist() == [2] * 4 + [0] * 2 + [2] * 2


@pytest.mark.parametrize("suffix", [0, 2])
def test_opd_loss_is_its_definition(suffix):
    """Draft-OPD's loss against a plain autograd reference over full logits, block by block: the KL at offsets
    1..a+1, gamma^(o-1) k3 at the first rejected draft and the `suffix` next ones (those scored by the callback,
    given the drafter's own earlier drafts), nothing past them; value and gradient."""
    from engine.train.variants import opd_loss

    def wrong_prefix(blocks, acc, drafts):   # any function of the block, a and the drafter's prefix
        j = torch.arange(drafts.shape[1])
        return -(1 + blocks[:, None] + acc[:, None] + drafts.cumsum(1) % 5 + j).float() / 7

    torch.manual_seed(0)
    V, Hd, Bk = 12, 6, 4
    W = torch.randn(V, Hd)
    ht = torch.randn(3 * (Bk - 1), Hd)
    labels = (ht @ W.T).argmax(-1)           # greedy responses: the label is the target's argmax
    hd = torch.randn_like(ht)
    hd[0], hd[1], hd[3] = ht[0] * 3, ht[1] * 3, ht[3] * 3   # block 0 accepts 2 deep, block 1 at least 1
    hd.requires_grad_(True)
    block = torch.arange(3).repeat_interleave(Bk - 1)
    k = torch.arange(1, Bk).repeat(3)
    gamma, w_x = 0.7, 0.5
    loss, hit = opd_loss(hd, ht, labels, block, k, W, gamma=gamma, reject_weight=w_x, chunk=5, suffix=suffix,
                         suffix_logp=wrong_prefix)
    loss.backward()

    ref_hd = hd.detach().clone().requires_grad_(True)
    logq = torch.log_softmax(ref_hd @ W.T, -1)
    logp = torch.log_softmax(ht @ W.T, -1)
    terms, weights, accepted, later = [], [], [], 0
    for b in range(3):
        rows = [r for r in range(len(k)) if block[r] == b]
        a = 0
        while a < len(rows) and logq[rows[a]].argmax() == labels[rows[a]]:
            a += 1
        accepted += [j < a for j in range(len(rows))]
        for j in range(min(a + 1, len(rows))):
            terms.append((logp[rows[j]].exp() * (logp[rows[j]] - logq[rows[j]])).sum())
            weights.append(1.0)
        xs = [int(logq[r].argmax()) for r in rows[a:a + 1 + suffix]]   # the first rejected draft, then the suffix
        for i, x in enumerate(xs):
            r = rows[a + i]
            lp = logp[r, x] if i == 0 else wrong_prefix(torch.tensor([b]), torch.tensor([a]),
                                                        torch.tensor([xs + [-1] * (1 + suffix - len(xs))]))[0, i]
            log_r = lp - logq[r, x]
            terms.append(log_r.exp() - log_r - 1)
            weights.append(w_x * gamma ** (a + i))
            later += i > 0
    # the KL's value drops the target's entropy (a constant): compare gradients, and values up to that constant
    ent = sum(-(logp[r].exp() * logp[r]).sum() for r in range(len(k)) if k[r] <= 1 + sum(
        accepted[i] for i in range(len(k)) if block[i] == block[r]))
    ref = sum(w * t for w, t in zip(weights, terms)) / sum(weights)
    ref.backward()
    assert hit.tolist() == accepted and sum(accepted) >= 3
    assert later == (3 if suffix else 0)   # suffix rows: offset 3 of block 1 (a = 1), offsets 2, 3 of block 2 (a = 0)
    assert loss.item() == pytest.approx((ref + ent / sum(weights)).item(), abs=1e-4)
    assert torch.allclose(hd.grad, ref_hd.grad, atol=1e-5)


def test_suffix_logp_is_the_target_after_the_drafters_prefix():
    """suffix_logp's one forward (the drafts appended behind a chain mask) against a plain causal forward of
    seq[:start] ++ drafts[:j] for every block and j: the target's log-prob of drafts[j] there."""
    from engine.train.variants import suffix_logp
    from tiny import tiny_target

    target = tiny_target("llama", vocab_size=19, seed=3, init=0.5)
    target.config._attn_implementation = "sdpa"
    W = target.get_output_embeddings().weight.detach()
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(4, 19, (20,), generator=g).tolist()
    starts = [3, 9, 9, 15]
    drafts = torch.randint(4, 19, (4, 4), generator=g)
    drafts[1, 2:] = -1          # a block near the sequence's end: fewer drafts
    got = suffix_logp(target, seq, starts, drafts, W)
    with torch.no_grad():
        for b, q in enumerate(starts):
            for j in range(1, 4):
                if drafts[b, j] < 0:
                    assert got[b, j] == 0
                    continue
                ids = torch.tensor([seq[:q] + drafts[b, :j].tolist()])
                ref = torch.log_softmax(target(input_ids=ids).logits[0, -1].float(), -1)[drafts[b, j]]
                assert got[b, j].item() == pytest.approx(ref.item(), abs=1e-4), (b, j)
    assert (got[:, 0] == 0).all()


def test_rejected_suffixes_are_what_a_greedy_round_retains():
    from engine.train.variants import rejected_suffixes

    seq = [5, 6, 7, 8, 9, 10, 11]
    # anchor 1: drafts 7, 8 accepted, 1 rejected at position 4 -> chain [1, 2, 3] (2 offsets kept: [1, 2])
    # anchor 0: rejected at once (position 1); anchor 4: all accepted to the end; anchor 5: the miss is the last token
    got = rejected_suffixes(seq, [1, 0, 4, 5], [[7, 8, 1, 2, 3], [9, 9, 9, 9, 9], [10, 11, 0, 0, 0], [3, 3, 3, 3, 3]], 2)
    assert got == [(4, [1, 2]), (1, [9, 9])]


def test_reanchor_sites_are_the_earliest_matches_that_leave_a_token():
    from engine.train.variants import reanchor_sites

    seq = [5, 6, 7, 6, 8, 9]
    # start 1, B 4: the block's own tokens 6 7 6 8; a_1 = 6 matches at t 0 and 2 (earliest 0), a_2 = 9 only past the
    # block, a_3 = 8 at t 3, a_4 = 7 at t 1; from start 3, 9 is the last token (nothing after it): no site
    assert reanchor_sites(seq, 1, [6, 9, 8, 7], 4) == [(1, 0), (3, 3), (4, 1)]
    assert reanchor_sites(seq, 3, [9, 6], 4) == [(2, 0)]


def test_replay_batch_drafts_each_shifted_block_as_the_engine_would():
    """replay_batch's one drafter forward (every shifted block behind its own mask) against each shifted block drafted
    alone, as Engine.draft does: context F[<start] ++ the chain's first d states, from a plain causal target forward of
    seq[:start] ++ chain[:d]; block [a_d, MASK...] at start+d..; rows labelled x[start+t+j], t the earliest match."""
    from engine.train.evaluation import frozen_head
    from engine.train.recipe import draft_forward, target_states
    from engine.train.variants import reanchor_sites, rejected_suffixes, replay_batch
    from tiny import tiny_models

    m = tiny_models("llama", seed=2, block_size=6)
    target, drafter, B = m.target, m.drafter, m.drafter.block_size
    W, emb = target.get_output_embeddings().weight.detach(), target.get_input_embeddings().weight.detach()
    head, layers, mask_id = frozen_head(W, 64), drafter.target_layer_ids, int(drafter.mask_token_id)
    g = torch.Generator().manual_seed(0)
    seqs = []
    for n in (22, 15):   # the target's greedy text, so that its tokens after a wrong prefix often recur there
        ids = torch.randint(4, W.shape[0], (3,), generator=g).tolist()
        with torch.no_grad():
            while len(ids) < n:
                ids.append(int(target(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        seqs.append(ids)
    suffixes = [rejected_suffixes(s, anchors, torch.randint(4, W.shape[0], (len(anchors), B - 1), generator=g).tolist(), 3)
                for s, anchors in zip(seqs, ([3, 7, 12, 16], [4, 9]))]
    T = 32
    f = torch.zeros(2, T, len(layers) * W.shape[1])
    for i, s in enumerate(seqs):
        f[i, :len(s)] = target_states(target, layers, input_ids=torch.tensor([s]))[0][0]
    rb = replay_batch(target, head, layers, f, seqs, suffixes, T=T, block_size=B, mask_id=mask_id, depth=2)
    with torch.no_grad():
        hs = draft_forward(drafter, emb, rb["ctx"], rb, torch.float32)
    NS, checked, rows = hs.shape[1] // B, 0, []
    for i, (s, suf) in enumerate(zip(seqs, suffixes)):
        want = []
        for c, (q, chain) in enumerate(suf):
            anchors = []
            for d in range(1, len(chain) + 1):
                feats, final = target_states(target, layers, input_ids=torch.tensor([s[:q] + chain[:d]]))
                anchors.append(int(head(final[0, -1]).argmax()))
            for d, t in reanchor_sites(s, q, anchors, B):
                want.append((c, d, anchors[d - 1], t))
                feats, _ = target_states(target, layers, input_ids=torch.tensor([s[:q] + chain[:d]]))
                block = torch.tensor([[anchors[d - 1]] + [mask_id] * (B - 1)])
                pos = torch.cat([torch.arange(q + d), q + d + torch.arange(B)])[None]
                with torch.no_grad():
                    ref = drafter(target_hidden=feats, noise_embedding=torch.nn.functional.embedding(block, emb),
                                  position_ids=pos, attention_mask=None)[0]
                slot = len(want) - 1
                assert torch.allclose(hs[i, slot * B:(slot + 1) * B], ref, atol=1e-5), (i, c, d)
                checked += 1
                rows += [(i * NS * B + slot * B + j, i * T + q + t + j - 1, s[q + t + j], j)
                         for j in range(1, 3) if q + t + j < len(s)]
        assert rb["blocks"][i] == want
    assert checked >= 4, f"only {checked} shifted blocks attached: the test proves little"
    assert sorted(zip(*(rb[k].tolist() for k in ("drow", "trow", "labels", "k")))) == sorted(rows)

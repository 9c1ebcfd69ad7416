"""Every drafter shipped under assets/drafters loads with the embedded target (the class from its config.json, every
weight present) and decodes losslessly with it in fp32, and a variant's head really corrects the backbone: guards
the shipped files themselves, which the tiny-model tests cannot."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.decode import DecodeConfig, Engine
from engine.paths import shipped_drafters
from helpers import embedded_or_skip

PROMPT = "Write a Python function that returns the sum of the squares of a list of numbers."
N_NEW = 40


@pytest.fixture(scope="module")
def target():
    """The embedded target loaded once, with no drafter, and its plain greedy decoding of PROMPT: the reference
    every drafter must reproduce (each test used to load the target again and decode this same reference)."""
    from engine.models.load import load_models

    embedded_or_skip()
    models = load_models(None, "none", "cpu", "float32")
    eng = Engine(models)
    ids = eng.encode_prompt(PROMPT)
    run = eng.run(ids, DecodeConfig(mode="ar", max_new_tokens=N_NEW, ignore_eos=True))
    run.finish()
    return models, ids, run.result["output_ids"]


@pytest.mark.parametrize("folder", shipped_drafters(), ids=lambda d: d.name)
def test_shipped_drafter_is_lossless_on_the_embedded_target(folder, target):
    from engine.models.load import load_drafter

    models, ids, want = target
    # what load_models does for a drafter, on the target already loaded (as the app's drafter menu does)
    drafter, name = load_drafter(str(folder), models.target, models.device, models.dtype, models.target_name)
    eng = Engine(replace(models, drafter=drafter, drafter_name=name))
    assert eng.encode_prompt(PROMPT) == ids and len(want) == N_NEW
    # reanchor: its baseline block is dflash's (the tiny-model tests run every mode); its shifted blocks are the
    # drafter's other calls
    for mode in ("reanchor",):
        run = eng.run(ids, DecodeConfig(mode=mode, max_new_tokens=N_NEW, ignore_eos=True))
        rounds = list(run)
        assert run.result["output_ids"] == want, (folder.name, mode)
        drafts = sum(r["accepted"] for r in rounds)
        assert drafts >= N_NEW // 4, f"{folder.name} {mode}: only {drafts} drafts accepted in {N_NEW} tokens"
        if getattr(eng.models.drafter, "head_modules", None):     # Domino, DSpark: a sequential head
            assert any(r.get("backbone") for r in rounds), f"{folder.name}: the head never changed a token"


@pytest.mark.parametrize("folder", [d for d in shipped_drafters() if "dflash" not in d.name and "opd" not in d.name],
                         ids=lambda d: d.name)
def test_shipped_variant_config_is_what_saving_it_writes(folder, tmp_path):
    """A shipped head's config.json is in the released checkpoints' form, as our save writes it (for example Domino's
    emb_dim at the top level, where SGLang's loader reads it): load it, save it, compare."""
    import json

    from transformers import AutoConfig

    from engine.models.load import drafter_class

    config = AutoConfig.from_pretrained(folder)
    cls = drafter_class(config)
    cls.from_pretrained(folder).save_pretrained(tmp_path)
    shipped = json.loads((folder / "config.json").read_text())
    saved = json.loads((tmp_path / "config.json").read_text())
    saved.pop("transformers_version", None), shipped.pop("transformers_version", None)
    assert saved == shipped

"""The app's Drafter menu: one target shared by every drafter (an Engine per drafter, loaded on first use), and
the round figure's hover naming the backbone's own token where a sequential head (Domino, DSpark) changed it."""
from __future__ import annotations

import argparse

import pytest

from app import loader as L
from app import plots
from engine.decode import DecodeConfig, Engine
from engine.errors import InputError
from tiny import tiny_models, tiny_variant_models


def test_loader_shares_one_target_across_drafters(tmp_path, monkeypatch):
    base, head = tiny_models("qwen3", 0), tiny_variant_models("dspark", 0)
    base.drafter.save_pretrained(tmp_path / "dflash")
    head.drafter.save_pretrained(tmp_path / "smollm2-135m-dspark-b8")
    monkeypatch.setattr(L, "shipped_drafters", lambda: [tmp_path / "smollm2-135m-dspark-b8"])
    args = argparse.Namespace(target=None, drafter=str(tmp_path / "dflash"), device="cpu", dtype="float32",
                              draft_dtype="auto", trust_remote_code=False)
    ld = L.ModelLoader(args)
    assert list(ld.drafter_choices()) == [str(tmp_path / "dflash"), "smollm2-135m-dspark-b8"]
    ld.engine = Engine(base)  # as _load leaves it (the embedded target is too slow for a test)
    ld.engines[ld.default_drafter()] = ld.engine
    assert ld.engine_for(None) is ld.engine
    other = ld.engine_for("smollm2-135m-dspark-b8")
    assert type(other.models.drafter).__name__ == "DSparkDraftModel"
    assert other.models.target is base.target and ld.engine_for("smollm2-135m-dspark-b8") is other  # shared, once
    with pytest.raises(InputError, match="unknown drafter"):
        ld.engine_for("nope")
    args.target = "some/folder"  # drafters shipped for the embedded target are not offered for another target
    assert list(ld.drafter_choices()) == [str(tmp_path / "dflash")]


def test_round_figure_hover_shows_the_backbone_token():
    m = tiny_variant_models("domino", 0)
    eng = Engine(m, draft_head_dtype=None)
    trace = eng.generate("ab c", DecodeConfig(mode="reanchor", max_new_tokens=16, ignore_eos=True))
    rec = next(r for r in trace["rounds"] if r["backbone"])
    fig = plots.round_figure(rec, trace["token_texts"])
    heat = next(d for d in fig.data if d.type == "heatmap")
    notes = [c for row in heat.customdata for c in row if "backbone drafted" in c]
    assert len(notes) == sum(1 for b in rec["backbone"] if b["d"] == 0 or any(
        s["d"] == b["d"] for s in rec["shifted"]))
    plain = dict(rec)
    plain.pop("backbone")
    heat = next(d for d in plots.round_figure(plain, trace["token_texts"]).data if d.type == "heatmap")
    assert not any("backbone" in c for row in heat.customdata for c in row)

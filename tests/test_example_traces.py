"""The shipped example traces (assets/traces) reproduce from their recorded settings on today's engine: the same
target, drafter, mode, rule and length give the same text, the same drafts and the same acceptance, round by
round, and the file's stats say what its rounds say. Runs the embedded SmolLM2 target on the CPU (about a
minute a trace on this machine); skips where the embedded target is not installed."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.trace import run_stats
from helpers import embedded_or_skip

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "assets" / "traces").glob("*.json"))
KEYS = ("anchor_pos", "anchor", "baseline", "shifted", "accepted_nodes", "accepted", "bonus", "new_tokens")


@pytest.fixture(scope="module")
def engines():
    from engine.decode import Engine
    from engine.models import load_models

    cache = {}

    def get(target: str, drafter: str):
        if (target, drafter) not in cache:
            embedded_or_skip()   # the one reason to skip: any other failure to load is the test's to report
            cache[(target, drafter)] = Engine(load_models(target, str(REPO / drafter), device="cpu", dtype="float32"))
        return cache[(target, drafter)]
    return get


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_trace_reproduces_from_its_recorded_settings(path, engines):
    from engine.decode import DecodeConfig

    trace = json.loads(path.read_text())
    cfg = trace["config"]
    assert trace["stats"]["tau"] == pytest.approx(run_stats(trace["rounds"])["tau"])  # (c): 2.58 vs the page's 2.55
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    run = engines(cfg["target"], cfg["drafter"]).run(trace["prompt_ids"],
                                                     DecodeConfig(**{k: v for k, v in cfg.items() if k in fields}))
    run.finish()
    again = run.trace()
    assert again["output_ids"] == trace["output_ids"]
    assert len(again["rounds"]) == len(trace["rounds"])
    for i, (a, b) in enumerate(zip(again["rounds"], trace["rounds"])):
        assert {k: a[k] for k in KEYS} == {k: b[k] for k in KEYS}, f"round {i} differs"

"""One bound on the work a single request may cause (engine.options.MAX_TRIE_NODES, MAX_BLOCK_SIZE,
MAX_SHIFTED): refused above it naming the field in the CLI, the bench, the API's parser and the app's
controls; a chain trie of "all" nodes cut at it; Stop effective inside a model call; the app's per-run time
limit. Real tiny models throughout."""
from __future__ import annotations

import pytest
import torch

from engine.decode import DecodeConfig, Engine
from engine.decode.config import validate
from engine.errors import InputError
from engine.options import (MAX_BLOCK_SIZE, MAX_SHIFTED, MAX_TRIE_NODES, parse_max_shifted,
                            parse_max_trie_nodes)
from tiny import scripted_models, tiny_models


def test_caps_are_refused_naming_the_field():
    with pytest.raises(InputError, match=f"^max_trie_nodes: must be at most {MAX_TRIE_NODES}, got 1000000"):
        parse_max_trie_nodes("1000000")
    with pytest.raises(InputError, match=f"^max_trie_nodes: must be at most {MAX_TRIE_NODES}"):
        parse_max_trie_nodes(2**31 - 1)
    with pytest.raises(InputError, match=f"^max_shifted: must be at most {MAX_SHIFTED}"):
        parse_max_shifted(str(MAX_SHIFTED + 1))
    assert parse_max_trie_nodes(str(MAX_TRIE_NODES)) == MAX_TRIE_NODES
    assert parse_max_shifted(MAX_SHIFTED) == MAX_SHIFTED
    with pytest.raises(InputError, match=f"^block_size: must be at most {MAX_BLOCK_SIZE}"):
        validate(DecodeConfig(block_size=MAX_BLOCK_SIZE + 1), 16)
    with pytest.raises(InputError, match=f"^drafter: its block size {2 * MAX_BLOCK_SIZE} is over the bound"):
        validate(DecodeConfig(), 2 * MAX_BLOCK_SIZE)
    assert validate(DecodeConfig(block_size=MAX_BLOCK_SIZE), 16).block_size == MAX_BLOCK_SIZE


@pytest.mark.parametrize("argv, field", [
    (["generate", "--prompt", "ab", "--mode", "ddtree", "--max-trie-nodes", "1000000"], "max_trie_nodes"),
    (["generate", "--prompt", "ab", "--max-shifted", "999"], "max_shifted"),
    (["generate", "--prompt", "ab", "--block-size", "4096"], "block_size"),
    (["bench", "--sets", "math", "--n", "1", "--max-trie-nodes", "8192"], "max_trie_nodes"),
    (["bench", "--sets", "math", "--n", "1", "--modes", "ddtree", "--tree-nodes", "32,8192"], "tree_nodes"),
    (["bench", "--sets", "math", "--n", "1", "--block-size", "64"], "block_size"),
])
def test_cli_and_bench_refuse_above_the_cap_before_loading(argv, field, capsys, tmp_path, monkeypatch):
    """One line, exit 2, naming the field, before any model loads (a missing target would say otherwise)."""
    from engine.__main__ import main

    monkeypatch.chdir(tmp_path)
    rc = main([*argv, "--target", str(tmp_path / "no-such-target")] + (["--out", str(tmp_path / "o")]
                                                                       if argv[0] == "bench" else []))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {field}: "), (rc, err)
    assert "at most" in err[0]


def test_app_controls_refuse_above_the_cap():
    """The API and the menus (typed values) go through parse_inputs: the message names the control."""
    gr = pytest.importorskip("gradio")
    from app.runs import parse_inputs

    with pytest.raises(gr.Error, match=f"Trie nodes: must be at most {MAX_TRIE_NODES}, got 8192"):
        parse_inputs("hi", "ddtree", "earliest", 0, 0, 8, "all", "8192")
    with pytest.raises(gr.Error, match=f"Shifted blocks: must be at most {MAX_SHIFTED}"):
        parse_inputs("hi", "reanchor", "earliest", 0, 0, 8, "100", "all")
    assert parse_inputs("hi", "ddtree", "earliest", 0, 0, 8, "all", str(MAX_TRIE_NODES)).max_trie_nodes == MAX_TRIE_NODES


def test_all_nodes_is_cut_at_the_bound_and_stays_lossless(monkeypatch):
    """A chain trie of "all" nodes is cut at MAX_TRIE_NODES (here lowered, so that the scripted drafter's
    tries exceed it); the output is still the target's own."""
    import engine.decode.round as round_mod

    eng = Engine(scripted_models()[0])
    ids = eng.encode_prompt("ab")
    ar = eng.run(ids, DecodeConfig(mode="ar", max_new_tokens=40)).finish()["output_ids"]
    full = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=40))
    full.finish()
    cap = 12
    assert max(len(r["trie"]["tokens"]) for r in full.rounds) > cap  # else this test shows nothing
    monkeypatch.setattr(round_mod, "MAX_TRIE_NODES", cap)
    cut = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=40))
    assert cut.finish()["output_ids"] == ar
    assert max(len(r["trie"]["tokens"]) for r in cut.rounds) <= cap


def _layers(model) -> list[torch.nn.Module]:
    return [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) for m in lst]


@pytest.mark.parametrize("during", ["verify", "prefill"])
def test_stop_takes_effect_inside_a_model_call(during):
    """Stop pressed while the target runs (here: from its first layer, in round 2's verify or the prefill)
    ends the run before the next layer; the round under way is dropped; the engine serves the next run
    exactly (tests of a round boundary alone let a minutes-long round run on)."""
    eng = Engine(tiny_models("llama", 0))
    ids = eng.encode_prompt("ab ab")
    expected = eng.run(ids, DecodeConfig(mode="ar", max_new_tokens=24)).finish()["output_ids"]
    run = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=24, ignore_eos=True))
    layers = _layers(eng.models.target)
    calls = {"target": 0, "after_stop": 0}
    stop_at = 1 if during == "prefill" else 4  # the prefill is call 1; rounds 0, 1, 2 verify in calls 2, 3, 4

    def first(module, args):
        calls["target"] += 1
        if calls["target"] == stop_at:
            run.stop()

    def later(module, args):
        if run._stop.is_set():
            calls["after_stop"] += 1

    hooks = [layers[0].register_forward_pre_hook(first)] + [m.register_forward_pre_hook(later) for m in layers[1:]]
    try:
        records = list(run)
    finally:
        for h in hooks:
            h.remove()
    assert calls["after_stop"] == 0
    assert len(records) == (0 if during == "prefill" else 2) and run.result["stopped"]
    if during == "prefill":
        with pytest.raises(InputError, match="^run: stopped during the prefill"):
            run.trace()
    else:
        assert run.trace()["stats"]["rounds"] == len(records)
    again = eng.run(ids, DecodeConfig(mode="reanchor", max_new_tokens=24)).finish()["output_ids"]
    assert again == expected


def test_the_stop_check_wraps_each_layer_keeping_its_own_forward_even_in_a_copy():
    """The stop check wraps a layer's forward, with no forward hook (a hook sent each layer call down
    nn.Module's slow path: 0.7% of a tiny model's round). A forward set on the instance (accelerate's device
    hooks set one) still runs, and a deep copy (engine.models.load casts models so) runs its own layers."""
    import copy
    import threading
    import types

    from engine.decode.interrupt import Interrupted, make_interruptible, unchecked, watching

    calls = []
    own = torch.nn.Linear(2, 2)
    own.forward = types.MethodType(lambda self, x: calls.append(self) or x, own)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([own, torch.nn.Linear(2, 2)])
    make_interruptible(model)
    assert not any(m._forward_pre_hooks for m in model.modules())
    twin = copy.deepcopy(model)
    x = torch.ones(1, 2)
    assert torch.equal(twin.layers[0](x), x) and calls == [twin.layers[0]]
    with torch.no_grad():
        twin.layers[1].weight.zero_()
        twin.layers[1].bias.zero_()
    assert torch.equal(twin.layers[1](x), torch.zeros(1, 2))
    assert not torch.equal(model.layers[1](x), torch.zeros(1, 2))
    stop = threading.Event()
    stop.set()
    for m in (model, twin):
        with watching(stop), pytest.raises(Interrupted):
            m.layers[0](x)
    with unchecked(twin), watching(stop):   # the bench's bare models: no check, the instance's forward still runs
        assert torch.equal(twin.layers[0](x), x) and calls[-1] is twin.layers[0]
        twin.layers[1](x)
    with watching(stop), pytest.raises(Interrupted):
        twin.layers[1](x)


def test_app_run_stops_at_the_time_limit(monkeypatch):
    """A run of the page stops once it has run session.RUN_SECONDS (so that one user cannot hold the queue),
    and says so."""
    pytest.importorskip("gradio")
    from app import runs, session

    eng = Engine(scripted_models()[0])
    monkeypatch.setattr(session, "RUN_SECONDS", 0.0)
    run, ids = runs.start_run(eng, runs.Settings("ab", "reanchor", "earliest", 0.0, 0, 400, None, None))
    got = list(runs.stream_run(eng, run, ids, {"mode": "reanchor"}))
    assert run.result["stopped"] and len(run.output_ids) < 400
    assert len(got) <= 1
    assert runs.end_status(run) == f"stopped at the time limit ({session.RUN_SECONDS:g} s a run)"


@pytest.mark.parametrize("argv, field", [(["--session-idle", "nan"], "session-idle"),
                                         (["--session-idle", "inf"], "session-idle"),
                                         (["--queue-size", "0"], "queue-size"), (["--queue-size", "-5"], "queue-size"),
                                         (["--run-seconds", "0"], "run-seconds"),
                                         (["--run-seconds", "nan"], "run-seconds"),
                                         (["--calibration-seconds", "0"], "calibration-seconds")])
def test_app_flags_out_of_range_are_refused(argv, field, capsys):
    """nan compared false with every bound and silently disabled idle freeing; a queue of 0 or -5 was taken."""
    pytest.importorskip("gradio")
    from app.__main__ import main

    assert main(["--no-model", "--host", "256.0.0.1", *argv]) == 2  # unfixed: "host: ...", not a server
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: "), err


def test_a_bad_target_is_one_line_without_a_traceback(capfd):
    """--target /etc: the status line and the log name the target; no traceback in the log."""
    pytest.importorskip("gradio")
    from app.__main__ import parse_args
    from app.loader import ModelLoader

    loader = ModelLoader(parse_args(["--target", "/etc"])).start()
    loader.wait(120)
    assert loader.status().startswith("model loading failed: target: "), loader.status()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "error: target: " in err, err[-2000:]

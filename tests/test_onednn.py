"""oneDNN linears (engine/models/onednn.py): inside `linears()` a large fp32 CPU Linear multiplies through oneDNN,
within fp32 rounding of F.linear; elsewhere, where gradients are wanted, or after a failed check, the module's own
forward runs; and an Engine whose every linear goes through oneDNN still decodes the target's greedy output."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from engine.decode import DecodeConfig, Engine
from engine.models import onednn
from engine.models.onednn import linears
from engine.decode.checks import greedy_reference
from tiny import tiny_models

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN")
ONEDNN_OP = "mkldnn::_linear_pointwise"


def big(out: int = 512, inp: int = 256, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(inp, out)


def ops(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    return {e.name for e in p.events()}


def test_only_large_fp32_cpu_linears_without_hooks_are_routed():
    a, small, half, hooked = big(), torch.nn.Linear(16, 16), big().bfloat16(), big()
    hooked.register_forward_hook(lambda *args: None)
    models = torch.nn.ModuleList([a, small, half, hooked])
    assert onednn.install(models) == 1
    assert "_onednn" in a.__dict__ and not any("_onednn" in m.__dict__ for m in (small, half, hooked))
    assert onednn.install(models) == 0          # once per module
    onednn.uninstall(models)
    assert "_onednn" not in a.__dict__ and "forward" not in a.__dict__


def test_inside_linears_the_product_is_onednns_and_within_rounding_of_f_linear():
    m = big()
    onednn.install(m)
    x = torch.randn(1, 7, 256)
    with torch.no_grad():
        own = torch.nn.functional.linear(x, m.weight, m.bias)
        with linears():
            assert ONEDNN_OP in ops(lambda: m(x))
            y = m(x)
        assert m.__dict__["_onednn"] is True
        assert torch.equal(y, torch.ops.mkldnn._linear_pointwise(x, m.weight, m.bias, "none", [], ""))
        assert torch.allclose(y, own, rtol=1e-5, atol=1e-5)
        # outside the block: the module's own forward, bit for bit
        assert ONEDNN_OP not in ops(lambda: m(x))
        assert torch.equal(m(x), own)


def test_where_gradients_are_wanted_the_module_computes():
    m = big()
    onednn.install(m)
    x = torch.randn(3, 256)
    ref = big()
    ref.load_state_dict(m.state_dict())
    with linears():
        assert ONEDNN_OP not in ops(lambda: m(x))
        y = m(x)
    y.square().sum().backward()
    ref(x).square().sum().backward()
    assert torch.equal(m.weight.grad, ref.weight.grad)


def test_a_module_whose_product_disagrees_keeps_its_own_forward():
    m = big()
    onednn.install(m)
    x = torch.randn(2, 256)
    with torch.no_grad():
        y = torch.ops.mkldnn._linear_pointwise(x, m.weight, m.bias, "none", [], "")
        assert onednn._check(m, x, y) is True
        assert onednn._check(m, x, y + 1e-2 * y.abs().amax()) is False      # off by 1 % of the output's scale
        with linears():
            assert ONEDNN_OP not in ops(lambda: m(x))
            assert torch.equal(m(x), torch.nn.functional.linear(x, m.weight, m.bias))


def test_a_weight_changed_in_place_is_read_as_it_is_now():
    """No copy of the weight is kept: an optimiser step or a load is seen at the next call."""
    m = big()
    onednn.install(m)
    x = torch.randn(4, 256)
    with torch.no_grad(), linears():
        m(x)
        m.weight.mul_(-2.0)
        assert torch.allclose(m(x), torch.nn.functional.linear(x, m.weight, m.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_an_engine_through_onednn_decodes_the_targets_greedy_output(kind, monkeypatch):
    """Every linear of the tiny models routed (the threshold lowered for them: a tiny model's weights are below it),
    the fp32 draft head too; each mode's tokens are HF's own greedy decoding (the module's own kernels)."""
    monkeypatch.setattr(onednn, "MIN_WEIGHT", 1)
    for seed, prompt in enumerate(["ab", "c a b", "bbb aa", "cab cab"]):
        models = tiny_models(kind, seed, block_size=4 + seed % 3)
        eng = Engine(models, draft_head_dtype=None)
        routed = [m for mod in (models.target, models.drafter) for m in mod.modules() if "_onednn" in m.__dict__]
        assert len(routed) == sum(isinstance(m, torch.nn.Linear) for mod in (models.target, models.drafter)
                                  for m in mod.modules())
        assert eng.draft_head is models.target.lm_head      # the fp32 head is called as the routed module
        ids = eng.encode_prompt(prompt)
        ref = greedy_reference(models.target, ids, 20)
        for mode in ("ar", "dflash", "reanchor", "ddtree", "reanchor-tree"):
            nodes = 12 if "tree" in mode else None
            run = eng.run(ids, DecodeConfig(mode=mode, max_new_tokens=20, ignore_eos=True, max_trie_nodes=nodes))
            assert run.finish()["output_ids"] == ref, (kind, seed, mode)
        assert all(m.__dict__["_onednn"] is True for m in routed)     # each one ran oneDNN and passed its check


def test_the_reference_loop_rounds_as_the_engine_does(monkeypatch):
    """The bench runs the authors' dflash_generate inside `linears()`: on routed models it multiplies through
    oneDNN too, and the engine's dflash (fp32 drafts) reproduces it token for token and round by round."""
    import time
    from dataclasses import replace

    import dflash.model

    from engine.bench.reference import reference_run
    monkeypatch.setattr(onednn, "MIN_WEIGHT", 1)
    monkeypatch.setattr(dflash.model, "_cuda_time", time.perf_counter)
    eng = Engine(replace(tiny_models("qwen3", 2), draft_dtype="float32"))
    ids = eng.encode_prompt("ab c ba")
    seen = ops(lambda: reference_run("dflash", eng.models, ids, 24))
    assert ONEDNN_OP in seen
    ref = reference_run("dflash", eng.models, ids, 24)
    run = eng.run(ids, DecodeConfig(mode="dflash", max_new_tokens=24, ignore_eos=True))
    rounds = list(run)
    assert run.result["output_ids"] == ref["output_ids"]
    assert [r["accepted"] for r in rounds] == ref["accepted"]

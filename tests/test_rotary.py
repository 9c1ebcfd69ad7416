"""Rotary tables (engine/models/rotary.py): inside `tabled`, a static rotary module's cos and sin are looked up, and
they are exactly what the module computes; everywhere else, and for modules whose RoPE changes with the length,
the module's own forward runs."""
import copy

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from engine.models import rotary
from engine.models.rotary import tabled, untabled
from tiny import tiny_models

ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0},
}


def rope(kind: str) -> LlamaRotaryEmbedding:
    rp = ROPES.get(kind, {"rope_type": kind, "factor": 2.0, "rope_theta": 10000.0})
    return LlamaRotaryEmbedding(LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=4096,
                                            rope_parameters=rp))


def own(m, x, pos):
    return type(m).forward(m, x, pos)


@pytest.mark.parametrize("kind", sorted(ROPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_lookup_is_what_the_module_computes(kind, dtype):
    m = rope(kind)
    rotary.install(m)
    gen = torch.Generator().manual_seed(1)
    x = torch.zeros(1, 1, 64, dtype=dtype)
    for pos in (torch.arange(37, 53)[None],                                   # a chain's block
                torch.randint(0, 300, (1, 40), generator=gen),                 # a tree's depths, unordered
                torch.randint(0, 300, (2, 9), generator=gen)):                 # a batched drafter call
        with tabled(int(pos.max()) + 1):
            cos, sin = m(x, pos)
        ref = own(m, x, pos)
        assert cos.dtype == sin.dtype == dtype and cos.shape == ref[0].shape
        assert torch.equal(cos, ref[0]) and torch.equal(sin, ref[1]), kind
    assert m._rotary_table[1].shape[0] >= 300       # the table was used, and grew to what was asked


def test_outside_tabled_the_module_computes():
    m = rope("default")
    rotary.install(m)
    pos = torch.arange(5)[None]
    cos, _ = m(torch.zeros(1, 1, 64), pos)
    assert m._rotary_table is None                  # no table was built, none read
    assert torch.equal(cos, own(m, torch.zeros(1, 1, 64), pos)[0])


def test_lengths_dependent_ropes_keep_their_forward():
    m = rope("dynamic")
    rotary.install(m)
    assert "_rotary_table" not in m.__dict__ and "forward" not in m.__dict__


def test_a_module_whose_lookup_would_differ_keeps_its_forward():
    """A rotary module whose angle at p depends on the rest of the call (here: on the call's length) would be
    wrong from a table: the first build finds that and leaves the module computing."""
    class LengthRotaryEmbedding(LlamaRotaryEmbedding):
        def forward(self, x, position_ids):
            cos, sin = super().forward(x, position_ids)
            return cos * position_ids.shape[-1], sin

    m = LengthRotaryEmbedding(rope("default").config)
    rotary.install(m)
    pos = torch.tensor([[3, 4, 9]])
    with tabled(10):
        cos, _ = m(torch.zeros(1, 1, 64), pos)
    assert m._rotary_table is False
    assert torch.equal(cos, own(m, torch.zeros(1, 1, 64), pos)[0])


def test_a_moved_or_copied_module_uses_its_own_table():
    m = rope("linear")
    rotary.install(m)
    with tabled(20):
        m(torch.zeros(1, 1, 64), torch.arange(20)[None])
    c = copy.deepcopy(m)
    c.inv_freq = c.inv_freq * 2            # another model's frequencies: its table must follow them
    pos = torch.arange(4, 20)[None]
    with tabled(20):
        cos, _ = c(torch.zeros(1, 1, 64), pos)
    assert torch.equal(cos, own(c, torch.zeros(1, 1, 64), pos)[0])
    assert not torch.equal(cos, own(m, torch.zeros(1, 1, 64), pos)[0])


def test_engine_models_get_tables_and_the_reference_bare_ones():
    from engine.decode import DecodeConfig, Engine
    for kind in ("llama", "qwen3"):
        models = tiny_models(kind, 1)
        eng = Engine(models)
        mods = [m for model in (models.target, models.drafter) for m in model.modules()
                if "_rotary_table" in m.__dict__]
        assert len(mods) == 2, kind                 # the target's and the drafter's
        eng.generate("ab c", DecodeConfig(mode="reanchor", max_new_tokens=12, ignore_eos=True))
        assert all(m._rotary_table for m in mods), kind    # both were looked up in the run
        with untabled(models.target, models.drafter):
            assert all("forward" not in m.__dict__ for m in mods)
        assert all("forward" in m.__dict__ for m in mods)

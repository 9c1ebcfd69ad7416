"""The drafter's context features (engine/models/features.py): decoding (Engine.target_forward) and training
(train.recipe.target_states) read the same thing, Hugging Face's hidden_states[l + 1], for every layer a drafter's
config may name (train/flags.py allows 0 .. n_layers - 1; the last one is after the final norm there)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.decode import Engine
from engine.train.recipe import target_states
from tiny import tiny_models


@pytest.mark.parametrize("kind", ["llama", "qwen3", "mistral"])
def test_decoding_and_training_read_the_same_features(kind):
    models = tiny_models(kind)
    target = models.target
    ids = torch.tensor([[4, 5, 6, 7, 4, 6, 5]])
    with torch.no_grad():
        reference = target(input_ids=ids, output_hidden_states=True).hidden_states
    n = target.config.num_hidden_layers
    for l in range(n):
        train_feats, _ = target_states(target, [l], input_ids=ids)
        assert torch.equal(train_feats, reference[l + 1]), f"training, layer {l} of {n}"
    for layer_ids in ([0], [n - 1], [1, n - 1], list(range(n))):   # several layers concatenate in order
        eng = Engine(replace(models, drafter=None))
        eng.layer_ids = layer_ids
        with torch.no_grad():
            _, feats = eng.target_forward(ids, torch.arange(ids.shape[1])[None], None, eng.new_cache())
        train_feats, _ = target_states(target, layer_ids, input_ids=ids)
        assert torch.equal(feats, torch.cat([reference[l + 1] for l in layer_ids], -1)), f"decoding, {layer_ids}"
        assert torch.equal(train_feats, feats), f"training against decoding, {layer_ids}"

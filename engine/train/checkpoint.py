"""A drafter's folder: its weights read back (over shards), the lineage of folders it was trained from, and the
export (a bf16 save_pretrained folder, its model card and train_log.json) that a killed run still leaves whole."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import torch

from ..errors import InputError


@torch.no_grad()
def folder_state(folder: Path) -> dict[str, torch.Tensor]:
    """Every weight of a drafter folder, over its shards (model.safetensors or model-0000i-of-0000n.safetensors)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(folder.glob("model*.safetensors")):
        state.update(load_file(f))
    return state


def load_weights(drafter, folder: Path) -> list[int]:
    """Start from a trained drafter (`--init-from`): same target layers and hidden size; the block size may differ
    (no weight depends on it). A drafter with more layers grows: the folder's layers come first and each new one on
    top starts as the identity (o_proj and down_proj zero), so the grown drafter drafts exactly as the folder's
    did. Returns the new layers' indices."""
    state = folder_state(folder)
    if not state:
        raise InputError("init_from", f"{folder} holds no model*.safetensors")
    own = drafter.state_dict()
    n_old = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    new = list(range(n_old, len(drafter.layers)))
    is_new = lambda k: k.startswith("layers.") and int(k.split(".")[1]) >= n_old
    bad = sorted(k for k in own if not is_new(k) and (k not in state or state[k].shape != own[k].shape))
    bad += sorted(set(state) - set(own))
    if bad:
        raise InputError("init_from", f"{folder} does not fit a drafter of these settings "
                         f"(--layers/--target-layers; first mismatch: {bad[0]})")
    drafter.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    with torch.no_grad():
        for j in new:
            drafter.layers[j].self_attn.o_proj.weight.zero_()
            drafter.layers[j].mlp.down_proj.weight.zero_()
    return new


def lineage_of(folder: Path) -> list[dict]:
    """The runs a drafter folder's weights come from (its train_log.json): theirs, then its own."""
    prior = folder / "train_log.json"
    if not prior.exists():
        return []
    pl = json.loads(prior.read_text())
    return pl.get("lineage", []) + [{
        "hardware": pl.get("hardware"), "steps": pl.get("steps"), "train_s": pl.get("train_s"),
        "response_tokens": (pl.get("data") or {}).get("response_tokens"),
        "tau_sim": (pl.get("evals") or [{}])[-1].get("tau_sim")}]


def export(drafter, out: Path, card: str, log_obj: dict, max_shard: int) -> None:
    """bf16 save_pretrained folder + README.md + train_log.json; each file replaced atomically."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".export-tmp"
    if tmp.exists():
        for f in tmp.iterdir():
            f.unlink()
    m = copy.deepcopy(drafter).to(torch.bfloat16)
    m.save_pretrained(tmp, max_shard_size=max_shard)
    (tmp / "README.md").write_text(card)
    (tmp / "train_log.json").write_text(json.dumps(log_obj, indent=1))
    new = {f.name for f in tmp.iterdir()}
    for f in out.glob("model*.safetensors*"):  # a differently sharded older export
        if f.name not in new:
            f.unlink()
    for f in sorted(tmp.iterdir(), key=lambda f: f.name == "config.json"):  # config last: weights land first
        os.replace(f, out / f.name)
    tmp.rmdir()


def model_card(info: dict) -> str:
    ev = info.get("eval") or {}
    rows = "\n".join(f"| {k} | {v} |" for k, v in info["table"].items())
    return f"""# {info['name']}

A DFlash block-diffusion drafter (`dflash.DFlashDraftModel`, {info['layers']} Qwen3-style layers, block size
{info['block_size']}, mask token id {info['mask_id']}, target layers {info['target_layer_ids']}) for
SmolLM2-135M-Instruct (the embedded target of ReAnchor Explorer). It has no embedding table or LM head of its
own: it uses the target's, frozen. Trained by `engine/train/main.py` (the public DFlash recipe, see
docs/training.md in the ReAnchor Explorer repository) on the target's own responses to prompts from `engine/train/prompts.py` (our own set; no
benchmark items).

| | |
|---|---|
{rows}

**tau_sim = {ev.get('tau_sim', 'n/a')}** (block {info['block_size']}, greedy, {ev.get('prompts', 0)} held-out prompts):
greedy DFlash replayed teacher-forced on the target's own greedy responses, a proxy for the engine's real
greedy DFlash tau (equal up to numerics). Share of anchors whose drafts are accepted to depth k = 1..{info['block_size'] - 1}:
{ev.get('accept_rate_by_depth', [])}.

Load: `dflash.DFlashDraftModel.from_pretrained(folder)`; the engine: `load_models(drafter=folder)`.
"""

"""Training data for the drafter: the target's own responses to our prompts (prompts.py), batched with
left padding, greedy and sampled, saved as resumable token-id JSONL shards."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch

from ..models import chat_ids, stop_token_ids


def log(msg: str) -> None:
    print(f"[train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@torch.no_grad()
def generate_batch(target, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                   pad_id: int, stops: list[int], seed: int) -> list[list[int]]:
    """Responses (stop token included when reached) for a left-padded batch of prompt ids."""
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        att[i, T - len(p):] = 1
    torch.manual_seed(seed)
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    out = target.generate(input_ids=ids.to(target.device), attention_mask=att.to(target.device),
                          max_new_tokens=max_new_tokens, eos_token_id=stops, pad_token_id=pad_id, **sampling)
    responses = []
    for row in out[:, T:].tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))
        responses.append(row[:cut])
    return responses


def generate_shards(target, tok, prompts: list[str], data_dir: Path, tag: str, *, shard_size: int,
                    batch_size: int, max_new_tokens: int, sample_frac: float, temperature: float,
                    seed: int, deadline: float) -> None:
    """Write {tag}-NNNNN.jsonl shards of `shard_size` prompts each; existing shards are kept (resume)."""
    stops = stop_token_ids(tok, target.config)
    eos = target.config.eos_token_id
    pad_id = eos if isinstance(eos, int) else stops[0]  # left padding: any id, masked out
    n_shards = math.ceil(len(prompts) / shard_size)
    for k in range(n_shards):  # a shard made for other prompts (another seed or mix) is set aside, not mixed in
        path = data_dir / f"{tag}-{k:05d}.jsonl"
        if path.exists() and [json.loads(x)["prompt"] for x in path.read_text().splitlines() if x.strip()] \
                != prompts[k * shard_size:(k + 1) * shard_size]:
            log(f"{path.name} answers other prompts (another seed, families or prompt count): kept as "
                f"{path.name}.stale, making it again")
            os.replace(path, path.with_name(path.name + ".stale"))
    todo = [k for k in range(n_shards) if not (data_dir / f"{tag}-{k:05d}.jsonl").exists()]
    if not todo:
        return
    log(f"gen {tag}: {len(todo)}/{n_shards} shards to go ({len(prompts)} prompts, {max_new_tokens} new tokens, "
        f"batch {batch_size}, {sample_frac:.0%} sampled at T={temperature})")
    t0, done_tokens = time.time(), 0
    for k in todo:
        if time.time() > deadline:
            log(f"gen {tag}: time budget reached, continuing with {k} of {n_shards} shards")
            break
        idx = list(range(k * shard_size, min(len(prompts), (k + 1) * shard_size)))
        # A whole shard is greedy or sampled (so every generate call is a full batch); shard k is sampled when
        # floor((k+1)f) > floor(kf): exactly a share f of the shards, evenly spread (f=0.5: every other one).
        temp = temperature if math.floor((k + 1) * sample_frac) > math.floor(k * sample_frac) else 0.0
        pids = {i: chat_ids(tok, prompts[i]) for i in idx}
        group = sorted(idx, key=lambda i: len(pids[i]))  # similar lengths together: less left padding
        recs = []
        for s in range(0, len(group), batch_size):
            part = group[s:s + batch_size]
            resp = generate_batch(target, [pids[i] for i in part], max_new_tokens=max_new_tokens,
                                  temperature=temp, pad_id=pad_id, stops=stops, seed=seed + k * 7919 + s)
            for i, rids in zip(part, resp):
                recs.append({"i": i, "prompt": prompts[i], "prompt_ids": pids[i], "response_ids": rids,
                             "temperature": temp})
                done_tokens += len(rids)
        recs.sort(key=lambda x: x["i"])
        tmp = data_dir / f".{tag}-{k:05d}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(x) + "\n" for x in recs))
        os.replace(tmp, data_dir / f"{tag}-{k:05d}.jsonl")
        dt = time.time() - t0
        log(f"gen {tag}: shard {k + 1}/{n_shards} done, {done_tokens} tokens in {dt:.0f}s "
            f"({done_tokens / max(dt, 1e-9):.0f} tok/s)")


def load_shards(data_dir: Path, tag: str) -> list[dict]:
    recs = []
    for path in sorted(data_dir.glob(f"{tag}-*.jsonl")):
        recs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return recs

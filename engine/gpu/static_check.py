"""The static path on a GPU, in one device call (issue 57; docs/performance.md, "On a GPU"). Prints and writes one JSON:

1. `embedded`: per mode (ar, dflash, ddtree, reanchor, reanchor-tree and their -auto), on the embedded target, with
   the eager Engine and with StaticEngine (capture on CUDA): ms per round by stage, tokens/s, x over ar (the same
   engine's), the tokens equal to the eager ar's; the auto budget's profile of each engine and what it picked;
2. `user_scale`: a random-weight target of Qwen3-8B's shape in bf16 with a random DFlash drafter of the published
   z-lab/Qwen3-8B-DFlash-b16's shape (5 layers, block 16, target layers 1, 9, 17, 25, 33): ms per round of the
   engine, eager and captured, against dflash_generate (and DDTree's ddtree_generate when $DDTREE names a checkout
   or it is importable) on the same models, through engine/bench/reference.py's reference runs.

    python engine/gpu/static_check.py --out $OUT/static_check.json        (the device: about 5 minutes)
    python engine/gpu/static_check.py --rehearse --out /tmp/static.json   (the CPU: tiny shapes, no capture, ~1 min)

--rehearse runs every step at tiny sizes (tests/tiny.py's models, a 6-layer stand-in for the 8 B shapes) so that a
loan is never spent on a typo (tests/test_static_check.py runs it). The JSON is rewritten after each part and the
parts stop at --budget-s, leaving what they measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from engine.decode import DecodeConfig, Engine  # noqa: E402
from engine.decode.cost import budget_for, engine_profile  # noqa: E402
from engine.decode.static import StaticEngine  # noqa: E402
from engine.options import DEFAULT_MAX_NEW_TOKENS, auto_label  # noqa: E402

LABELS = ("ar", "dflash", "ddtree", "reanchor", "reanchor-tree",
          "dflash-auto", "ddtree-auto", "reanchor-auto", "reanchor-tree-auto")
PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
           "A train travels 60 km in 45 minutes. What is its average speed in km/h? Explain.",
           "Give me three tips for writing a clear email to a busy colleague.",
           "Write a Python class for a stack with push, pop and peek."]
# z-lab/Qwen3-8B-DFlash-b16 on Qwen3-8B: its config.json (block 16, five layers reading target layers 1, 9, 17, 25, 33)
QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
DRAFTER_8B = dict(num_layers=5, block_size=16, target_layer_ids=[1, 9, 17, 25, 33])
TINY_8B = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rope_theta=1000000.0,
               rms_norm_eps=1e-6, tie_word_embeddings=False)
TINY_DRAFTER = dict(num_layers=2, block_size=8, target_layer_ids=[1, 4])


def decode_config(label: str, max_new: int) -> DecodeConfig:
    auto = auto_label(label)
    if auto:
        mode, rule, k, nodes = auto
        return DecodeConfig(mode=mode, rule=rule, max_shifted=k, max_trie_nodes=nodes, max_new_tokens=max_new,
                            ignore_eos=True)
    return DecodeConfig(mode=label, max_new_tokens=max_new, ignore_eos=True)


def one_label(eng, label: str, prompts: list[list[int]], max_new: int) -> dict:
    """Every prompt once (after one warm-up run: first calls capture or lazily initialise): rounds, stages, speed."""
    cfg = decode_config(label, max_new)

    def run(ids):
        r = eng.run(ids, cfg, budget_for(eng, cfg))
        r.finish()
        return r

    run(prompts[0])
    rounds, outputs, tokens, wall, chosen = [], [], 0, 0.0, []
    for ids in prompts:
        r = run(ids)
        rounds += r.rounds
        outputs.append(r.result["output_ids"])
        tokens += r.result["stats"]["new_tokens"]
        wall += r.result["stats"]["wall_s"]
        chosen += [x["budget"] for x in r.rounds if x.get("budget")]
    stages = {k: round(sum(x["stages_ms"][k] for x in rounds) / len(rounds), 3) for k in rounds[0]["stages_ms"]}
    out = {"rounds": len(rounds), "tokens_per_round": round(sum(len(x["new_tokens"]) for x in rounds) / len(rounds), 3),
           "ms_per_round": round(sum(x["round_ms"] for x in rounds) / len(rounds), 3), "stages_ms": stages,
           "tokens_per_s": round(tokens / wall, 2), "outputs": outputs}
    if chosen:   # what the auto budget picked: nodes verified and shifted blocks drafted a round, plain steps' share
        out["picked"] = {"nodes": round(statistics.mean(c.get("nodes", 0) for c in chosen), 2),
                         "shifted": round(statistics.mean(c.get("shifted", 0) for c in chosen), 2),
                         "plain_share": round(sum(bool(c.get("plain")) for c in chosen) / len(chosen), 3)}
    return out


def embedded(engines: dict, prompts: list[str], max_new: int, deadline: float, profile: dict) -> dict:
    """Per engine and label: one_label's figures, x over ar and the tokens equal to the eager ar's. Each engine's
    auto budget profile is measured first (`profile`: Profile.measure's arguments), on that engine's own calls."""
    first = next(iter(engines.values()))
    ids = [first.encode_prompt(p) for p in prompts]
    res: dict = {}
    for name, eng in engines.items():
        res[name] = {}
        try:
            res[name]["profile"] = engine_profile(eng, **profile).as_dict()
        except Exception as e:   # a failure is a finding: the other engine and labels still run
            res[name]["profile"] = failed(e)
        for label in LABELS:
            if time.time() > deadline:
                res[name][label] = {"skipped": "time"}
                continue
            try:
                res[name][label] = one_label(eng, label, ids, max_new)
            except Exception as e:
                res[name][label] = failed(e)
    ar = res.get("eager", {}).get("ar", {}).get("outputs")
    for name in res:
        base = res[name].get("ar", {}).get("tokens_per_s")
        for label, v in res[name].items():
            if "outputs" in v:
                v["x_over_ar"] = round(v["tokens_per_s"] / base, 3) if base else None
                v["equal_to_ar"] = sum(a == b for a, b in zip(v.pop("outputs"), ar)) if ar else None
                v["prompts"] = len(ids)
    return res


def failed(e: Exception) -> dict:
    """A step's failure as the JSON records it (and its traceback on stderr, for the device's log)."""
    traceback.print_exc()
    return {"error": f"{type(e).__name__}: {e}"[:2000]}


def shaped_models(device: torch.device, dtype: torch.dtype, shape: dict, drafter: dict):
    """A random-weight Qwen3 target of `shape` and a random DFlash drafter of `drafter`'s shape, built on the device;
    a word-level tokenizer over the vocabulary (the engine only decodes ids with it)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from engine.models import Models, random_drafter
    cfg = Qwen3Config(**shape, eos_token_id=0, bos_token_id=0, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            target = Qwen3ForCausalLM(cfg).eval()
            d = random_drafter(target, seed=1, mask_token_id=shape["vocab_size"] - 1, **drafter).eval()
    finally:
        torch.set_default_dtype(old)
    vocab = {f"t{i}": i for i in range(shape["vocab_size"])}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                  unk_token="t0", eos_token="t0")
    return Models(target, tok, d, device, dtype, "random Qwen3-8B shape", "random z-lab Qwen3-8B-DFlash-b16 shape")


def user_scale(models, capture: bool, n_prompts: int, prompt_len: int, max_new: int, repeats: int,
               deadline: float) -> dict:
    """Engine against the authors' loops on the same models, eager and static (captured on CUDA)."""
    from engine.bench.reference import engine_run, load_ddtree, reference_section
    ddtree = load_ddtree(os.environ.get("DDTREE") or None)
    modes = ["dflash"] + (["ddtree"] if ddtree is not None else [])
    g = torch.Generator().manual_seed(0)
    vocab = models.target.config.vocab_size - 1
    prompts = [(f"random{i}", torch.randint(vocab, (prompt_len,), generator=g).tolist()) for i in range(n_prompts)]
    out: dict = {"ddtree": "ran" if ddtree is not None else "skipped: DDTree's ddtree.py not importable (set DDTREE)"}
    engines = {"eager": lambda: Engine(models, draft_head_dtype=None),
               "captured" if capture else "static": lambda: StaticEngine(models, None, capture=capture)}
    for name, make in engines.items():
        if time.time() > deadline:
            out[name] = {"skipped": "time"}
            continue
        try:
            eng = make()
            for m in modes:   # full-length runs first: every bucket the timed runs use is captured before them
                engine_run(eng, prompts[0][1], m, max_new)
            sec = reference_section(eng, prompts, modes, max_new, repeats, ddtree, log=lambda s: None)
            out[name] = {m: {k: v for k, v in r.items() if k not in ("pairs_ms",)} for m, r in sec.items()}
        except Exception as e:
            out[name] = failed(e)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rehearse", action="store_true", help="the CPU at tiny sizes: every step, no capture")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --rehearse")
    ap.add_argument("--prompts", type=int, default=2, help="per mode (--rehearse: at most 2)")
    ap.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    ap.add_argument("--budget-s", type=float, default=330.0, help="parts not started by then are skipped")
    ap.add_argument("--skip-8b", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.time()
    deadline = t0 + a.budget_s
    dev = torch.device(a.device or ("cpu" if a.rehearse else "cuda"))
    capture = dev.type == "cuda"
    res: dict = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
                 "rehearsal": a.rehearse, "capture": capture}

    def save() -> None:
        res["wall_s"] = round(time.time() - t0, 1)
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=1))

    if a.rehearse:
        from tiny import tiny_models
        models = tiny_models("qwen3", 0, block_size=6, device=str(dev))
        prompts, max_new, profile = ["ab c", "c a b"][: a.prompts], min(a.max_new_tokens, 8), {"context": 32, "reps": 1}
    else:
        from engine.models import load_models
        models = load_models(None, "default", str(dev))
        if models.drafter_name == "random":
            sys.exit("static_check: no shipped drafter under assets/drafters (the default would be random)")
        prompts, max_new, profile = PROMPTS[: a.prompts], a.max_new_tokens, {}
    res["embedded_models"] = {"target": models.target_name, "drafter": models.drafter_name,
                              "dtype": str(models.dtype).replace("torch.", "")}
    engines = {"eager": Engine(models), "captured" if capture else "static": StaticEngine(models, capture=capture)}
    res["embedded"] = embedded(engines, prompts, max_new, deadline, profile)
    del engines   # their buffers and graphs, before the 8 B models
    print(json.dumps(res["embedded"]), flush=True)
    save()
    if not a.skip_8b:
        if a.rehearse:
            big = shaped_models(dev, torch.float32, TINY_8B, TINY_DRAFTER)
            n, plen, new, reps = 1, 12, 8, 1
        else:
            big = shaped_models(dev, torch.bfloat16, QWEN3_8B, DRAFTER_8B)
            n, plen, new, reps = 2, 256, 64, 2
        try:
            res["user_scale"] = user_scale(big, capture, n, plen, new, reps, deadline)
        except Exception as e:
            res["user_scale"] = failed(e)
        print(json.dumps(res["user_scale"]), flush=True)
        del big
        save()
    save()
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

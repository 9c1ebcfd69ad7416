"""python -m engine.bench.precision: plain decoding (`ar`) in float32 against its bfloat16 copy, side by side in one
process, on the benchmark's held-out prompts. The bfloat16 engine is built as the app's Race tab builds it
(engine.models.in_dtype over the float32 load), so this says what a bfloat16 race's "×N against plain decoding
in bfloat16" means in float32 tokens/s. The order alternates prompt by prompt, so drift in the machine's load
falls on both."""
from __future__ import annotations

import argparse
import os
import time

import torch

from ..decode import DecodeConfig, Engine
from ..models import in_dtype
from ..models.args import add_model_args, models_from_args
from ..options import DEFAULT_MAX_NEW_TOKENS, parse_csv
from ..sets import SETS, load_set, sample_prompts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m engine.bench.precision", description=__doc__)
    add_model_args(p)
    p.add_argument("--sets", default="humaneval,mtbench,math")
    p.add_argument("--n", type=int, default=2, help="prompts per set")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    a = p.parse_args(argv)
    fp32 = Engine(models_from_args(a))
    engines = {"float32": fp32, "bfloat16": Engine(in_dtype(fp32.models, torch.bfloat16))}
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average {os.getloadavg()}")
    print("| set | prompt | float32 tokens/s | bfloat16 tokens/s | bfloat16 / float32 | same text |\n|---|---|---|---|---|---|")
    tps: dict[str, list[float]] = {d: [] for d in engines}
    for name in parse_csv(a.sets, SETS, "sets"):
        for i, row in enumerate(sample_prompts(load_set(name), a.n)):
            cfg = DecodeConfig(mode="ar", max_new_tokens=a.max_new_tokens)
            out = {}
            for d in sorted(engines, reverse=bool(len(tps["float32"]) % 2)):   # alternate who goes first
                run = engines[d].run(engines[d].encode_prompt(row["prompt"]), cfg)
                for _ in run:
                    pass
                out[d] = run.result
                tps[d].append(run.result["stats"]["tokens_per_s"])
            same = out["float32"]["output_ids"] == out["bfloat16"]["output_ids"]
            print(f"| {name} | {i} | {tps['float32'][-1]:.2f} | {tps['bfloat16'][-1]:.2f} | "
                  f"{tps['bfloat16'][-1] / tps['float32'][-1]:.2f}× | {'yes' if same else 'no'} |", flush=True)
    mean = {d: sum(v) / len(v) for d, v in tps.items()}
    print(f"| **mean** | | {mean['float32']:.2f} | {mean['bfloat16']:.2f} | "
          f"{mean['bfloat16'] / mean['float32']:.2f}× | |")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average {os.getloadavg()}")


if __name__ == "__main__":
    main()

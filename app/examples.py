"""Example prompts: a few written here (code, math, chat), and a few of the benchmark's own HumanEval
and MT-Bench prompts (engine.bench.sets reads them from the installed packages; nothing downloaded)."""
from __future__ import annotations

from engine.bench.sets import load_set
from engine.errors import InputError

WRITTEN = [
    ("code", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    ("code", "Write a Python function is_palindrome(s) that ignores case and punctuation, with three tests."),
    ("math", "A train travels 180 km in 2.5 hours. What is its average speed in km/h? Explain step by step."),
    ("math", "Solve for x: 3x + 7 = 25. Show each step."),
    ("chat", "Give me three tips for staying focused while working from home."),
    ("chat", "Explain what a hash table is to a ten-year-old."),
]
HUMANEVAL_IDS = ["HumanEval/0", "HumanEval/2", "HumanEval/4"]
MTBENCH_IDS = ["81", "101", "111", "121"]


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
    return (list(WRITTEN) + benchmark_prompts("humaneval", HUMANEVAL_IDS, lambda r: r["id"])
            + benchmark_prompts("mtbench", MTBENCH_IDS,
                                lambda r: f"MT-Bench {r['id']} ({r.get('category', '')})"))

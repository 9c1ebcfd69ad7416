"""Issue 6 (concurrency): several gradio_client sessions against one launched app (`python -m app`, tiny
random models). Runs share one queue slot; each session must get exactly its own result (no shared mutable
state between sessions), and a run submitted while the slot is busy must report its queue position."""
from __future__ import annotations

import json
import re
import threading

from gradio_client.utils import Status

# the launched tiny app and the client tests' helpers (one app per module)
from app_fixtures import (LONG_PROMPT, METRICS, SLIDER, TEXT, app, client, export_path, generated_text,  # noqa: F401
                          tiny_dirs, wait_outputs)
from helpers import wait_until

# Three sessions with different prompts, modes, rules and seeds (temperature 1, so the seed matters).
# every shifted block ("all"): the page's default cap, "auto", sizes rounds by measured times, which differ when
# runs share the machine, and at T > 0 other proposals draw other tokens (the law is the same, not the draw)
SETTINGS = [("hi, j.", "reanchor", "earliest", 1.0, 11, 40, "all"),
            ("ab. ab. ab.", "reanchor", "all", 1.0, 22, 40, "all"),
            ("a b c d e f g", "dflash", "earliest", 1.0, 33, 40, "all")]


def _untimed(caption: str) -> str:
    """A round caption without its measured draft/verify times."""
    return re.sub(r"\d+(\.\d+)? ms", "… ms", caption)


def _summary(app, c, result) -> dict:
    """What a session sees after its run: status, text, rounds, exported trace, and its own state."""
    assert "done" in result[METRICS], result[METRICS]
    trace = json.loads(open(export_path(app, result)).read())
    n = result[SLIDER]["maximum"] + 1
    return {"text_html": result[TEXT], "text": generated_text(result[TEXT]), "rounds": n,
            "output_ids": trace["output_ids"], "prompt_ids": trace["prompt_ids"],
            "trace_text": trace["text"], "trace_rounds": len(trace["rounds"]),
            "config": {k: trace["config"][k] for k in ("mode", "rule", "temperature", "seed", "max_new_tokens")},
            # the session's own state after the other session ran: last round / round 0 of ITS trace
            "last_caption": _untimed(c.predict(api_name="/last_round")[1]),
            "round0_fig": json.loads(c.predict(0, api_name="/goto_round")[2])["fig"]}


def test_sessions_at_once_each_get_their_own_run(app):
    # what each session gets alone (sequential runs, fresh sessions)
    alone = []
    for s in SETTINGS:
        c = client(app)
        alone.append(_summary(app, c, c.predict(*s, api_name="/run")))
    for i in range(len(alone)):
        for j in range(i):
            assert alone[i]["text"] != alone[j]["text"] and alone[i]["prompt_ids"] != alone[j]["prompt_ids"]

    # now all at the same time, from two clients (two sessions)
    clients = [client(app) for _ in SETTINGS]
    barrier = threading.Barrier(len(SETTINGS))
    jobs: list = [None] * len(SETTINGS)

    def submit(i):
        barrier.wait()
        jobs[i] = clients[i].submit(*SETTINGS[i], api_name="/run")

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(SETTINGS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(jobs), "submission failed"
    results = [j.result(timeout=120) for j in jobs]
    together = [_summary(app, c, r) for c, r in zip(clients, results)]

    for i, s in enumerate(SETTINGS):
        assert together[i]["config"] == {"mode": s[1], "rule": s[2], "temperature": s[3], "seed": s[4],
                                         "max_new_tokens": s[5]}
        for key in alone[i]:
            assert together[i][key] == alone[i][key], f"session {i} ({s[0]!r}): {key} differs from its run alone"


def _wait_status(job, code, timeout=30.0):
    def said():
        st = job.status()
        assert st.code == code or not job.done(), f"job ended while waiting for {code}: {st}"
        return st if st.code == code else None

    return wait_until(said, timeout, lambda: f"no {code} status (last: {job.status()})")


def test_run_submitted_while_busy_reports_its_queue_position(app):
    c1, c2, c3 = client(app), client(app), client(app)
    busy = c1.submit(LONG_PROMPT, "reanchor", "earliest", 0, 0, 400, api_name="/run")  # holds the model slot
    try:
        wait_outputs(busy, 2)
        short = ("hi, j.", "dflash", "earliest", 0, 0, 16)
        second = c2.submit(*short, api_name="/run")
        st2 = _wait_status(second, Status.IN_QUEUE)
        assert st2.rank == 0, st2
        third = c3.submit(*short, api_name="/run")
        st3 = _wait_status(third, Status.IN_QUEUE)
        assert st3.rank == 1, st3
        assert st3.queue_size == 2, st3
        assert not busy.done(), "the busy run must still hold the slot while the others wait"
    finally:
        c1.predict(api_name="/stop")
    assert "stopped" in busy.result(timeout=60)[METRICS]
    r2, r3 = second.result(timeout=60), third.result(timeout=60)
    assert "done" in r2[METRICS] and "done" in r3[METRICS]
    assert r2[TEXT] == r3[TEXT]  # same settings, separate sessions: same run

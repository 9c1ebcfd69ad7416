"""Bounds per session and per client, over HTTP against the launched app (tiny models): the rounds route draws one
request of a session at a time, and one client (an address) may hold at most app.__main__.CLIENT_RUNS places of
the model queue, over all its sessions."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.utils import Status  # noqa: E402

from app.__main__ import CLIENT_RUNS  # noqa: E402
from app_fixtures import real_trace  # noqa: E402
from helpers import wait_until  # noqa: E402

LONG_PROMPT = "a b c d e f g"   # runs to max_new_tokens on the tiny target
METRICS = 1   # outputs of /run (state excluded)


@pytest.fixture(scope="module")
def app(tiny_app):
    tiny_app.wait_model(Client(tiny_app.url, verbose=False))
    return tiny_app


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_session_draws_one_rounds_request_at_a_time(app, tmp_path):
    """Eight requests of one session at once: one is drawn, the rest answered 429 at once; after it, the next is
    drawn. Before: all eight were drawn side by side (a client's 17 at once took another user's round switch from
    0.18 to 7.3 s)."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(real_trace(max_new_tokens=96)))
    out = Client(app.url, verbose=False).predict(handle_file(str(path)), api_name="/load_trace")
    payload = next(json.loads(o) for o in out if isinstance(o, str) and '"src":' in o)
    url = f"{app.url.rstrip('/')}{payload['src']}?key={urllib.request.quote(payload['key'])}&from=0&count=8"
    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(_get, [url] * 8))
    assert statuses.count(200) >= 1 and statuses.count(429) >= 5, statuses
    assert _get(url) == 200   # the session's turn is back


def _wait_status(job, *codes, timeout=60.0):
    # gradio_client's job status has no event to wait on: asked until it says one of `codes`
    def said():
        st = job.status()
        return st if st.code in codes else None

    return wait_until(said, timeout, lambda: f"no {codes}: {job.status()}")


def test_one_client_holds_at_most_its_share_of_the_queue(app):
    """A run holds the model; this client's next CLIENT_RUNS runs, from as many sessions, wait; one more is refused
    as a full queue (16 places), and the runs waiting still run. Before: the queue took 16 from one client."""
    clients = [Client(app.url, verbose=False) for _ in range(CLIENT_RUNS + 2)]
    busy = clients[0].submit(LONG_PROMPT, "reanchor", "earliest", 0, 0, 400, api_name="/run")
    short = ("hi, j.", "dflash", "earliest", 0, 0, 8)
    try:
        _wait_status(busy, Status.PROCESSING, Status.ITERATING)
        waiting = [c.submit(*short, api_name="/run") for c in clients[1:CLIENT_RUNS + 1]]
        for job in waiting:
            _wait_status(job, Status.IN_QUEUE)
        extra = clients[-1].submit(*short, api_name="/run")
        # refused as a full queue (gradio_client and the page word it so), with CLIENT_RUNS + 1 of 16 places taken
        with pytest.raises(Exception, match="Queue is full"):
            extra.result(timeout=60)
    finally:
        clients[0].predict(api_name="/stop")
    busy.result(timeout=120)
    for job in waiting:
        assert "done" in job.result(timeout=120)[METRICS]

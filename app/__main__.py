"""python -m app: the ReAnchor Explorer web app (local, offline).

Binds 127.0.0.1 by default; analytics, share links, web fonts and hub lookups are off. The UI comes
up at once and loads the models in a background thread (the status line shows progress).
"""
from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import socket
import sys

# Offline by construction, set before gradio / transformers / huggingface_hub are imported. Forced, not
# defaulted: a user's HF_HUB_OFFLINE=0 made a cached hub id --target query huggingface.co (44 lookups, with
# retries, in tests/test_app_network.py).
OFFLINE_ENV = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "GRADIO_SSR_MODE": "False"}
os.environ.update(OFFLINE_ENV)

from engine.models.args import add_model_args  # noqa: E402  (after the environment is set)
from engine.options import MAX_UPLOAD_MB  # noqa: E402

QUEUE_MAX = 16  # waiting events across sessions; more are refused with a "queue full" message
STATE_SESSIONS = 100  # sessions whose state Gradio keeps (the oldest beyond it start afresh)
# One client (an address) may hold this many of the model queue's places (runs, comparisons, curves, races waiting
# their turn), over all its sessions: one client's 17 sessions filled the queue, and every other user was refused
CLIENT_RUNS = 4
ROUNDS_AT_ONCE = 1   # rounds-route draws at a time over all sessions: the page's prefetch is a best effort
ROUNDS_WAIT_S = 2.0  # how long a request waits for that turn (503 after: the page fetches again at its next switch)


class RoundsTurns:
    """The rounds route's bounds: a session's second request while its first is drawn is 429, and ROUNDS_AT_ONCE
    draws run at a time (one core's worth), so that no client's fetches slow another user's round switches (a client
    firing requests at once took another user's switch from 0.18 to 7.3 s)."""

    def __init__(self, at_once: int = ROUNDS_AT_ONCE, wait_s: float = ROUNDS_WAIT_S):
        import asyncio

        self._busy: set[str] = set()   # tokens with a request in flight (the server's one event loop: no lock)
        self._slots, self.wait_s = asyncio.Semaphore(at_once), wait_s

    async def serve(self, token: str, draw) -> tuple[int, str]:
        """(status, JSON body): `draw()` (blocking) in a worker thread at its turn."""
        import asyncio
        import json

        from starlette.concurrency import run_in_threadpool

        if token in self._busy:
            return 429, json.dumps({"error": "rounds: this session's last request is still being drawn"})
        self._busy.add(token)
        try:
            try:
                await asyncio.wait_for(self._slots.acquire(), self.wait_s)
            except asyncio.TimeoutError:
                return 503, json.dumps({"error": "rounds: busy drawing other sessions' rounds; ask again later"})
            try:
                return await run_in_threadpool(draw)
            finally:
                self._slots.release()
        finally:
            self._busy.discard(token)


def limit_client_runs(demo, per_client: int = CLIENT_RUNS, concurrency_id: str = "model") -> None:
    """Refuse a client's event for the model queue while `per_client` of its events wait there (Gradio's queue has
    one bound, for all clients: QUEUE_MAX). A client is its address; Gradio's queue takes the join."""
    from gradio import route_utils

    queue = demo._queue
    push = queue.push

    async def push_bounded(body, request, username):
        try:
            fn = route_utils.get_fn(demo, None, body)
        except Exception:  # Gradio's own push names what is wrong
            return await push(body, request, username)
        host = request.client.host if request.client else None
        waiting = queue.event_queue_per_concurrency_id.get(concurrency_id)
        if fn.concurrency_id == concurrency_id and waiting is not None:
            mine = sum(1 for e in waiting.queue if e.request is not None and e.request.client is not None
                       and e.request.client.host == host)
            if mine >= per_client:
                return (False, f"Queue: {mine} runs of this client are waiting already, the most one client may "
                               f"hold of the queue's {queue.max_size} places; wait for one to start", "queue_full")
        return await push(body, request, username)

    queue.push = push_bounded


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=7860)
    add_model_args(p)  # --target, --drafter, --device, --dtype, --draft-dtype, --trust-remote-code
    p.add_argument("--no-model", action="store_true", help="replay traces only; load no model")
    p.add_argument("--queue-size", type=int, default=QUEUE_MAX)
    p.add_argument("--max-sessions", type=int, default=None,
                   help="sessions holding traces of their own at once (default 16; the least recently used frees its)")
    p.add_argument("--session-idle", type=float, default=None,
                   help="minutes unused before a session's traces are freed (default 30; closing the tab: at once)")
    p.add_argument("--run-seconds", type=float, default=None,
                   help="a run of the page stops after this long, so that others get their turn (default 60)")
    p.add_argument("--calibration-seconds", type=float, default=None,
                   help="how long the Race tab's calibration race may take after the model loads (default 45): "
                        "its preset is measured on fewer tokens in less")
    return p.parse_args(argv)


def sessions_from_args(args: argparse.Namespace):
    from .session import MAX_SESSIONS, SESSION_IDLE_S, Sessions

    idle_s = SESSION_IDLE_S if args.session_idle is None else args.session_idle * 60
    sweep_s = min(60.0, max(1.0, idle_s / 4))
    return Sessions(args.max_sessions or MAX_SESSIONS, idle_s).start_sweeper(sweep_s)


def launch(args: argparse.Namespace, block: bool = True):
    from starlette.middleware import Middleware
    from starlette.responses import FileResponse, Response
    from starlette.routing import Route

    from .early_script import EarlyScript
    from .loader import ModelLoader
    from .offline import OfflineGuard
    from .page import CSS, HEAD, PLOTLY_JS, PLOTLY_ROUTE, theme
    from .ui import build_ui

    loader = ModelLoader(args, enabled=not args.no_model)  # started once the server is up (below)
    plotly_js = Route(PLOTLY_ROUTE, lambda request: FileResponse(PLOTLY_JS, media_type="text/javascript",
                                                                  headers={"Cache-Control": "max-age=86400"}))
    from . import session, views

    if args.run_seconds is not None:
        session.RUN_SECONDS = args.run_seconds
    sessions = sessions_from_args(args)

    turns = RoundsTurns()

    async def rounds(request):  # a session's rounds ahead of a jump (views.rounds_json), outside Gradio's queue
        q, token = request.query_params, request.path_params["token"]
        state = sessions.by_token(token)
        draw = functools.partial(views.rounds_json, state, q.get("key"), q.get("from"), q.get("count"))
        status, body = draw() if state is None else await turns.serve(token, draw)   # None: 404 at once
        return Response(body, status, media_type="application/json", headers={"Cache-Control": "no-store"})

    rounds_route = Route(views.ROUNDS_ROUTE + "{token}", rounds)
    demo = build_ui(loader, sessions)
    sessions.uploaded = demo.upload_file_set   # the only files a session may claim (Sessions.claim_upload)
    session.start_upload_sweeper(demo.upload_file_set)
    demo.queue(max_size=args.queue_size, default_concurrency_limit=8)
    limit_client_runs(demo)
    demo.launch(server_name=args.host, server_port=args.port, share=False, inbrowser=False, show_error=False,
                ssr_mode=False, max_file_size=f"{MAX_UPLOAD_MB}mb", theme=theme(), css=CSS, head=HEAD, footer_links=[],
                # run_history off: Gradio would keep every call's inputs and outputs in the browser's
                # localStorage (the next visitor of a shared browser sees them; its page offers to upload
                # them to a Hugging Face bucket) and rewrite ~3 MB of it per click (round switches went
                # from 50 to 250 ms over 100 clicks)
                run_history=False,
                enable_monitoring=False, mcp_server=False, prevent_thread_lock=True, quiet=True,
                state_session_capacity=STATE_SESSIONS,
                app_kwargs={"routes": [plotly_js, rounds_route],
                            "middleware": [Middleware(OfflineGuard), Middleware(EarlyScript)]},
                # skip Gradio's self-check: one HEAD of our page with a 3 s timeout, whose only remedy is a
                # share link. On a busy machine (the model loading beside it, other jobs) it timed out and the
                # app exited. Reachability is already proven: launch first GETs its startup-events route,
                # with no timeout, and raises if that fails.
                _frontend=False)
    # The load starts once the server is up, so that its imports and de-quantisation (GIL-bound) do not slow
    # the server's start; the page itself imports no torch (tests/test_layout.py).
    loader.start()
    # our own line: quiet=True drops Gradio's, which also urges share=True (a public tunnel we never open)
    reach = "this machine only" if args.host in ("127.0.0.1", "localhost", "::1") else f"host {args.host}: other machines too"
    print(f"ReAnchor Explorer on {demo.local_url} ({reach})", flush=True)
    if block:
        demo.block_thread()
    return demo, loader


def bind_error(host: str, port: int) -> str | None:
    """Why host:port cannot be served, checked before loading anything (None: it can). SO_REUSEADDR as
    the server's own socket, so a port a closed server left in TIME_WAIT counts as free."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f"port: {host}:{port} is in use; pick another with --port"
        return f"host: cannot serve on {host}:{port} ({e.strerror or e})"
    return None


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    from .session import limit_malloc_arenas

    limit_malloc_arenas()  # before the server's threads allocate
    for name, value in (("port", args.port), ("max-sessions", args.max_sessions), ("session-idle", args.session_idle),
                        ("queue-size", args.queue_size), ("run-seconds", args.run_seconds),
                        ("calibration-seconds", args.calibration_seconds)):
        # `not value > 0`: nan too (it compares false both ways, and would disable idle freeing silently)
        if value is not None and (not value > 0 or value == float("inf") or (name == "port" and value >= 65536)):
            print(f"error: {name}: {value} is out of range (a finite number above 0"
                  + (", below 65536)" if name == "port" else ")"), file=sys.stderr)
            return 2
    why = bind_error(args.host, args.port)
    if why is None:
        try:
            launch(args)
        except OSError:  # taken meanwhile (Gradio: "Cannot find empty port in range")
            why = bind_error(args.host, args.port) or f"port: {args.host}:{args.port} is in use"
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

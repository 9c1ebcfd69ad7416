"""The server sends no request off this machine, whatever a client sends (tests/test_app_network.py).

Gradio fetches URLs for clients in two places: its file route (`/gradio_api/file=https://...` resolves the
host, asks dns.google about loopback names, and streams the page back) and the preprocessing of a file
entry whose path is a URL (downloaded into its cache). Both are closed here, in front of Gradio's routes,
by one ASGI middleware: the file route serves the app's own files only, `/proxy=` nothing, and a JSON body
naming a URL in a file entry is refused before Gradio reads it.
"""
from __future__ import annotations

import json
from urllib.parse import urlsplit

MAX_JSON_BODY = 32 * 1024 * 1024  # an event's inputs (prompt, menus, a file entry); uploads are multipart


def is_url(value) -> bool:
    """A string a fetcher could take for a URL (any scheme, scheme-relative //host, any case)."""
    if not isinstance(value, str):
        return False
    v = value.strip().lower()
    return "://" in v or v.startswith(("//", "\\\\"))


def path_refusal(path: str) -> str | None:
    """Why a request path is refused (None: it is not): a URL through the file route, any /proxy=."""
    if "/proxy=" in path:
        return "proxy: this app proxies nothing"
    i = path.find("/file=")
    if i >= 0 and is_url(path[i + len("/file="):]):
        return "file: the file route serves this app's own files, never a URL"
    return None


def file_entry_refusal(data, host: str | None) -> str | None:
    """Why a decoded JSON body is refused (None: it is not): a file entry (a dict with a path or url)
    whose path is a URL, or whose url is a URL off this server's own file route. Iterative: a deeply
    nested body cannot exhaust the stack."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if is_url(item.get("path")):
                return "file: a file entry's path may not be a URL (upload the file instead)"
            url = item.get("url")
            if is_url(url):
                parts = urlsplit(url.strip())
                if parts.netloc.lower() != (host or "").lower() or not parts.path.startswith("/gradio_api/file="):
                    return "file: a file entry's url may only name this server's own files"
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": message, "detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class OfflineGuard:
    """ASGI middleware (install with FastAPI's `middleware=[Middleware(OfflineGuard)]`)."""

    def __init__(self, app, max_json_body: int = MAX_JSON_BODY):
        self.app = app
        self.max_json_body = max_json_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        why = path_refusal(scope.get("path", "")) or path_refusal(scope.get("raw_path", b"").decode("latin-1"))
        if why:
            return await _refuse(send, 403, why)
        headers = dict(scope.get("headers") or [])
        ctype = headers.get(b"content-type", b"").decode("latin-1").lower()
        if scope.get("method") != "POST" or ctype.startswith("multipart/"):
            return await self.app(scope, receive, send)
        # a JSON (or untyped) body: read it whole (bounded), check its file entries, then hand it on
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_json_body:
                return await _refuse(send, 413, f"body: over {self.max_json_body // 2**20} MB")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                data = None  # not JSON: Gradio answers it; no file entry to fetch in it
            why = file_entry_refusal(data, headers.get(b"host", b"").decode("latin-1"))
            if why:
                return await _refuse(send, 403, why)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

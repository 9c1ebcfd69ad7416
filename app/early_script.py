"""A script that must run before Gradio's own: app/static/frame_guard.js (why: its comment). Gradio adds the
`head` given to launch() from its own scripts, after they have started, so this ASGI middleware writes the script
at the top of the page's <head> as the page is served."""
from __future__ import annotations

from . import assets

PAGE_PATHS = ("/",)   # where Gradio serves the page (ssr_mode off)


class EarlyScript:
    """ASGI middleware (FastAPI's `middleware=[Middleware(EarlyScript)]`): the page's HTML with `script` first in
    its <head>; every other response passes untouched."""

    def __init__(self, app, script: str | None = None):
        self.app = app
        self.tag = b"<script>" + (script or assets.read("frame_guard.js")).encode() + b"</script>"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or scope.get("path") not in PAGE_PATHS:
            return await self.app(scope, receive, send)
        start: dict | None = None
        body: list[bytes] = []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            html = b"".join(body)
            headers = dict(start.get("headers") or [])
            if (start["status"] == 200 and headers.get(b"content-type", b"").startswith(b"text/html")
                    and b"content-encoding" not in headers and b"<head>" in html):
                html = html.replace(b"<head>", b"<head>" + self.tag, 1)
            kept = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
            await send({**start, "headers": kept + [(b"content-length", str(len(html)).encode())]})
            await send({"type": "http.response.body", "body": html})

        await self.app(scope, receive, rewrite)

"""Token pieces made safe and visible: every string that reaches HTML or Plotly passes through here.

Plotly renders a subset of HTML in text (<b>, <a href>, <br>, ...) and decodes a few entities (&amp; &lt;
&gt; and numeric ones, not &quot;), so token text for Plotly escapes '&', '<', '>' and turns '$' into '&#36;'
(no MathJax); quotes stay as they are (Plotly text is no attribute). Page HTML uses html.escape(quote=True).
"""
from __future__ import annotations

import html

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍", "\u00a0": "⍽"}


def piece(token_texts: dict, tok: int) -> str:
    """The decoded piece of a token id (keys are strings in traces), or ⟨id⟩ when unknown."""
    s = token_texts.get(str(tok))
    if s is None:
        s = token_texts.get(tok)
    return f"⟨{int(tok)}⟩" if s is None else str(s)


def visible(s: str, limit: int | None = None) -> str:
    """Whitespace and control characters made visible, cut to `limit` characters, then escaped."""
    out = []
    for ch in s:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0x80 <= ord(ch) < 0xA0:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    text = "".join(out) or "∅"
    if limit is not None and len(text) > limit:
        text = text[: max(1, limit - 1)] + "…"
    return plotly_escape(text)


def plotly_escape(s: str) -> str:
    """For Plotly text: '&', '<', '>' as entities Plotly decodes, '$' (its MathJax trigger) as '&#36;'."""
    return html.escape(str(s), quote=False).replace("$", "&#36;")


def escape(s: str) -> str:
    """For page HTML (text and attributes): html.escape with quotes."""
    return html.escape(str(s), quote=True)


def tok_cell(token_texts: dict, tok: int, limit: int = 7) -> str:
    return visible(piece(token_texts, tok), limit)


def tok_full(token_texts: dict, tok: int) -> str:
    return visible(piece(token_texts, tok), 40)


def text_html(s: str) -> str:
    """Running text for a pre-wrap container: escaped, whitespace kept as is, control chars shown."""
    out = []
    for ch in s:
        if ch in "\n\t":
            out.append(ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return html.escape("".join(out), quote=True)

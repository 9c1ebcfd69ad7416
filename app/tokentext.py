"""Token pieces made safe and visible: every string that reaches HTML or Plotly passes through here.

Plotly renders a subset of HTML in text (<b>, <a href>, <br>, ...) and decodes a few entities (&amp; &lt;
&gt; and numeric ones, not &quot;), so text for Plotly escapes '&', '<', '>' and turns '$' into '&#36;'
(no MathJax); quotes stay as they are (Plotly text is no attribute). `plotly_text` is the one way a
string reaches a Plotly label, title or hover: figure builders take plain text (a newline breaks the
line) and escape it there, once. Page HTML uses html.escape(quote=True).

The text view shows each token's piece of the decoded sequence (engine.trace.TextPieces), so characters
that byte-level BPE splits over tokens show as written; `trace_pieces` also mends older traces.
"""
from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍", "\u00a0": "⍽"}
# Bidirectional controls (embeddings, overrides, isolates, marks): a right-to-left override in a drafter
# name or a token's text reversed what the page showed ("drafter retfard.exe"), and spread over the tokens
# after it. Every string that reaches the page shows them as their code points instead.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def bidi_visible(s: str) -> str:
    """Bidirectional control characters as ⟨U+XXXX⟩ (they would reorder what is shown around them)."""
    return _BIDI.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", s)


def piece(token_texts: dict, tok: int) -> str:
    """The decoded piece of a token id (keys are strings in traces), or ⟨id⟩ when unknown."""
    s = token_texts.get(str(tok))
    if s is None:
        s = token_texts.get(tok)
    return f"⟨{int(tok)}⟩" if s is None else str(s)


def visible(s: str, limit: int | None = None) -> str:
    """Whitespace and control characters made visible, cut to `limit` characters, then escaped."""
    return _visible(s, limit) if len(s) <= CACHED_CHARS else plotly_text(_shown(s, limit))


# A round figure labels every token several times (cell, hover, trie node), a round switch builds two: the usual
# short pieces are made visible once (a quarter of the server's part of a switch). A long piece (a loaded trace's
# may be megabytes) is not kept alive by the cache.
CACHED_CHARS = 256


@lru_cache(maxsize=8192)
def _visible(s: str, limit: int | None) -> str:
    return plotly_text(_shown(s, limit))


def _shown(s: str, limit: int | None = None) -> str:
    """visible(), not yet escaped."""
    if limit is not None:
        # cut first: a character shows as at least one, so the rest cannot change what is shown, and a
        # loaded trace's token text may be long (walking 300,000 characters per label froze the figure)
        s = s[:limit + 1]
    out = []
    for ch in bidi_visible(s):
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0x80 <= ord(ch) < 0xA0:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    text = "".join(out) or "∅"
    if limit is not None and len(text) > limit:
        text = text[: max(1, limit - 1)] + "…"
    return text


def plotly_escape(s: str) -> str:
    """For Plotly text: '&', '<', '>' as entities Plotly decodes, '$' (its MathJax trigger) as '&#36;'."""
    return html.escape(bidi_visible(str(s)), quote=False).replace("$", "&#36;")


def plotly_text(s) -> str:
    """Plain text (of any origin) for a Plotly label, title or hover: escaped, newlines as <br>."""
    return "<br>".join(plotly_escape(line) for line in str(s).split("\n"))


def escape(s: str) -> str:
    """For page HTML (text and attributes): html.escape with quotes, bidirectional controls visible."""
    return html.escape(bidi_visible(str(s)), quote=True)


# "<>&" are left to html.escape; ":" and "@" too, so that no bare URL or e-mail address becomes a link
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:@])")


def markdown_text(s: object) -> str:
    """For gr.Markdown: HTML escaped and every Markdown special backslashed, so text stays text (no link,
    no image for the browser to fetch); newlines as spaces (a line break would end a table row)."""
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(bidi_visible(str(s)).splitlines())), quote=True)


def tok_cell(token_texts: dict, tok: int, limit: int = 7) -> str:
    return visible(piece(token_texts, tok), limit)


def tok_full(token_texts: dict, tok: int) -> str:
    return visible(piece(token_texts, tok), 40)


# Widths of label characters at 9 px, from DejaVu Sans (the widest of the usual system fonts, so that a label
# fits wherever the page is shown; measured in Chromium): narrow letters and marks 3 px; wide letters, the
# visible-whitespace marks, ideographs and "…" 9 px; the rest (other letters, digits, ␣) 6 px.
_NARROW = set("iljtfr.,:;'|!()[]{}` ")
_WIDE = set("mwMW…@%⏎⇥␍⍽∅")


def char_px(ch: str) -> int:
    if ch in _NARROW:
        return 3
    if ch in _WIDE or unicodedata.east_asian_width(ch) in "WF":
        return 9
    return 6


def tok_fit(token_texts: dict, tok: int, px: float) -> str:
    """A token's visible text cut to about `px` pixels of 9 px text ("…" ending a cut one), then escaped: a
    label that fits its cell or its position (short words whole; a count of characters cut them all short, or
    let long ones run into their neighbours)."""
    p = piece(token_texts, tok)
    return _fit_text(p, px) if len(p) <= CACHED_CHARS else _fit_text.__wrapped__(p, px)


@lru_cache(maxsize=8192)
def _fit_text(p: str, px: float) -> str:
    text = _shown(p, 64)
    widths = [char_px(ch) for ch in text]
    if sum(widths) <= px:
        return plotly_text(text)
    room, n = px - char_px("…"), 0
    while n < len(text) and room >= widths[n]:
        room -= widths[n]
        n += 1
    return plotly_text(text[:max(n, 1)] + "…")


def text_html(s: str) -> str:
    """Running text for a pre-wrap container: escaped, whitespace kept as is, control chars shown."""
    out = []
    for ch in bidi_visible(s):
        if ch in "\n\t":
            out.append(ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return html.escape("".join(out), quote=True)


# ---------------------------------------------------------------- the text view's pieces

def generated_ids(trace: dict) -> list[int]:
    """The generated tokens so far: the prefill's token, then every round's (a live trace has no output_ids)."""
    first = trace.get("first_token")
    return ([] if first is None else [first]) + [t for r in trace.get("rounds", []) for t in r["new_tokens"]]


def mend_pieces(pieces: list[str], text: str | None) -> list[str]:
    """Older traces hold one decoded piece per token id, where a character split over tokens is U+FFFD in
    each. `text`, the sequence decoded whole, has the characters: each run of such pieces gets them (all
    to the run's last token) where the pieces around it line up with `text`; the rest stays as it is."""
    if not text or not any("\ufffd" in p for p in pieces):
        return pieces
    out, pos, k = list(pieces), 0, 0
    while k < len(pieces):
        if "\ufffd" not in pieces[k]:
            pos += len(pieces[k]) if text.startswith(pieces[k], pos) else 0
            k += 1
            continue
        j = k
        while j < len(pieces) and "\ufffd" in pieces[j]:
            j += 1
        most = sum(map(len, pieces[k:j]))  # a split character shows as one U+FFFD or more
        after = pieces[j] if j < len(pieces) else ""
        end = text.find(after, pos, pos + most + len(after)) if after else -1
        end = len(text) if end < 0 else end
        if 0 < end - pos <= most:
            out[k:j] = [""] * (j - k - 1) + [text[pos:end]]
            pos = end
        k = j
    return out


MAX_PIECE = 200  # characters shown per token (a real one has a few; a loaded trace may say anything)


def trace_pieces(trace: dict) -> tuple[list[str], list[str]]:
    """(per prompt token, per generated token) the text the view shows: the trace's own pieces when it
    has them for every token, else each token's decoded piece, mended against the decoded text."""
    texts = trace.get("token_texts") or {}
    out = []
    for ids, key, whole in ((trace.get("prompt_ids", []), "prompt_pieces", "prompt_text"),
                            (generated_ids(trace), "output_pieces", "text")):
        given = trace.get(key)
        if not (isinstance(given, list) and len(given) == len(ids)):
            given = mend_pieces([piece(texts, t) for t in ids], trace.get(whole))
        out.append([p if 6 * len(p) <= MAX_PIECE else _cut_piece(p) for p in given])
    return out[0], out[1]


def _cut_piece(p: str) -> str:
    """A piece cut so that its HTML is at most MAX_PIECE characters ("<" is "&lt;": 200 of them made the
    text view of 4,096 tokens 3.6 MB)."""
    size = 0
    for j, ch in enumerate(p):
        size += len(text_html(ch))  # escaped, a bidirectional control as its code point
        if size > MAX_PIECE - 1:
            return p[:j] + "…"
    return p

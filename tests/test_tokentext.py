"""Bidirectional control characters (app.tokentext.bidi_visible): a right-to-left override in a drafter name or
a token's text reversed what the page showed ("drafter retfard.exe") and spread over the tokens after it. Every
string of the page that a loaded trace fills (settings line, text view, round figure, timeline) shows them as
their code points."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("gradio")

from app import session, views  # noqa: E402
from app.loader import shown_name  # noqa: E402
from app.tokentext import bidi_visible, markdown_text, text_html, tok_fit  # noqa: E402
from app_fixtures import real_trace  # noqa: E402

CONTROLS = "\u202e\u202d\u202a\u202b\u202c\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_each_control_shows_as_its_code_point():
    assert bidi_visible("a\u202eexe.b") == "a⟨U+202E⟩exe.b"
    assert not set(bidi_visible(CONTROLS)) & set(CONTROLS)
    assert bidi_visible("שלום ok") == "שלום ok"  # right-to-left letters are text, not controls
    for shown in (text_html("x\u202ey"), markdown_text("x\u202ey"), tok_fit({"5": "\u202eab"}, 5, 200),
                  shown_name("/models/\u202eexe.drafter")):
        assert "\u202e" not in shown and "202E" in shown, shown


def test_a_loaded_trace_shows_no_control_anywhere_on_the_page():
    t = json.loads(json.dumps(real_trace()))
    t["config"]["drafter"] = "drafter \u202eexe.evil"
    tok = t["output_ids"][1]
    t["token_texts"][str(tok)] = "\u202e" + t["token_texts"][str(tok)]
    t["output_pieces"] = ["\u2067" + p for p in t["output_pieces"]]
    st = session.new_state()
    st.update(trace=t)
    out = json.dumps([o if isinstance(o, (str, int, float, type(None))) else str(o)
                      for o in views.ordered(views.show_trace(st, 1))[1:]], ensure_ascii=False)
    assert not set(out) & set(CONTROLS)
    assert "U+202E" in out and "U+2067" in out


def test_label_cache_keeps_no_long_piece_alive():
    """Labels of short pieces come from a cache (a round switch labels each token several times); a long piece (a
    loaded trace's may be megabytes) is labelled the same way but not kept by it, cut or whole."""
    from app import tokentext

    long = "x" * (tokentext.CACHED_CHARS + 1) + "\n<b>"
    before = (tokentext._visible.cache_info().currsize, tokentext._fit_text.cache_info().currsize)
    assert tokentext.visible(long, 40) == tokentext.plotly_text(tokentext._shown(long, 40))
    assert tok_fit({"7": long}, 7, 40.0).endswith("…")
    assert (tokentext._visible.cache_info().currsize, tokentext._fit_text.cache_info().currsize) == before
    short = "a\n<b>"
    assert tokentext.visible(short) == tokentext.visible(short) == "a⏎&lt;b&gt;"
    assert tokentext._visible.cache_info().currsize == before[0] + 1

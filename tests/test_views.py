"""app.views and the page's small inputs under untrusted values: Compare names a loaded trace's unknown mode and
rule "unknown"; the text view of pieces that escape long ("<") stays about 1 MB; the Example prompts' index is
checked, naming the control; an uploaded trace file is deleted once read (the session holds its own export)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")

from app import session, views  # noqa: E402
from app.examples import example_prompt  # noqa: E402
from app_fixtures import real_trace, tiled_trace  # noqa: E402


def test_compare_shows_unknown_for_a_loaded_traces_own_words():
    a = json.loads(json.dumps(real_trace()))
    a["config"].update(mode="evil-mode", rule="<i>rule</i>")
    st = session.new_state()
    st.update(trace=a, compare=real_trace(mode="dflash"))
    out = json.dumps([o if isinstance(o, (str, dict)) else str(o) for o in views.compare_views(st)])
    assert "evil-mode" not in out and "rule</i>" not in out and "rule&lt;" not in out
    assert "unknown / unknown" in out


def test_text_view_of_long_escaping_pieces_stays_about_a_megabyte():
    t = tiled_trace(real_trace(), 400)
    assert len(t["output_ids"]) > 4096
    t["output_pieces"] = ["<" * 200] * len(t["output_ids"])
    st = session.new_state()
    st.update(trace=t)
    html = views.text_shown(st, len(t["rounds"]) // 2)
    html = html if isinstance(html, str) else json.dumps(html)
    assert len(html.encode()) < 1.3e6, len(html.encode())


def test_example_prompt_index_is_checked():
    examples = [("a", "first"), ("b", "second")]
    assert example_prompt(examples, 1) == "second"
    for bad in (12, None, "x", -1, True, 1.5):
        with pytest.raises(gr.Error, match="Example prompts: "):
            example_prompt(examples, bad)


def test_an_upload_is_deleted_once_read(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "uploads"))
    up = tmp_path / "uploads" / "abc123" / "t.json"
    up.parent.mkdir(parents=True)
    up.write_text("{}")
    elsewhere = tmp_path / "mine.json"
    elsewhere.write_text("{}")
    session.drop_upload(str(elsewhere))  # only Gradio's uploads
    session.drop_upload(str(up))
    assert elsewhere.exists() and not up.exists() and not up.parent.exists()
    assert Path(tmp_path / "uploads").is_dir()

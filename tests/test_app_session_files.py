"""No file of a session outlives it, and a session keeps one export of each kind: the race's HTML export and the
trace's JSON export are written into Gradio's upload folder (served from there as they are, never copied into
its cache) and deleted when the next one replaces them or the session ends. Real runs of tiny models through
the page's own callbacks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("gradio")

from app import callbacks, session  # noqa: E402
from app_fixtures import TinyLoader, race_run, racer, tiny_engine  # noqa: E402,F401  (racer: the Race tab's fixture)


@pytest.fixture
def uploads(tmp_path, monkeypatch) -> Path:
    """Gradio's upload folder (and cache), this test's own."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    return tmp_path / "gradio"


def _exports(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{session.EXPORT_PREFIX}*/*")) if folder.is_dir() else []


def test_race_exports_are_replaced_and_go_with_the_session(racer, uploads):  # noqa: F811
    """Before: each race's export went to a fresh folder under /tmp, which the download button copied into Gradio's
    cache; neither was ever deleted (+96.6 MB for 10 races, still there an hour later)."""
    st = session.new_state()
    first = race_run(racer, ["ar", "dflash"], n=8, st=st)[1][-1][2]["value"]
    assert Path(first).parent.parent == uploads.resolve(), first   # served as it is: no cache copy
    second = race_run(racer, ["ar", "dflash"], n=8, st=st)[1][-1][2]["value"]
    assert not os.path.exists(first) and _exports(uploads) == [Path(second)]
    racer.sessions.release(st)
    assert _exports(uploads) == [] and list(uploads.iterdir()) == []


def test_trace_exports_are_replaced_and_go_with_the_session(uploads):
    """Each run's (and each loaded trace's) export replaces the last; a session ended leaves none. Before: a run
    replacing a trace dropped the old export's path and kept the file until the server stopped."""
    sessions = session.Sessions()
    cb = callbacks.Callbacks(TinyLoader(tiny_engine("llama")), [], sessions)
    st = session.new_state()
    seen = []
    for prompt in ("hi, j.", "abc dea?"):
        list(cb.on_run(prompt, "reanchor", "earliest", 0.0, 0, 8, "all", "all", None, st))
        seen.append(st["trace_file"])
        assert _exports(uploads) == [Path(st["trace_file"])]
    cb.on_upload(seen[-1], st)   # the trace loaded again: its own copy replaces the run's export
    assert _exports(uploads) == [Path(st["trace_file"])] and st["trace_file"] not in seen
    sessions.release(st)
    assert _exports(uploads) == []


def test_a_load_claims_only_an_upload_of_its_own(uploads):
    """A load request may name any file of Gradio's upload folder; its session's end deletes only what Gradio's
    upload route wrote and the name check passed. Before: the claim came first, so a load naming another session's
    export, a file of Gradio's cache, or an upload that is no .json got it deleted when the naming session ended."""
    sessions = session.Sessions()
    sessions.uploaded = set()   # Gradio's Blocks.upload_file_set: the files its upload route wrote
    cb = callbacks.Callbacks(None, [], sessions)
    other = session.new_state()
    list(callbacks.Callbacks(TinyLoader(tiny_engine("llama")), [], sessions).on_run(
        "hi, j.", "reanchor", "earliest", 0.0, 0, 8, "all", "all", None, other))
    theirs = Path(other["trace_file"])   # another session's export, in the upload folder
    cached = uploads / "0123abcd" / "cached.json"   # a file Gradio keeps there, not an upload
    cached.parent.mkdir()
    cached.write_text(theirs.read_text())
    not_json = uploads / "4567cdef" / "notes.txt"   # an upload, not a trace
    not_json.parent.mkdir()
    not_json.write_text("x")
    mine = uploads / "89abcdef" / "mine.json"   # this session's upload
    mine.parent.mkdir()
    mine.write_text(theirs.read_text())
    sessions.uploaded.update({str(not_json), str(mine)})
    st = session.new_state()
    for path in (theirs, cached, not_json, mine):
        try:
            cb.on_upload({"path": str(path)}, st)
        except Exception as e:   # the .txt: refused, naming it
            assert "'notes.txt' is not a .json file" in str(e), e
    sessions.release(st)
    assert theirs.exists() and cached.exists() and not_json.exists() and not mine.exists()

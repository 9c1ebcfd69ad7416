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
from app_fixtures import tiny_engine  # noqa: E402
from test_app_round_views import _Loader  # noqa: E402  (a tiny engine as the page's loader)
from test_race import _race, racer  # noqa: E402,F401  (the Race tab over a real tiny engine)


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
    first = _race(racer, ["ar", "dflash"], n=8, st=st)[1][-1][2]["value"]
    assert Path(first).parent.parent == uploads.resolve(), first   # served as it is: no cache copy
    second = _race(racer, ["ar", "dflash"], n=8, st=st)[1][-1][2]["value"]
    assert not os.path.exists(first) and _exports(uploads) == [Path(second)]
    racer.sessions.release(st)
    assert _exports(uploads) == [] and list(uploads.iterdir()) == []


def test_trace_exports_are_replaced_and_go_with_the_session(uploads):
    """Each run's (and each loaded trace's) export replaces the last; a session ended leaves none. Before: a run
    replacing a trace dropped the old export's path and kept the file until the server stopped."""
    sessions = session.Sessions()
    cb = callbacks.Callbacks(_Loader(tiny_engine("llama")), [], sessions)
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

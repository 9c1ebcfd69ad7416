"""app.views and the page's small inputs under untrusted values: Compare names a loaded trace's unknown mode and
rule "unknown"; the text view of pieces that escape long ("<") stays about 1 MB; old uploads are swept (the session holds its own export)."""
from __future__ import annotations

import json
import pytest

gr = pytest.importorskip("gradio")

from app import session, views  # noqa: E402
from app_fixtures import real_trace  # noqa: E402
from engine.trace import tiled_trace  # noqa: E402


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


def test_old_uploads_are_swept(tmp_path):
    """Uploads needing no session stayed until the server stopped; now each goes UPLOAD_MAX_AGE_S after it
    came (a loaded trace lives on in its session's own export)."""
    import os
    import time

    old, new = tmp_path / "h1" / "old.json", tmp_path / "h2" / "new.json"
    for p in (old, new):
        p.parent.mkdir()
        p.write_text("{}")
    t = time.time() - session.UPLOAD_MAX_AGE_S - 5
    os.utime(old, (t, t))
    uploads = {str(old), str(new)}
    assert session.sweep_uploads(uploads) == 1
    assert not old.exists() and not old.parent.exists() and new.exists() and uploads == {str(new)}


def test_a_loaded_trace_with_any_mode_gets_an_export_of_its_own():
    """The session's export of a loaded trace is named by the engine's words only: a mode with '/' or markup
    (a loaded trace may say anything) made the file name a missing folder, and the load failed."""
    t = json.loads(json.dumps(real_trace()))
    t["config"].update(mode="[x](http://127.0.0.1:1/a/b)", rule="<b>r</b>")
    path = session.export_trace(t)
    assert "unknown-unknown" in path and json.loads(open(path).read())["config"]["mode"] == t["config"]["mode"]


def test_rounds_route_answers_only_its_session_and_view():
    """views.rounds_json, the page's fetch of rounds ahead of a jump: the rounds exactly as a round switch draws them,
    for the token's own session and the view the page holds (its key); an unknown token 404, bad numbers 400 naming
    the field, another view's key or a running trace no rounds (the page's rounds would be another view's)."""
    sessions = session.Sessions()
    st, other = session.new_state(), session.new_state()
    sessions.touch(st)
    sessions.touch(other)
    assert len(st["rounds_token"]) >= 40 and st["rounds_token"] != other["rounds_token"]
    assert sessions.by_token(st["rounds_token"]) is st and sessions.by_token("x" * 43) is None
    st.update(trace=real_trace(), projector=True, phase=5)
    key, n = views.cache_key(st), len(st["trace"]["rounds"])
    payload = json.loads(views.round_outputs(st, 0)[2])
    assert payload["src"] == views.ROUNDS_ROUTE + st["rounds_token"] and payload["n"] == n
    status, body = views.rounds_json(st, key, 1, 3)
    got = json.loads(body)
    assert status == 200 and got["key"] == key and [r["round"] for r in got["rounds"]] == [1, 2, 3][:n - 1]
    for r in got["rounds"]:  # what a round switch to it sends
        sent = json.loads(views.round_outputs(st, r["round"])[2])
        assert (r["caption"], r["fig"]) == (sent["caption"], sent["fig"])
    assert views.rounds_json(None, key, 0, 1)[0] == 404
    for args, field in (((key, "x", 1), "from"), ((key, n, 1), "from"), ((key, -1, 1), "from"), ((key, 0, None), "count"),
                        ((key, 0, 0), "count"), ((key, 0, views.ROUNDS_PER_FETCH + 1), "count"), ((None, 0, 1), "key")):
        status, body = views.rounds_json(st, *args)
        assert status == 400 and json.loads(body)["error"].startswith(field + ":"), (args, body)
    st["projector"] = False  # the view changed: the page's key is stale
    stale = (200, [])
    got = views.rounds_json(st, key, 0, 1)
    assert (got[0], json.loads(got[1])["rounds"]) == stale
    # a run just ended with fewer rounds than the trace the page still shows: its old key asks past our end
    got = views.rounds_json(st, key, n + 5, views.ROUNDS_PER_FETCH)
    assert (got[0], json.loads(got[1])["rounds"]) == stale, got
    st["run"] = object()  # a run under way: no route, its rounds' captions still change
    got = views.rounds_json(st, views.cache_key(st), 0, 1)
    assert (got[0], json.loads(got[1])["rounds"]) == stale and views.rounds_src(st) is None
    st["run"] = None
    sessions.release(st)
    assert sessions.by_token(payload["src"].rsplit("/", 1)[1]) is None

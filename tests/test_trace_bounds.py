"""Every list of a loaded trace within a bound that keeps the server and the page responsive (engine.trace
Limits: prompt ids, token texts), the nesting check over the decoded text whatever the encoding, and very
long traces' timeline drawn as an aggregate (app.plots.timeline_figure)."""
from __future__ import annotations

import json

import pytest

from app_fixtures import real_trace
from engine.trace import EXPLORE, TraceError, load_trace, parse_trace, tiled_trace, validate_trace


def _bytes(t: dict) -> bytes:
    return json.dumps(t, ensure_ascii=False).encode()


def test_prompt_ids_are_bounded():
    t = real_trace()
    long = {**t, "prompt_ids": t["prompt_ids"] * (EXPLORE.prompt_tokens // len(t["prompt_ids"]) + 1)}
    long.pop("prompt_pieces", None)
    with pytest.raises(TraceError, match=rf"^prompt_ids: must hold 0 to {EXPLORE.prompt_tokens} entries"):
        validate_trace(long)


def test_token_texts_are_bounded():
    t = real_trace()
    many = {**t, "token_texts": {**t["token_texts"], **{str(10_000 + i): "x" for i in range(EXPLORE.token_texts)}}}
    with pytest.raises(TraceError, match=rf"^token_texts: holds [\d,]+ entries, over the {EXPLORE.token_texts:,}"):
        validate_trace(many)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32-be"])
def test_nesting_is_checked_on_the_decoded_text(encoding, tmp_path):
    """U+0122 is the bytes 22 01 in UTF-16-LE: a byte scan took its 0x22 for a quote and skipped the brackets
    after it, so a 900-level list in an ignored field loaded (and check-trace said valid)."""
    t = real_trace()
    deep = {**t, "extra": ["\u0122"], "ignored": json.loads("[" * 900 + "]" * 900)}
    text = json.dumps(deep, ensure_ascii=False)
    with pytest.raises(TraceError, match="^trace: nested deeper than 32 levels"):
        parse_trace(text.encode(encoding))
    path = tmp_path / "deep.json"
    path.write_bytes(text.encode(encoding))
    with pytest.raises(TraceError, match="^trace: nested deeper"):
        load_trace(path)
    shallow = json.dumps({**t, "extra": ["\u0122"]}, ensure_ascii=False)
    assert parse_trace(shallow.encode(encoding))["output_ids"] == t["output_ids"]  # other encodings still load


def test_long_traces_timeline_is_an_aggregate():
    """50,000 rounds drew 50,000 bars a part (405,000 page elements, a 104 s freeze in Chromium): past
    TIMELINE_BARS rounds each bar is the mean of a run of rounds, and the totals are kept."""
    from app import plots, records

    t = tiled_trace(real_trace(), 700)
    rounds = t["rounds"]
    assert len(rounds) > 5 * plots.TIMELINE_BARS
    fig = plots.timeline_figure(rounds, view=len(rounds) // 2)
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert bars and all(len(b.x) <= plots.TIMELINE_BARS for b in bars)
    for b in bars:
        key = {"baseline alone": "baseline", "tree branches": "branches", "shifted gain": "shifted",
               "bonus": "bonus"}[b.name]
        total = sum(records.round_lengths(r)[key] for r in rounds)
        widths = b.width if isinstance(b.width, (list, tuple)) else [b.width] * len(b.x)
        assert sum(y * w for y, w in zip(b.y, widths)) == pytest.approx(total, rel=1e-6)
        assert min(b.x) >= 0 and max(b.x) <= len(rounds) - 1  # x stays in rounds: the view frame, clicks
    assert "mean of" in fig.layout.title.text
    short = plots.timeline_figure(rounds[:50])
    assert all(len(b.x) == 50 for b in short.data if b.type == "bar") and "mean of" not in short.layout.title.text

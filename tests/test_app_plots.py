"""Figures and HTML built from REAL round records (the engine over tiny random models):
structure, purity, escaping of hostile token text, payload size."""
from __future__ import annotations

import copy
import json
import re
import statistics
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from app import plots, records, render
from app_fixtures import REPO, XSS_TOKENS, all_real_traces, real_rounds
from helpers import OUR_TAGS, strings_in
from engine.options import MODES
from engine.trace import token_sources

MAX_FIGURE_BYTES = 56 * 1024  # a round's figure (two fit views.MAX_PAYLOAD with their captions)


@pytest.fixture(scope="module")
def traces():
    return all_real_traces()


_rounds = real_rounds


def test_traces_cover_every_branch(traces):
    """The fixtures exercise attached, discarded, multi-site ('all') and shifted-only-gain rounds."""
    shifted = [b for _, r in _rounds(traces) for b in r["shifted"]]
    assert any(b["chosen"] is not None for b in shifted)
    assert any(b["chosen"] is None for b in shifted)
    assert any(len(b["attached"]) > 1 for b in shifted)
    assert any(records.round_lengths(r)["shifted"] > 0 for _, r in _rounds(traces))
    assert {t["config"]["mode"] for t in traces} == set(MODES)
    assert any(records.round_lengths(r)["branches"] > 0 for _, r in _rounds(traces))


def test_round_figure_structure(traces):
    for t, r in _rounds(traces):
        fig = plots.round_figure(r, t["token_texts"])
        s, L = r["anchor_pos"], r["block_size"]
        fates = records.block_fates(r)
        heat = {d.name: d for d in fig.data if d.type == "heatmap"}  # a heatmap per row
        gone = [f for f in fates if f["fate"] != "attached"]
        assert len(heat) == 1 + sum(f["fate"] == "attached" for f in fates) + bool(gone)  # g(0), attached, folded
        cells = lambda h: [k for k, v in enumerate(h.z[0]) if v is not None]  # noqa: E731
        assert cells(heat["g(0)"])[:L] == list(range(L))               # baseline at depth 0..L-1
        for b, f in zip(r["shifted"], fates):
            grey = f["fate"] != "attached"  # no site, the rule, or none of its tokens verified (budget)
            assert grey == (b["chosen"] is None) or f["fate"] == "budget"
            if grey:
                continue
            row = next(h for name, h in heat.items() if name.startswith(f"g({b['d']}) at "))
            got = cells(row)
            assert got == list(range(b["chosen"], b["chosen"] + len(b["tokens"])))[: len(got)] and got[0] == b["chosen"]
        if gone:  # the discarded blocks folded into one row: a grey cell at each one's native index, labelled d
            fold = heat["discarded blocks"]
            assert cells(fold) == sorted({f["d"] for f in gone if f["d"] < len(fold.z[0])})
            assert [t for t in fold.text[0] if t] == [str(f["d"]) for f in sorted(gone, key=lambda f: f["d"])
                                                      if f["d"] < len(fold.z[0])]
            opened = {d.name: d for d in plots.round_figure(r, t["token_texts"], unfold=True).data
                      if d.type == "heatmap"}
            for f in gone:  # unfolded: each at its native index
                assert cells(opened[f"g({f['d']}) ✗ {records.FATE_SHORT[f['fate']]}"])[0] == f["d"]
        # every trie node drawn once, at x = anchor_pos + depth
        node_traces = [d for d in fig.data if d.type == "scatter" and d.mode == "markers+text" and d.name != "bonus"]
        xs = sorted(x for d in node_traces for x in d.x)
        assert xs == sorted(s + k for k in r["trie"]["depths"])
        acc = next(d for d in fig.data if d.name == "accepted path")
        cut = len(r["new_tokens"]) <= r["accepted"]
        assert len(acc.x) == len(r["accepted_nodes"]) + (0 if cut else 1)
        assert (any(d.name == "bonus" for d in fig.data)) == (not cut)
        sites = [d for d in fig.data if d.name == "matching site"]
        # attached blocks only: their attached sites and at most MAX_OTHER_SITES others each (issue 15)
        n_sites = sum(len([t for t in b["sites"] if t in b["attached"]])
                      + min(plots.MAX_OTHER_SITES, len([t for t in b["sites"] if t not in b["attached"]]))
                      for b, f in zip(r["shifted"], records.block_fates(r)) if f["fate"] == "attached")
        assert (len(sites[0].x) if sites else 0) == n_sites
        ext = [sh for sh in fig.layout.shapes if sh.type == "rect"]
        past = max(r["trie"]["depths"]) >= L  # the band only where the trie reaches past g(0)'s block
        assert bool(ext) == past and (not ext or ext[0].x0 == s + L - 0.5)


def test_figures_are_pure(traces):
    t = traces[1]
    for r in t["rounds"][:10]:
        before = copy.deepcopy(r)
        texts = copy.deepcopy(t["token_texts"])
        a = plots.round_figure(r, t["token_texts"]).to_json()
        b = plots.round_figure(r, t["token_texts"]).to_json()
        assert a == b
        assert r == before and t["token_texts"] == texts
        assert json.loads(plots.round_figure_json(r, t["token_texts"])) == json.loads(a)  # the fast path
    assert plots.timeline_figure(t["rounds"]).to_json() == plots.timeline_figure(t["rounds"]).to_json()


def test_timeline_splits_accepted_length(traces):
    for t in traces:
        fig = plots.timeline_figure(t["rounds"])
        base, branches, gain, bonus = (list(d.y) for d in fig.data)
        for i, r in enumerate(t["rounds"]):
            assert base[i] + branches[i] + gain[i] == r["accepted"]
            assert base[i] + branches[i] + gain[i] + bonus[i] == len(r["new_tokens"])
            assert branches[i] == 0 or t["config"]["mode"] in ("ddtree", "reanchor-tree")
            from engine.analyses import baseline_accepted
            assert base[i] == baseline_accepted(r)


def test_token_rounds_cover_the_output(traces):
    for t, r in _rounds(traces):
        assert len(token_sources(r)) == len(r["new_tokens"])
    for t in traces:
        assert len(records.token_rounds(t)) == len(t["output_ids"])


def _hostile(trace):
    ids = sorted(int(k) for k in trace["token_texts"])
    return {str(i): XSS_TOKENS[j % len(XSS_TOKENS)] for j, i in enumerate(ids)}


def test_plot_text_is_escaped(traces):
    """Token text reaches Plotly only html-escaped: no tag, no '$' (MathJax), whitespace visible."""
    for t in traces[:4]:
        texts = _hostile(t)
        for r in t["rounds"]:
            fig = json.loads(plots.round_figure(r, texts).to_json())
            for s in strings_in(fig):
                bare = OUR_TAGS.sub("", s)
                assert "<" not in bare and ">" not in bare, s
                assert "$" not in s, s
        fig = json.loads(plots.timeline_figure(t["rounds"]).to_json())
        assert all("<script" not in s for s in strings_in(fig))
    cell = plots.round_figure(traces[0]["rounds"][0], {k: "<script>x</script>" for k in traces[0]["token_texts"]})
    label = cell.data[0].text[0][0]  # cut to the cell's width (app.tokentext.tok_fit), then escaped
    assert label.startswith("&lt;scri") and label.endswith("…") and "<" not in label, label


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.update(a for a, _ in attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_text_view_is_escaped_and_complete(traces):
    from app.tokentext import piece, trace_pieces

    for t in traces[:3]:
        texts = _hostile(t)  # as an older trace (no pieces) with hostile token texts shows them
        old = {**{k: v for k, v in t.items() if not k.endswith("_pieces")}, "token_texts": texts}
        html = render.text_view(*trace_pieces(old), t["rounds"])
        p = _Tags()
        p.feed(html)
        assert set(p.tags) <= {"div", "span"}
        assert p.attrs <= {"class", "id", "data-r", "data-k", "title"}
        generated = "".join(piece(texts, i) for i in t["output_ids"])
        prompt = "".join(piece(texts, i) for i in t["prompt_ids"][-render.PROMPT_TAIL:])
        assert "".join(p.text) == prompt + generated
        # one span per generated token, with its round
        spans = re.findall(r"data-r='(-?\d+)' data-k='(\d+)'", html)
        assert [int(k) for _, k in spans] == list(range(len(t["output_ids"])))
        assert [int(r) for r, _ in spans] == records.token_rounds(t)


def test_metrics_view_escapes():
    out = render.metrics_view({"tau": 2.5, "rounds": 3, "tokens_per_s": 10.0}, status="<img src=x onerror=1>")
    assert "<img" not in out and "&lt;img" in out


def _record_payload(name: str, sizes: list[int], build_ms: list[float]) -> None:
    from app_fixtures import OUTPUT

    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / "figure_payload.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = {"rounds": len(sizes), "max_bytes": max(sizes), "median_bytes": statistics.median(sizes),
                  "median_build_ms": round(statistics.median(build_ms), 2)}
    path.write_text(json.dumps(data, indent=1))


def _measure(pairs) -> tuple[list[int], list[float]]:
    sizes, ms = [], []
    for t, r in pairs:
        t0 = time.perf_counter()
        sizes.append(len(plots.round_figure(r, t["token_texts"]).to_json()))
        ms.append((time.perf_counter() - t0) * 1000)
    return sizes, ms


def test_figure_payload_is_small(traces):
    sizes, ms = _measure(_rounds(traces))
    _record_payload("tiny models", sizes, ms)
    assert max(sizes) <= MAX_FIGURE_BYTES, max(sizes)


def test_example_traces_load_and_fit_payload():
    """The shipped example traces (embedded model) validate and every round figure stays small."""
    from app.session import example_traces, load_trace_file

    found = example_traces()
    assert found, "assets/traces/ holds no example trace"
    pairs = []
    for _, path in found:
        t = load_trace_file(path)
        assert t["rounds"] and t["config"]["mode"] == "reanchor"
        assert (REPO / "assets" / "traces") in Path(path).parents
        pairs += [(t, r) for r in t["rounds"]]
    sizes, ms = _measure(pairs)
    _record_payload("example traces (embedded model)", sizes, ms)
    assert max(sizes) <= MAX_FIGURE_BYTES, max(sizes)


def test_analyses_adapter(traces):
    from app import analysis

    res = analysis.compute(traces[1])  # rule "all"
    assert set(res) == set(analysis.NAMES)
    assert all("unavailable" not in v for v in res.values() if isinstance(v, dict))
    json.dumps(res)  # JSON-ready (gr.JSON)
    h, g = analysis.figures(res)
    assert h.data and sum(h.data[0].y) == len(traces[1]["rounds"])


def test_round_payload_prefetches_within_the_size_budget():
    """The round update carries the next round only while the whole payload fits MAX_PAYLOAD."""
    from app import session, views

    found = session.example_traces()
    if not found:
        pytest.skip("no example traces installed")
    prefetched = 0
    for _, path in found:
        st = session.new_state()
        st["trace"] = session.load_example(path)
        n = len(st["trace"]["rounds"])
        for i in range(n):
            raw = views.round_outputs(st, i)[2]
            p = json.loads(raw)
            assert p["round"] == i and p["fig"]["data"]
            if p["next"] is not None:
                prefetched += 1
                assert p["next"]["round"] == i + 1 and len(raw) <= views.MAX_PAYLOAD
            elif i + 1 < n:  # left out only because it did not fit (its figure and caption as the page gets them)
                rec = st["trace"]["rounds"][i + 1]
                nxt = plots.round_figure_json(rec, st["trace"]["token_texts"],
                                              depth_cap=records.depth_cap(st["trace"], rec),
                                              prev=st["trace"]["rounds"][i])
                cap = json.dumps(views.round_outputs(st, i + 1)[1])
                assert len(raw) + len(nxt) + len(cap) + len('{"round":,"caption":,"fig":}') > views.MAX_PAYLOAD
    assert prefetched > 0


def test_round_caption_shows_the_rounds_own_stage_times():
    """The caption gives draft and verify, then the round's own work by stage (its trace's stages_ms)."""
    from app_fixtures import real_trace
    t = real_trace("llama", "ddtree", "earliest", "hi, j.", 12, 0, 0.0)
    r = t["rounds"][0]
    cap = re.sub(r"<[^>]+>", "", render.round_caption(r, 0, len(t["rounds"])))  # as read: the glossary's titles off
    st = r["stages_ms"]
    for k in ("build", "accept", "record"):
        assert f", {k} {st[k]:.1f} ms" in cap, (k, cap)
    assert f"draft {st['draft']:.1f} ms, verify {st['verify']:.1f} ms" in cap

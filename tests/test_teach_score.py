"""Teachable rounds anywhere (issue 55, item 4): app.records.teach_score ranks the rounds of any trace, shipped or
freshly run, by what a class can follow; the example traces open on their best, whose every step-through phase fits
one projector screen (drawn by app.plots in the projector setting: at most FIT_HEIGHT px, labels whole)."""
from __future__ import annotations

import copy
import json

import pytest

from app import plots, records
from app_fixtures import REPO, real_trace, tiny_engine

EXAMPLES = sorted((REPO / "assets" / "traces").glob("*.json"))
# Where each example opens (docs/teaching.md walks them; docs/algorithm.md's worked round is math's)
OPENS = {"math-speed-reanchor": 3, "code-fibonacci-reanchor": 5, "chat-focus-reanchor": 18}


def phase_figures(trace: dict, k: int):
    """Round k's figure in each step-through phase, projector on: (phase, figure parts)."""
    rounds = trace["rounds"]
    for phase in range(1, 10):
        yield phase, plots.round_figure_parts(rounds[k], trace["token_texts"], None, records.depth_cap(trace, rounds[k]),
                                              prev=rounds[k - 1] if k else None, phase=phase, projector=True)


def labels(fig: dict) -> list[str]:
    """Every token label the figure writes: grid cells and trie nodes (not the row names nor the branch tags)."""
    out = [x for t in fig["data"] if t["type"] == "heatmap" and t.get("meta") != "fold" for x in t["text"][0] if x]
    return out + [x for t in fig["data"] if t.get("meta") in ("trie", "trie-g0", "path") and t.get("mode") == "markers+text"
                  for x in t["text"] if x]


@pytest.mark.skipif(not EXAMPLES, reason="no example traces installed")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_opens_on_its_best_round_and_it_fits_a_projector(path):
    trace = json.loads(path.read_text(encoding="utf-8"))
    rounds, texts = trace["rounds"], trace["token_texts"]
    ranked = records.teachable_rounds(rounds, texts)
    best = records.most_instructive(rounds, texts)
    assert ranked and best[0] == ranked[0][0] == OPENS[path.stem], (ranked, best)
    assert best[1].startswith("a real shift the target accepted")
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    rec = rounds[best[0]]
    assert any(site != d and k > 0 for d, site, k in records.shifted_acceptance(rec))
    for phase, fig in phase_figures(trace, best[0]):
        assert fig["layout"]["height"] <= plots.FIT_HEIGHT, (phase, fig["layout"]["height"])
        shown = labels(fig)
        cut = [x for x in shown if x.endswith("…")]
        assert shown and len(cut) <= 0.05 * len(shown), (phase, cut)


def test_the_score_ranks_a_fresh_run_of_the_tiny_models():
    """A run that is no shipped trace (the tiny Qwen3 target and drafter): its real accepted shifts are ranked, the
    trace opens on the best, and a round without one is not ranked."""
    trace = real_trace("qwen3", "reanchor", "earliest", "hi, j.", 96, 0, 0.0)
    rounds, texts = trace["rounds"], trace["token_texts"]
    ranked = records.teachable_rounds(rounds, texts)
    assert ranked, "the tiny run has no real accepted shift: pick another prompt"
    real = {i for i, rec in enumerate(rounds) if any(site != d for d, site, k in records.shifted_acceptance(rec))}
    assert {i for i, _ in ranked} == real
    assert records.most_instructive(rounds, texts)[0] == ranked[0][0]
    assert all(records.teach_score(rec, texts) is None for i, rec in enumerate(rounds) if i not in real)
    for phase, fig in phase_figures(trace, ranked[0][0]):
        assert fig["layout"]["height"] <= plots.FIT_HEIGHT, (phase, fig["layout"]["height"])


def test_a_bigger_figure_or_longer_tokens_score_lower():
    """The same round with 40 more trie branches scores lower, and so does one whose tokens are long words; a pure
    function of the round (and the texts)."""
    path = REPO / "assets" / "traces" / "code-fibonacci-reanchor.json"
    trace = json.loads(path.read_text(encoding="utf-8"))
    rec, texts = trace["rounds"][OPENS[path.stem]], trace["token_texts"]
    base = records.teach_score(rec, texts)
    assert base == records.teach_score(copy.deepcopy(rec), texts)
    bushy = copy.deepcopy(rec)
    t = bushy["trie"]
    for _ in range(40):  # leaves under the anchor, no path through them
        t["tokens"].append(t["tokens"][1])
        t["parents"].append(0)
        t["depths"].append(1)
        t["provenance"].append([])
    assert records.teach_score(bushy, texts) < base
    wordy = {k: "␣extraordinarily" for k in texts}
    assert records.teach_score(rec, wordy) < base
    assert records.teach_score(rec) >= base  # without texts, no token is known to be long


@pytest.mark.parametrize("mode", ["ddtree", "reanchor-tree"])
def test_every_round_of_a_tree_run_fits_a_projector_in_every_phase(mode):
    """A tree mode's trie (the embedded target's 32-node trees: up to ~30 branches; here 96 nodes of the tiny models)
    has more branches than a projector phase on the trie alone has rows for (16 at MIN_SLOT_PX): phases 6-7 draw the
    branches through the accepted chain and the retained path, then the first ones, and the title says how many of
    how many; every phase of every round within FIT_HEIGHT."""
    from app.plots.trie import leaves
    from engine.decode import DecodeConfig

    trace = tiny_engine("qwen3", 0).generate("hi, j.", DecodeConfig(mode=mode, max_new_tokens=32, max_trie_nodes=96))
    rounds = trace["rounds"]
    cut = 0
    for k, rec in enumerate(rounds):
        for phase, fig in phase_figures(trace, k):
            assert fig["layout"]["height"] <= plots.FIT_HEIGHT, (k, phase, fig["layout"]["height"])
            shown = labels(fig)
            assert len([x for x in shown if x.endswith("…")]) <= 0.05 * len(shown), (k, phase, shown)
        if leaves(rec) > plots.FIT_BRANCHES:
            cut += 1
            fitted = plots.fitted_trie(rec, plots.FIT_BRANCHES)
            assert leaves(fitted) == plots.FIT_BRANCHES
            kept = [fitted["trie"]["tokens"][i] for i in fitted["accepted_nodes"]]
            assert kept == [rec["trie"]["tokens"][i] for i in rec["accepted_nodes"]]
            assert (plots.retained_path(fitted)[0] == plots.retained_path(rec)[0])
            title = dict(phase_figures(trace, k))[6]["layout"]["title"]["text"]
            assert f"{plots.FIT_BRANCHES} of {leaves(rec)} branches drawn" in title, title
    assert cut, "no round with more branches than a phase holds: the cut went untested"

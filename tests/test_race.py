"""The Race tab's logic without a browser (app/race.py, app/race_view.py): real runs of a tiny engine through the
Race callbacks (a ModelLoader holding a real Engine, as its load leaves it), the payload's marks and verdicts,
the demo preset from a profile, Stop between lanes, the export file."""
from __future__ import annotations

import argparse
import json
import re

import gradio as gr
import pytest

from app import loader as L
from app import race, race_view, session
from engine.decode import Engine
from engine.decode.cost import DRAFT_SIZES, VERIFY_SIZES
from app_fixtures import RACE_PROMPT, race_run, racer, real_trace  # noqa: F401  (racer: the fixture)
from tiny import tiny_models


def test_race_streams_each_lane_then_compares_with_plain_decoding(racer):
    st, outs, final = race_run(racer, ["dflash", "ar", "reanchor"])
    assert [ln["label"] for ln in final["lanes"]] == ["ar", "dflash", "reanchor"]  # the reference first
    live = [json.loads(o[0]) for o in outs if isinstance(o[0], str) and json.loads(o[0])["phase"] == "live"]
    for i, label in enumerate(["ar", "dflash", "reanchor"]):
        seen = [p["lanes"][i]["tokens"] for p in live if p["lanes"][i]["status"] == "running"]
        assert len(set(seen)) >= 2 and seen == sorted(seen), (label, seen)  # it grew while decoding
    # interleaved round by round: in one live update, every lane that has not ended has decoded (the first update
    # comes after one round of each), and a lane's passes stay within one round of any other running lane's
    both = [p for p in live if all(ln["status"] == "running" for ln in p["lanes"])]
    assert both and all(ln["tokens"] > 0 for p in both for ln in p["lanes"]), both[:1]
    for q in both:
        passes = [ln["passes"] for ln in q["lanes"]]
        assert max(passes) - min(passes) <= 1, passes
    # each lane's clock is its own: its tokens/s is its tokens over its own time (the engine's wall time would
    # count the other lanes' rounds too)
    for lane, t in zip(final["lanes"], st["race"]["traces"]):
        # wall_s is shown to the ms: a tiny model's lane of ~0.04 s is ±1% by that rounding alone
        fastest, slowest = lane["tokens"] / max(lane["wall_s"] - 5e-4, 1e-9), lane["tokens"] / (lane["wall_s"] + 5e-4)
        assert slowest - 0.005 <= lane["tps"] <= fastest + 0.005, lane
        assert lane["wall_s"] < t["stats"]["wall_s"], (lane["wall_s"], t["stats"]["wall_s"])
    ar = final["lanes"][0]
    for lane in final["lanes"][1:]:
        assert lane["ids"] == ar["ids"] and lane["same"] is True and lane["diff"] is None
        assert lane["speedup"] == round(lane["tps"] / ar["tps"], 2)
        assert lane["marks"][-1][2] == lane["tokens"] == len(lane["pieces"]) == len(lane["src"])
        assert lane["passes"] <= ar["passes"]   # (a random tiny drafter may gain nothing)
    assert ar["passes"] == ar["tokens"] == 24 and set(ar["src"]) == {"rx-x"}   # plain decoding: target tokens
    assert st["race"]["traces"][1]["config"]["calibration"] == "fixed"
    path = outs[-1][2]["value"]
    assert path.endswith(".html")
    html = open(path, encoding="utf-8").read()
    from app.page import PLOTLY_JS   # inlined whole (its own text names a CDN for map data no race draws)

    assert PLOTLY_JS.read_text(encoding="utf-8") in html
    ours = html.replace(PLOTLY_JS.read_text(encoding="utf-8"), "")
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|https?://", ours)
    assert "Content-Security-Policy" in ours and "default-src 'none'" in ours   # nothing may be fetched
    data = json.loads(re.search(r"id='race-data'>(.*?)</script>", html, re.S)[1])
    assert [ln["pieces"] for ln in data["lanes"]] == [ln["pieces"] for ln in final["lanes"]]


def test_a_differing_lane_names_its_first_differing_token():
    ref = {"status": "done", "tps": 10.0, "ids": [1, 2, 3, 4], "pieces": ["a", "b", "c", "d"]}
    other = {"status": "done", "tps": 12.0, "ids": [1, 2, 9, 4], "pieces": ["a", "b", "X", "d"]}
    race_view.verdicts([ref, other], 0)
    assert other["same"] is False and other["diff"] == {"at": 2, "ref": "c", "lane": "X"}
    assert other["speedup"] == 1.2
    assert race_view.first_difference([1, 2], [1, 2, 3]) == 2 and race_view.first_difference([1], [1]) is None


def test_a_lane_cut_by_the_time_limit_is_judged_on_the_tokens_both_made():
    """Cut short by --run-seconds, a lane's text is shorter, not different: same over the common tokens; a real
    difference inside them is still named."""
    ref = {"status": "done", "tps": 10.0, "ids": [1, 2, 3, 4], "pieces": ["a", "b", "c", "d"]}
    cut = {"status": race_view.CUT, "tps": 12.0, "ids": [1, 2], "pieces": ["a", "b"]}
    bad = {"status": race_view.CUT, "tps": 12.0, "ids": [1, 7], "pieces": ["a", "X"]}
    race_view.verdicts([ref, cut, bad], 0)
    assert cut["same"] is True and cut["cut"] is True and cut["speedup"] == 1.2
    assert bad["same"] is False and bad["diff"] == {"at": 1, "ref": "b", "lane": "X"}
    done = {"status": "done", "tps": 12.0, "ids": [1, 2], "pieces": ["a", "b"]}   # ended early, not cut: differs
    race_view.verdicts([ref, done], 0)
    assert done["same"] is False and done["cut"] is False


def test_the_time_limit_cuts_a_lane_and_the_race_goes_on(racer, monkeypatch):
    """A lane the per-run time limit ends says so, even in its prefill (no token: an empty lane, no verdict, not
    the race's end with a traceback), and the next lane still runs."""
    monkeypatch.setattr(session, "RUN_SECONDS", 0.0)   # every lane's timer fires at once: cut in the prefill
    _, _, final = race_run(racer, ["ar", "dflash"], n=200)
    lanes = final["lanes"]
    assert [ln["status"] for ln in lanes] == [race_view.CUT, race_view.CUT], [ln["status"] for ln in lanes]
    assert final["phase"] == "done" and [ln["tokens"] for ln in lanes] == [0, 0]
    assert lanes[1]["same"] is None and lanes[1]["speedup"] is None


def test_stop_ends_every_running_lane(racer):
    """The lanes run interleaved: Stop ends each at its next round; every lane says "stopped", none gets a ×N."""
    st, _, final = race_run(racer, ["ar", "dflash", "reanchor"], n=200,
                         stop_after=lambda p: p["lanes"][1]["tokens"] >= 3)
    statuses = [ln["status"] for ln in final["lanes"]]
    assert statuses == ["stopped"] * 3, statuses
    assert final["phase"] == "stopped" and st["run"] is None
    assert all(0 < ln["tokens"] < 200 and ln["speedup"] is None for ln in final["lanes"]), final["lanes"]


def test_race_inputs_are_checked(racer):
    for lanes, what in ((["ar"], "pick 2 to 4"), (["ar", "warp"], "'warp' not one of"),
                        (["ar", "dflash", "ddtree", "reanchor", "reanchor-tree"], "pick 2 to 4")):
        with pytest.raises(gr.Error, match=what):
            list(racer.on_race(RACE_PROMPT, lanes, 16, True, "float32", session.new_state()))
    with pytest.raises(gr.Error, match="Max new tokens: a race runs at most"):
        list(racer.on_race(RACE_PROMPT, ["ar", "dflash"], race.RACE_MAX_NEW + 1, True, "float32", session.new_state()))
    with pytest.raises(gr.Error, match="Prompt"):
        list(racer.on_race(" ", ["ar", "dflash"], 16, True, "float32", session.new_state()))
    with pytest.raises(gr.Error, match="Precision: 'float16' not one of: float32, bfloat16"):
        list(racer.on_race(RACE_PROMPT, ["ar", "dflash"], 16, True, "float16", session.new_state()))


def _m(label, tps, dtype="float32", drafter="DFlash"):
    return {"dtype": dtype, "drafter": drafter, "label": label, "tps": tps}


def test_demo_preset_is_the_fastest_exact_configuration_measured():
    """The preset from the calibration race's tokens/s (draft cost included): the fastest float32 configuration,
    its drafter and its group's two fastest modes beside plain decoding; bfloat16 only when clearly faster, saying
    by how much; the figures behind the note's one sentence."""
    measured = [_m("ar", 10.0), _m("ddtree-auto", 13.4), _m("reanchor-tree-auto", 13.1), _m("dflash", 11.0),
                _m("ddtree-auto", 14.0, "bfloat16"), _m("dflash", 12.0, "bfloat16"),
                _m("ddtree", 12.0, drafter="DSpark"), _m("dflash", 9.5, drafter="Domino")]
    dtype, drafter, lanes, why, figures = race.demo_preset(measured, "float32", "DFlash")
    assert (dtype, drafter, lanes) == ("float32", "DFlash", ["ar", "ddtree-auto", "reanchor-tree-auto"]), why
    assert "1.34× float32 plain decoding" in why and "(exact)" in why and "\n" not in why
    assert "| ddtree | DSpark | float32 | 12.0 | 1.20× |" in figures and "| dflash | Domino | float32 | 9.5 | 0.95× |" \
        in figures and figures.count("\n| ") == len(measured) - 1   # a row a candidate
    # a clearly faster bfloat16 configuration beside an exact win (1.34x plain decoding): the preset stays exact,
    # the note names the faster one and by how much
    fast_bf16 = measured + [_m("reanchor-tree-auto", 16.0, "bfloat16")]   # 16.0 / 13.4 = 1.19x: clearly faster
    dtype, drafter, lanes, why, _ = race.demo_preset(fast_bf16, "float32", "DFlash")
    assert (dtype, lanes) == ("float32", ["ar", "ddtree-auto", "reanchor-tree-auto"]), why
    assert "(exact)" in why and "reanchor-tree-auto in bfloat16 ran 1.19× faster still, not exact" in why, why
    # no exact win (1.08x plain decoding): the clearly faster bfloat16 one, saying by how much
    slow_f32 = [_m("ar", 10.0), _m("ddtree-auto", 10.8), _m("ddtree-auto", 14.0, "bfloat16"), _m("dflash", 12.0, "bfloat16")]
    dtype, drafter, lanes, why, _ = race.demo_preset(slow_f32, "float32", "DFlash")
    assert (dtype, lanes) == ("bfloat16", ["ar", "ddtree-auto", "dflash"]), why
    assert "(not exact)" in why and "1.30× the best exact configuration (ddtree-auto in float32)" in why, why
    other = [_m("ar", 10.0), _m("ddtree-auto", 11.0), _m("ddtree", 15.0, drafter="DSpark"), _m("dflash", 12.0, drafter="DSpark")]
    assert race.demo_preset(other, "float32", "DFlash")[:3] == ("float32", "DSpark", ["ar", "ddtree", "dflash"])
    dtype, drafter, lanes, why, figures = race.demo_preset(None, "float32", "DFlash")   # not measured yet
    assert (dtype, drafter, lanes, figures) == ("float32", "DFlash", race.AUTO_LANES, "") and "not measured yet" in why
    assert race.demo_preset([_m("ar", 10.0)], "bfloat16", "x")[:3] == ("bfloat16", "x", race.AUTO_LANES)
    assert race.calibration_lanes(["float32", "bfloat16"], ["DFlash", "DSpark"]) == [   # a group per weights
        [(d, "DFlash", m) for m in ["ar", *race.START_MODES[d]]] for d in ("float32", "bfloat16")] + [
        [("float32", "DSpark", m) for m in ["ar", *race.OTHER_MODES]]]
    # each group against its own plain decoding, bfloat16 scaled by its plain decoding over float32's
    grouped = [{**_m("ar", 10.0), "group": 0}, {**_m("ddtree-auto", 13.0), "group": 0},
               {**_m("ar", 5.0, "bfloat16"), "group": 1}, {**_m("ddtree-auto", 8.0, "bfloat16"), "group": 1},
               {**_m("ar", 4.0), "group": 2}, {**_m("ddtree", 6.0, drafter="DSpark"), "group": 2}]
    dtype, drafter, lanes, why, figures = race.demo_preset(grouped, "float32", "DFlash")
    assert (dtype, drafter) == ("float32", "DSpark") and "1.50× float32 plain decoding" in why, why   # 6 / 4
    assert "| ddtree-auto | DFlash | bfloat16 | 8.0 | 0.80× |" in figures, figures   # 8 / 5 * 5 / 10
    assert race.badge_words("float32") == "plain decoding" and race.versus("bfloat16") == "plain decoding in bfloat16"
    assert race.badge_words("bfloat16") == "plain decoding in bfloat16"   # one line: the caveat is in the note
    assert "Not exact" in race.precision_note("bfloat16") and race.precision_note("float32") == ""
    assert race.lane_config("ddtree-auto") == ("ddtree", "earliest", None, "auto")
    assert race.lane_config("reanchor-tree-auto") == ("reanchor-tree", "earliest", "auto", "auto")
    assert race.lane_config("ar") == ("ar", "earliest", None, None)


def test_a_bfloat16_race_runs_every_lane_on_the_bfloat16_copy(racer):
    """The precision choice: the loader's bfloat16 copy (built once, profiled), every lane in it, plain decoding
    too; the badge and ×N say what they compare with; the preset reads both profiles."""
    ld = racer.loader
    _, _, before = race_run(racer, ["ar", "dflash"], n=8)   # the float32 engine has run (its taps attached)
    bf16 = ld._lower_precision()
    ld._profile(bf16)
    assert ld.race_engine("bfloat16") is bf16 and ld.race_engine("float32") is ld.engine
    assert str(bf16.models.target.dtype) == "torch.bfloat16" and bf16.models.tokenizer is ld.engine.models.tokenizer
    st, outs, final = race_run(racer, ["ar", "ddtree-auto"], precision="bfloat16")
    assert [ln["label"] for ln in final["lanes"]] == ["ar", "ddtree-auto"]
    live = [json.loads(o[0])["lanes"][1]["tokens"] for o in outs if isinstance(o[0], str)
            and json.loads(o[0])["phase"] == "live" and json.loads(o[0])["lanes"][1]["status"] == "running"]
    assert len(set(live)) >= 2, live   # streamed
    assert [t["config"]["dtype"] for t in st["race"]["traces"]] == ["bfloat16", "bfloat16"]
    assert final["badge"] == race.badge_words("bfloat16") and final["versus"] == "plain decoding in bfloat16"
    assert final["lanes"][1]["same"] is not None and final["lanes"][0]["tokens"] == 24
    ld.race_calibration = race.calibrate(ld, tokens=6)   # the loader's step after the profiles: both precisions
    assert {(m["dtype"], m["label"]) for m in ld.race_calibration} == \
        {(d, m) for d in ("float32", "bfloat16") for m in ["ar", *race.START_MODES[d]]}
    assert all(m["tokens"] == 6 and m["tps"] > 0 for m in ld.race_calibration), ld.race_calibration
    assert "<details>" in racer.preset()[-1] and "Demo preset:" in racer.preset()[-1]
    note, control = racer.on_tab("bfloat16")   # the tab shown: the note, the offered precisions, the choice kept
    assert note == racer.preset()[-1] and control["value"] == "bfloat16"
    assert [v for _, v in control["choices"]] == ["float32", "bfloat16"] and racer.on_tab("float16")[1]["value"] == "float32"
    _, _, again = race_run(racer, ["ar", "dflash"], n=8)   # the float32 engine, copied after its runs, still exact
    assert again["lanes"][1]["ids"] == before["lanes"][1]["ids"] and again["lanes"][1]["same"] is True
    assert racer.loader.race_engine("bfloat16") is bf16


def test_a_bfloat16_race_started_before_the_copy_exists_waits_and_says_so():
    """Run pressed while the loader still measures float32: the bfloat16 race says it waits, then runs on the copy
    once the loader has built it (the generator resumed after the loader's steps: no thread, no sleep)."""
    args = argparse.Namespace(target="tiny", drafter="tiny", device="cpu", dtype="float32", draft_dtype="auto",
                              trust_remote_code=False)
    ld = L.ModelLoader(args)
    ld.engine = Engine(tiny_models("qwen3", 5))
    ld.engines[ld.default_drafter()] = ld.by_dtype["float32"] = ld.engine
    ld.profile_step = (3, 11)   # the float32 profile under way
    racer = race.Race(ld, session.Sessions(), callbacks=None)
    gen = racer.on_race(RACE_PROMPT, ["ar", "ddtree-auto"], 8, True, "bfloat16", session.new_state())
    first = next(gen)
    assert first[1].startswith("waiting for the bfloat16 copy of the models (measuring this machine"), first[1]
    ld._profile(ld._lower_precision())   # the loader's next steps
    ld.profile_step = None
    ld.profiles_done.set()
    final = json.loads([o for o in gen if isinstance(o[0], str)][-1][0])
    assert final["versus"] == "plain decoding in bfloat16" and [ln["tokens"] for ln in final["lanes"]] == [8, 8]


def test_the_loader_measures_the_machine_before_it_says_done(tmp_path):
    """Model load, then the hardware profile, as steps the status line shows; on_phase (which sets the status a
    fresh page paints first) comes once the models are loaded, saying "ready" while the profile runs, and last
    after both; the profile is there for the first auto run (cost.profiled)."""
    from app_fixtures import save_tiny_folders
    from engine.decode.cost import profiled

    target, drafter = save_tiny_folders(tmp_path)
    args = argparse.Namespace(target=str(target), drafter=str(drafter), device="cpu", dtype="float32",
                              draft_dtype="auto", trust_remote_code=False)
    ld, seen = L.ModelLoader(args), []
    ld.on_phase(lambda: seen.append(("done", profiled(ld.engine) is not None, ld.loading, ld.status())))
    ld.start()
    while ld._thread.is_alive():
        if ld.profiling:
            seen.append(("status", ld.status()))
        ld._thread.join(0.02)
    steps = [s[1] for s in seen if s[0] == "status"]
    assert steps and all(s.startswith("ready:") and "measuring this machine" in s for s in steps), steps[:2]
    verify = [s for s in steps if "verify and draft cost" in s]
    assert re.search(rf"verify and draft cost by size, \d+ of {len(VERIFY_SIZES) + len(DRAFT_SIZES)}", verify[-1]), \
        verify[-1]
    # then the race preset's calibration race, in the same loading phase: every candidate lane measured
    assert ld.race_calibration and all(m["tps"] for m in ld.race_calibration), ld.race_calibration
    # then the bfloat16 copy for the race's precision choice, built once and measured in its own step
    first_bf16 = next(i for i, s in enumerate(steps) if "in bfloat16 (the race's bfloat16 lanes)" in s)
    assert first_bf16 > 0 and "in bfloat16" not in steps[0], steps[:2]
    bf16 = ld.race_engine("bfloat16")
    assert str(bf16.models.target.dtype) == "torch.bfloat16" and ld.race_engine("bfloat16") is bf16
    assert profiled(bf16) is not None and profiled(bf16) is not profiled(ld.engine)
    assert set(ld.profile_times) == {"float32", "bfloat16"} and ld.profiles_done.is_set()
    assert seen[-1][:3] == ("done", True, False) and "machine measured" in seen[-1][3]
    assert "float32" in seen[-1][3] and "bfloat16" in seen[-1][3]
    loaded = [s for s in seen if s[0] == "done" and s[2]]   # the phase call while the profile still runs
    assert loaded and loaded[0][3].startswith("ready:") and "measuring this machine" in loaded[0][3], seen[:2]


def test_a_loader_without_the_race_profiles_its_precision_alone(tmp_path):
    """ModelLoader(race=False), as `python -m app.run_bench` loads: the loaded precision profiled, no bfloat16 copy,
    no calibration race (on the embedded model ~1 minute no Explore run reads)."""
    from app_fixtures import save_tiny_folders
    from engine.decode.cost import profiled

    target, drafter = save_tiny_folders(tmp_path)
    args = argparse.Namespace(target=str(target), drafter=str(drafter), device="cpu", dtype="float32",
                              draft_dtype="auto", trust_remote_code=False)
    ld = L.ModelLoader(args, race=False).start()
    ld._thread.join(120)
    assert ld.profiles_done.is_set() and profiled(ld.engine) is not None
    assert set(ld.by_dtype) == {"float32"} and set(ld.profile_times) == {"float32"}
    assert ld.race_calibration is None


def test_the_bfloat16_copy_multiplies_its_heads_as_a_bfloat16_load_does():
    """The copy's parameters keep requires_grad as loaded: without it torch's matmul sent a strided (1, n, d) input
    through bmm with the whole head weight expanded (a copy of it at every draft and verify: the app's bfloat16
    copy drafted 4x slower than a bfloat16 load)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.decode import DecodeConfig
    from engine.models import in_dtype

    fp32 = Engine(tiny_models("qwen3", 0))
    fp32.generate(RACE_PROMPT, DecodeConfig(mode="dflash", max_new_tokens=4))   # the app's order: fp32 runs first
    copy = Engine(in_dtype(fp32.models, torch.bfloat16))
    assert [p.requires_grad for p in copy.models.target.parameters()] == \
        [p.requires_grad for p in fp32.models.target.parameters()]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        copy.generate(RACE_PROMPT, DecodeConfig(mode="ddtree", max_new_tokens=12))
    bmm = sorted({str(e.input_shapes) for e in prof.events() if e.name == "aten::bmm"})
    assert not bmm, bmm


def test_a_reanchor_lane_counts_the_shifted_blocks_it_drafted():
    """The lane's payload says how many shifted blocks the run drafted in all (the page, when none: "no shifted block
    drafted", the lane being the tree alone), from the trace's rounds."""
    trace = real_trace("qwen3", "reanchor-tree", "earliest", "hi, j.", 24)
    drafted = sum(len(r["shifted"]) for r in trace["rounds"])
    assert drafted > 0
    assert race_view.lane_payload("reanchor-tree", "", "done", trace)["drafted"] == drafted
    alone = {**trace, "rounds": [{**r, "shifted": []} for r in trace["rounds"]]}
    assert race_view.lane_payload("reanchor-tree-auto", "", "done", alone)["drafted"] == 0
    assert race_view.lane_payload("reanchor-tree-auto", "", "waiting", None)["drafted"] == 0

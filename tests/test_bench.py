"""The bench end to end on a tiny random target and drafter (CPU, a few prompts and tokens)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine.__main__ import main as cli  # the CLI's own path, in this process: a second python re-imported torch
from engine.bench import main as bench
from engine import sets
from engine import analyses as A
from engine.options import ACCEPTANCE, parse_csv, parse_max_shifted
from engine.errors import InputError
from engine.trace import load_trace
from helpers import BENCH_PROMPTS, bench_dirs  # noqa: F401  (bench_dirs: the fixture)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench_out(bench_dirs):
    tmp, target, drafter, prompts = bench_dirs
    out = tmp / "out"
    assert cli(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                "--max-new-tokens", "20", "--rules", "earliest,all", "--traces", "--out", str(out)]) == 0
    return out


def test_reference_section_and_stage_times(bench_dirs):
    """--reference dflash: dflash_generate ran beside the engine on the bench's prompts (same tokens, same
    accepted lengths round by round, a time per round for each); every row has its stage times; the
    report shows both."""
    from engine.trace import STAGES
    tmp, target, drafter, prompts = bench_dirs
    out = tmp / "out-reference"
    assert cli(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                "--max-new-tokens", "20", "--modes", "dflash,ddtree", "--reference", "dflash", "--reference-repeats", "1",
                "--out", str(out)]) == 0
    bench_out = out
    res = json.loads((bench_out / "results.json").read_text())
    ref = res["reference"]["dflash"]
    assert ref["runs"] == 2 and ref["engine_ms_per_round"] > 0 and ref["reference_ms_per_round"] > 0
    assert ref["ratio"] == pytest.approx(ref["engine_ms_per_round"] / ref["reference_ms_per_round"], rel=0.01)
    assert len(ref["pairs_ms"]) == ref["runs"]
    assert ref["pair_ratio"] == pytest.approx(statistics.median(e / r for e, r in ref["pairs_ms"]), rel=0.01)
    assert [f["same_tokens"] for f in ref["fidelity"]] == [True, True]
    assert all(f["same_accepted"] == f["aligned"] == f["rounds"] > 0 for f in ref["fidelity"])
    assert all(list(r["stages_ms"]) == list(STAGES) for r in res["runs"])
    report = (bench_out / "report.md").read_text()
    assert "## The engine beside the reference loops" in report and "| dflash |" in report
    assert "## Where a round's time goes" in report


def test_reference_one_side_counts_one_pass(bench_dirs, capsys):
    """--one: one side alone, a warm-up pass and a counted one; it prints the counted pass's rounds (what an
    instruction count is divided by): for the engine, the rounds of its own runs on the same prompts."""
    from engine.bench import reference
    from engine.decode import DecodeConfig, Engine
    from engine.models import load_models
    _, target, drafter, _ = bench_dirs
    texts = [p["prompt"] for p in BENCH_PROMPTS]
    args = ["--target", str(target), "--drafter", str(drafter), "--modes", "dflash", "--max-new-tokens", "12"]
    args += [x for t in texts for x in ("--prompt", t)]
    eng = Engine(load_models(str(target), str(drafter)), draft_head_dtype=None)
    cfg = DecodeConfig(mode="dflash", max_new_tokens=12, ignore_eos=True)
    want = sum(len(list(eng.run(eng.encode_prompt(t), cfg))) for t in texts)
    assert reference.main(args + ["--one", "engine"]) == 0
    assert capsys.readouterr().out.split() == ["rounds", str(want)]
    assert reference.main(args + ["--one", "reference"]) == 0
    out = capsys.readouterr().out.split()
    assert out[0] == "rounds" and int(out[1]) > 0
    with pytest.raises(SystemExit):   # one mode only: a count per round of two modes would mix them
        reference.main(args[:4] + ["--modes", "dflash,ddtree", "--one", "engine"])


def test_outputs(bench_out):
    res = json.loads((bench_out / "results.json").read_text())
    labels = ["ar", "dflash", "shifted-fixed", "reanchor", "reanchor-all", "in-block", "extension", "ddtree",
              "reanchor-tree", "reanchor-auto"]
    assert [r["label"] for r in res["runs"]] == labels
    keys = {"set", "mode", "rule", "temperature", "n", "tau", "new_tokens", "tokens_per_s",
            "speedup_vs_ar", "tau_vs_dflash", "speed_vs_dflash", "lossless"}
    for r in res["runs"]:
        assert keys <= set(r) and r["set"] == "tiny" and r["n"] == 2
        assert r["lossless"] == 1.0, r["label"]           # every mode reproduces ar at T=0
        trs = [load_trace(bench_out / "traces" / "tiny" / r["label"] / f) for f in ("p_1.json", "p2.json")]
        # tau in results.json is tau recomputed from the traces' rounds
        rounds = [x for t in trs for x in t["rounds"]]
        assert r["tau"] == pytest.approx(sum(len(x["new_tokens"]) for x in rounds) / len(rounds))
        assert r["new_tokens"] == sum(len(t["output_ids"]) for t in trs)
        assert r["tokens_per_s"] > 0
        assert trs[0]["config"]["mode"] == r["mode"] and trs[0]["config"]["rule"] == r["rule"]
    runs = {r["label"]: r for r in res["runs"]}
    assert runs["ar"]["speedup_vs_ar"] == 1 and runs["dflash"]["tau_vs_dflash"] == 1
    assert runs["reanchor-all"]["rule"] == "all" and runs["reanchor-auto"]["max_shifted"] == "auto"
    assert runs["reanchor-auto"]["max_trie_nodes"] == "auto"
    assert set(res["analyses"]) == {"tiny", "all"}
    s = res["analyses"]["tiny"]["reanchor"]
    assert {"acceptance_histogram", "full_block_share", "post_rejection_agreement", "alignment",
            "earliest_win", "gain_by_offset"} <= set(s)
    assert res["config"]["max_new_tokens"] == 20 and res["config"]["block_size"] == 8
    assert len(res["cost"]["verify"]) > 3 and len(res["cost"]["draft"]) > 3


def test_block_size_flag(bench_dirs):
    """--block-size drafts shorter blocks than the drafter was trained for; every mode stays lossless."""
    tmp, target, drafter, prompts = bench_dirs
    out = tmp / "out-b4"
    assert cli(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                "--max-new-tokens", "20", "--modes", "ar,dflash,reanchor", "--block-size", "4", "--traces",
                "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["block_size"] == 4
    assert all(r["lossless"] == 1.0 for r in res["runs"])
    for label in ("dflash", "reanchor"):
        t = load_trace(out / "traces" / "tiny" / label / "p2.json")
        assert {len(r["baseline"]) for r in t["rounds"]} <= {1, 2, 3, 4} and len(t["rounds"][0]["baseline"]) == 4


def test_bench_at_t1_with_both_acceptance_rules(bench_dirs):
    """The paper's T=1 columns: sampled runs, both acceptance rules side by side, no lossless share."""
    tmp, target, drafter, prompts = bench_dirs
    out = tmp / "out-t1"
    assert cli(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                 "--max-new-tokens", "12", "--modes", "ar,dflash,reanchor", "--temperature", "1",
                 "--acceptance", "speculative,match", "--traces", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    runs = {r["label"]: r for r in res["runs"]}
    assert list(runs) == ["ar", "dflash", "dflash-match", "reanchor", "reanchor-match"]
    assert all(r["lossless"] is None and r["temperature"] == 1.0 for r in runs.values())
    assert runs["reanchor-match"]["tau_vs_dflash"] == pytest.approx(
        runs["reanchor-match"]["tau"] / runs["dflash-match"]["tau"])
    t = load_trace(out / "traces" / "tiny" / "dflash-match" / "p2.json")
    assert t["config"]["acceptance"] == "match" and t["config"]["temperature"] == 1.0
    assert all(r["baseline_q"] is not None for r in t["rounds"] if r["block_size"] >= 2)
    md = (out / "report.md").read_text()
    assert "## Acceptance rule" in md and "lossless share is not defined" in md


def test_report_and_figure(bench_out):
    md = (bench_out / "report.md").read_text()
    for title in ("Table 2", "Table 4", "Table 5", "Table 6", "Table 7", "Table 8", "Table 1",
                  "Figure 2", "Cost budget", "verify ms"):
        assert title in md, title
    html = (bench_out / "fig2_acceptance.html").read_text()
    assert "<script src=" not in html and len(html) > 1_000_000  # plotly.js embedded, no CDN


def test_interrupt_keeps_finished_prompts(bench_dirs, monkeypatch):
    """Ctrl-C during the second prompt: results hold the first prompt only, for every mode."""
    tmp, target, drafter, prompts = bench_dirs
    from engine.decode import Run

    calls = {"n": 0}
    finish = Run.finish

    def flaky(self):
        calls["n"] += 1
        if calls["n"] == 2 + 3:          # 2 warm-up runs, 2 runs of prompt 1, then prompt 2
            raise KeyboardInterrupt
        return finish(self)

    monkeypatch.setattr(Run, "finish", flaky)
    p = argparse.ArgumentParser()
    bench.add_bench_args(p.add_subparsers())
    args = p.parse_args(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter",
                         str(drafter), "--max-new-tokens", "8", "--modes", "ar,dflash",
                         "--out", str(tmp / "cut")])
    assert args.func(args) == 0
    res = json.loads((tmp / "cut" / "results.json").read_text())
    assert res["config"]["interrupted"] and [r["n"] for r in res["runs"]] == [1, 1]
    assert (tmp / "cut" / "report.md").exists()


def test_bad_input_exits_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "engine.bench", "--modes", "ar,fast", "--out",
                        str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("error: modes:")


def test_prompt_sets():
    he, mt = sets.load_set("humaneval"), sets.load_set("mtbench")
    assert len(he) == 164 and len(mt) == 80 and "def " in he[0]["prompt"]
    for name in ("math", "chat"):
        rows = sets.load_set(name)
        assert len(rows) >= 100 and len({r["id"] for r in rows}) == len(rows)
        assert len({r["prompt"] for r in rows}) == len(rows)
    s1, s2 = sets.sample_prompts(he, None, 0), sets.sample_prompts(he, 5, 0)
    assert len(s1) == 100 and s2 == s1[:5] and sets.sample_prompts(he, None, 1) != s1
    assert sets.sample_prompts(mt, None, 0) == mt   # fewer than 100: the whole set


def test_variants_and_bad_input(tmp_path):
    vs = bench.variants(["ar", "reanchor", "reanchor-auto", "dflash-auto", "ddtree"], ["earliest", "latest"], 3, 24,
                        [8, 16])
    assert [(v.label, v.mode, v.rule, v.max_shifted, v.max_trie_nodes) for v in vs] == [
        ("ar", "ar", "earliest", None, None), ("reanchor", "reanchor", "earliest", 3, 24),
        ("reanchor-latest", "reanchor", "latest", 3, 24), ("reanchor-auto", "reanchor", "earliest", "auto", "auto"),
        ("dflash-auto", "dflash", "earliest", None, "auto"), ("ddtree", "ddtree", "earliest", None, 24),
        ("ddtree@8", "ddtree", "earliest", None, 8), ("ddtree@16", "ddtree", "earliest", None, 16)]
    vs = bench.variants(["ar", "dflash"], ["earliest"], None, acceptances=["speculative", "match"])
    assert [(v.label, v.acceptance) for v in vs] == [("ar", "speculative"), ("dflash", "speculative"),
                                                      ("dflash-match", "match")]
    with pytest.raises(InputError, match="acceptance"):
        parse_csv("speculative,greedy", ACCEPTANCE, "acceptance")
    assert parse_max_shifted("auto") == "auto" and parse_max_shifted("none") is None
    assert parse_max_shifted("all") is None and parse_max_shifted("3") == 3
    with pytest.raises(InputError, match="max_shifted"):
        parse_max_shifted("many")
    with pytest.raises(InputError, match="modes"):
        parse_csv("ar,fast", bench.DEFAULT_MODES, "modes")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(InputError, match="prompt"):
        sets.read_jsonl(bad)


def test_cost_model_choices():
    from engine.decode.cost import Profile, Stats, choose_budget

    # verification is flat up to 16 nodes, then steep: one cheap block is worth it, more are not
    prof = Profile(block_size=8, draft_n=[1, 2, 4, 8], draft_ms=[5, 5.2, 5.6, 6.4],
                   verify_n=[1, 16, 32, 64], verify_ms=[10, 10, 40, 100])
    st = Stats()
    st.rounds, st.acc0_sum, st.nodes_sum, st.blocks_sum = 10, 20, 70, 10   # 7 nodes per block
    st.gain_sum, st.gain_n = {1: 5.0, 2: 3.0, 3: 1.0}, {1: 10, 2: 10, 3: 10}
    k, cap = choose_budget(prof, st, 3)
    assert k == 1 and cap is not None and cap >= 8 + 7
    assert choose_budget(prof, st, 0) == (0, None)
    # with free verification every block with a positive gain is drafted
    flat = Profile(8, [1, 64], [5, 5], [1, 256], [10, 10])
    assert choose_budget(flat, st, 3)[0] == 3


def test_drafters_table3(bench_dirs):
    """--drafters: every drafter (DFlash and its variants) on every prompt over one target; Table 3 puts each with
    and without ReAnchor side by side; `ar` runs once (it drafts nothing) and every run is lossless."""
    from tiny import tiny_variant_models

    tmp, target, drafter, prompts = bench_dirs
    folders = [str(drafter)]
    for variant in ("domino", "dspark"):
        m = tiny_variant_models(variant, 0, kind="llama", block_size=8)
        m.drafter.save_pretrained(tmp / f"tiny-{variant}")
        folders.append(str(tmp / f"tiny-{variant}"))
    p = argparse.ArgumentParser()
    bench.add_bench_args(p.add_subparsers())
    out = tmp / "variants"
    args = p.parse_args(["bench", "--prompts", str(prompts), "--target", str(target), "--drafters", ",".join(folders),
                         "--max-new-tokens", "12", "--modes", "ar,dflash,reanchor", "--traces", "--out", str(out)])
    assert args.func(args) == 0
    res = json.loads((out / "results.json").read_text())
    got = [(r["drafter"], r["label"]) for r in res["runs"]]
    assert got == [(Path(folders[0]).name, "ar")] + [(Path(f).name, l) for f in folders for l in ("dflash", "reanchor")]
    assert all(r["lossless"] == 1.0 and r["speedup_vs_ar"] for r in res["runs"])
    assert list(res["config"]["drafter_names"]) == [Path(f).name for f in folders]
    md = (out / "report.md").read_text()
    assert "Table 3" in md and all(f"| {Path(f).name} | mean |" in md for f in folders)
    assert (out / "drafters" / "tiny-dspark" / "traces" / "tiny" / "reanchor" / "p2.json").exists()
    # each drafter's diagnostics match its own traces (test_table3_diagnostics_are_each_drafters_own: distinct ones)
    from engine import analyses as A

    for r in res["runs"]:
        if r["label"] == "ar":
            assert "post_rejection_agreement" not in r
            continue
        trs = [json.loads(f.read_text()) for f in sorted((out / "drafters" / r["drafter"] / "traces" / "tiny"
                                                           / r["label"]).glob("*.json"))]
        assert trs and r["post_rejection_agreement"] == A.post_rejection_agreement(trs)["rate"]
        g = A.gain_by_offset(trs)
        assert [r[k] for k in ("extra_per_round", "gained_share", "per_gained_round")] == \
            [g["extra_per_round"], g["gained_share"], g["per_gained_round"]]
    assert "| post-rejection agreement | +ReAnchor extra drafts / round | rounds that gain |" in md


def test_table3_diagnostics_are_each_drafters_own():
    """aggregate: each drafter's post-rejection agreement and ReAnchor extra drafts per round come from its own
    traces (the recorded example traces of the embedded model, a different one per drafter), not the first's."""
    from engine import analyses as A
    from engine.bench.main import aggregate, variants
    from engine.bench.report import table3, Results

    traces = [json.loads(f.read_text()) for f in sorted((Path(__file__).parents[1] / "assets" / "traces").glob("*.json"))]
    assert len(traces) >= 2
    todo = variants(["dflash", "reanchor"], ["earliest"], None)
    done = {"s": [("p0", {f"d{i}": {"dflash": t, "reanchor": t} for i, t in enumerate(traces)})]}
    res = aggregate(done, todo, 0.0, {})
    want = {f"d{i}": (A.post_rejection_agreement([t])["rate"], A.gain_by_offset([t])["extra_per_round"],
                      A.gain_by_offset([t])["gained_share"]) for i, t in enumerate(traces)}
    got = {r["drafter"]: (r["post_rejection_agreement"], r["extra_per_round"], r["gained_share"]) for r in res["runs"]
           if r["label"] == "reanchor"}
    assert got == want and len(set(want.values())) == len(traces)
    md = "\n".join(table3(Results(res)))
    assert all(f"| {d} | s |" in md and f"{100 * a:.1f}%" in md and f"{100 * g:.1f}%" in md
               for d, (a, _, g) in want.items())


# -- defects found in review: each test is red without its fix --------------------------------------

def _bench_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_bench_args(p.add_subparsers())
    return p.parse_args(["bench", *argv])


def _asset_traces() -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted((ROOT / "assets" / "traces").glob("*.json"))]


def _results(todo, traces_by_drafter: dict[str, dict[str, dict]], **cfg) -> dict:
    """aggregate over one set and prompt, with the config keys the report's header reads."""
    config = {**dict(target_name="t", drafter_name="d", device_used="cpu", dtype_used="float32", temperature=0.0,
                     seed=0, max_new_tokens=16, date="today", block_size=8), **cfg}
    return bench.aggregate({"s": [("p0", traces_by_drafter)]}, todo, config["temperature"], config)


def test_plan_default_sets_and_set_names(tmp_path):
    """No --sets means every set (the help says so; it exited 2 'no prompt set chosen'); a --prompts file may not
    take the name of a --sets set (it replaced that set's prompts under its name) nor of "all" (the pooled
    analyses); two ids naming one trace file are refused (one trace overwrote the other)."""
    _, sets_ = bench.plan(_bench_args("--n", "1", "--out", str(tmp_path)))
    assert list(sets_) == list(sets.SETS)
    (tmp_path / "math.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
    with pytest.raises(InputError, match="prompts"):
        bench.plan(_bench_args("--sets", "math", "--prompts", str(tmp_path / "math.jsonl"), "--out", str(tmp_path)))
    (tmp_path / "all.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
    with pytest.raises(InputError, match="prompts"):
        bench.plan(_bench_args("--prompts", str(tmp_path / "all.jsonl"), "--out", str(tmp_path)))
    (tmp_path / "ids.jsonl").write_text('{"id": "p/1", "prompt": "x"}\n{"id": "p_1", "prompt": "y"}\n')
    with pytest.raises(InputError, match="same trace file"):
        bench.plan(_bench_args("--prompts", str(tmp_path / "ids.jsonl"), "--out", str(tmp_path)))


def test_out_naming_a_file_exits_2(tmp_path, capsys):
    """--out naming an existing file: exit 2 naming --out (it was a FileExistsError traceback, exit 1)."""
    from engine.__main__ import main

    f = tmp_path / "file"
    f.write_text("")
    assert main(["bench", "--prompts", str(f), "--out", str(f)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: out:")


def test_drafter_named_twice_runs_once(tmp_path, monkeypatch):
    """One drafter folder named twice (relative and absolute) is one drafter, as an exact repeat is: it ran twice,
    and Table 3 showed it twice (as `x` and `x'`)."""
    (tmp_path / "dr").mkdir()
    monkeypatch.chdir(tmp_path)
    assert bench.parse_drafters(f"dr,{tmp_path / 'dr'},hub/x,hub/x") == ["dr", "hub/x"]


def test_report_budget_curve_of_match_variants(tmp_path):
    """--tree-nodes with --acceptance speculative,match: MODE@N-match labels crashed the report (int('8-match')),
    after the whole run, leaving no report.md; each acceptance rule now has its own curve."""
    from engine.bench.report import write_report

    t = _asset_traces()[0]
    todo = bench.variants(["ar", "dflash", "ddtree"], ["earliest"], None, None, [8], ["speculative", "match"])
    md = write_report(_results(todo, {"d": {v.label: t for v in todo}}, temperature=1.0), tmp_path)
    assert "| ddtree | 8 |" in md and "| ddtree-match | 8 |" in md and (tmp_path / "budget_curve.html").exists()


def test_report_table6_fixed_offset_from_rules_fixed(tmp_path):
    """Table 6 from `--modes dflash,reanchor --rules fixed,earliest`: the fixed-offset row reads reanchor-fixed (the
    same assembly as shifted-fixed); it was left out of the table."""
    from engine.bench.report import Results, table6

    a, b = _asset_traces()[:2]
    todo = bench.variants(["dflash", "reanchor"], ["fixed", "earliest"], None)
    R = Results(_results(todo, {"d": {"dflash": a, "reanchor-fixed": a, "reanchor": b}}))
    md = "\n".join(table6(R))
    assert f"| fixed-offset | {R.get('s', 'reanchor-fixed', 'tau'):.2f} | – |" in md and "| earliest |" in md


def test_report_table3_without_ar(tmp_path):
    """--drafters without `ar` in --modes: Table 3's speed change is the ratio of tokens/s (it read '–'), and a
    missing speedup reads '–', not '–x'."""
    from engine.bench.report import Results, table3

    a, b = _asset_traces()[:2]
    todo = bench.variants(["dflash", "reanchor"], ["earliest"], None)
    R = Results(_results(todo, {d: {"dflash": a, "reanchor": b} for d in ("d0", "d1")}))
    tps = lambda t: t["stats"]["new_tokens"] / t["stats"]["wall_s"]  # noqa: E731
    md = "\n".join(table3(R))
    assert md.count(f"| {100 * (tps(b) / tps(a) - 1):.1f}% |") == 4 and "–x" not in md


def test_no_prompt_finished_replaces_an_old_report(tmp_path):
    """Rerun into a folder, every prompt skipped (or Ctrl-C before one finished): report.md said what the earlier
    run measured while results.json held no runs."""
    (tmp_path / "report.md").write_text("# old tables\n")
    bench.write_results(tmp_path, {"runs": [], "analyses": {}, "config": {
        "skipped": [{"set": "s", "id": "p", "error": "prompt: too long"}]}})
    md = (tmp_path / "report.md").read_text()
    assert "old tables" not in md and "No prompt finished (1 skipped: prompt: too long)" in md


def test_header_block_size_is_the_drafted_one():
    """results' block_size (the report's B=) is the block drafted: --max-new-tokens cuts it, as the traces record;
    it said --block-size 100 (or the drafter's 8) where 16-token blocks were drafted."""
    import torch
    from types import SimpleNamespace as NS

    m = NS(target_name="t", drafter_name="d", device=torch.device("cpu"), dtype=torch.float32)
    eng = NS(models=m, block_size=8)
    info = lambda b, n: bench.engine_info(eng, NS(block_size=b, max_new_tokens=n))["block_size"]  # noqa: E731
    assert (info(100, 16), info(None, 4), info(None, 128), info(4, 128)) == (16, 4, 8, 4)


def test_tree_nodes_without_a_tree_mode_exits_2(tmp_path):
    """--tree-nodes without a tree mode in --modes: refused, naming the flag (it was dropped silently: no MODE@N
    runs, no budget curve)."""
    with pytest.raises(InputError, match="tree_nodes"):
        bench.plan(_bench_args("--modes", "ar,dflash", "--tree-nodes", "8", "--out", str(tmp_path)))
    todo, _ = bench.plan(_bench_args("--modes", "ddtree,reanchor", "--rules", "all", "--tree-nodes", "8", "--n", "1",
                                     "--sets", "math", "--out", str(tmp_path)))
    assert [v.label for v in todo] == ["ddtree", "reanchor-all", "ddtree@8"]


def test_report_tables_of_match_acceptance_alone(tmp_path):
    """--acceptance match alone: every drafting label ends in -match, and the tables that read plain labels (dflash,
    reanchor, ...) were left out of report.md without a word; they now read the -match runs, titled as such."""
    from engine.bench.report import write_report

    t = _asset_traces()[0]
    modes = ["ar", "dflash", "shifted-fixed", "reanchor", "in-block", "extension", "ddtree", "reanchor-auto"]
    todo = bench.variants(modes, ["earliest", "all"], None, None, [], ["match"])
    drafting = {v.label: t for v in todo if v.mode != "ar"}
    md = write_report(_results(todo, {"d0": {"ar": t, **drafting}, "d1": drafting}, temperature=1.0), tmp_path)
    titles = ("Table 3", "Trees", "Auto budgets", "Table 4", "Table 7", "Table 5", "Table 6", "Table 8", "Table 1",
              "Figure 2", "Cost budget")
    lines = [line for line in md.splitlines() if line.startswith("## ")]
    for title in titles:
        assert any(line.startswith(f"## {title}") and line.endswith("(sample-and-match runs)") for line in lines), title
    assert "| set | dflash-match tau | in-block-match | extension-match | reanchor-match |" in md
    assert "accepted by sample-and-match alone (`--acceptance match`)" in md
    # both rules: the tables read the speculative runs, and the header says so
    todo = bench.variants(modes, ["earliest"], None, None, [], ["speculative", "match"])
    md = write_report(_results(todo, {"d0": {v.label: t for v in todo}}, temperature=1.0), tmp_path)
    assert "| set | dflash tau | in-block | extension | reanchor |" in md and "sample-and-match runs)" not in md
    assert "the tables after the acceptance-rule table read the speculative-sampling runs" in md


def test_rerun_into_a_folder_sets_the_earlier_traces_aside(bench_dirs, capsys):
    """A second run into the same --out with other modes left the first run's traces beside its own under
    DIR/traces (a user, the app or a sweep's --resume could take them for this run's): they now move, unchanged, to
    DIR/earlier-runs/<time>/ with that run's results.json, report.md and figures, and results.json's trace_files
    lists exactly the traces this run wrote."""
    from engine.__main__ import main

    tmp, target, drafter, prompts = bench_dirs
    out = tmp / "rerun"
    run = lambda *a: main(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter",  # noqa: E731
                           str(drafter), "--max-new-tokens", "8", "--out", str(out), *a])
    files = lambda root: {str(p.relative_to(root)): p.read_bytes()  # noqa: E731
                          for p in (root / "traces").rglob("*") if p.is_file()}
    assert run("--modes", "ar,dflash", "--traces") == 0
    first, first_results = files(out), (out / "results.json").read_text()
    assert len(first) == 4
    assert run("--modes", "ar,reanchor", "--traces") == 0
    want = [f"traces/tiny/{label}/{f}" for label in ("ar", "reanchor") for f in ("p2.json", "p_1.json")]
    assert sorted(files(out)) == want   # the first run's dflash traces are not beside this run's
    res = json.loads((out / "results.json").read_text())
    assert res["trace_files"] == want
    earlier = out / res["config"]["earlier_traces"]
    assert earlier.parent == out / "earlier-runs" and files(earlier) == first   # nothing lost
    assert (earlier / "results.json").read_text() == first_results and (earlier / "fig2_acceptance.html").exists()
    assert f"moved 4 trace files an earlier run left in {out}" in capsys.readouterr().err
    assert f"were moved to `{res['config']['earlier_traces']}/`" in (out / "report.md").read_text()
    # no --traces: results.json names no trace, and the folder holds none of another run's
    assert run("--modes", "ar,dflash") == 0
    res = json.loads((out / "results.json").read_text())
    assert res["trace_files"] == [] and not (out / "traces").exists() and len(list(out.glob("earlier-runs/*"))) == 2


def test_rules_without_reanchor_warns(tmp_path, capsys):
    """--rules all (or any rule but the default) without reanchor in --modes: a warning naming the flag (it was dropped
    without a word: no reanchor-all run, no Table 8). Not an error: a flag list shared by runs of other modes still
    runs. reanchor-RULE in --modes needs no --rules."""
    todo, _ = bench.plan(_bench_args("--modes", "ar,dflash", "--rules", "all", "--n", "1", "--sets", "math",
                                     "--out", str(tmp_path)))
    assert [v.label for v in todo] == ["ar", "dflash"]
    assert capsys.readouterr().err.startswith("warning: --rules all applies to reanchor, which is not in --modes")
    todo, _ = bench.plan(_bench_args("--modes", "dflash,reanchor-all", "--n", "1", "--sets", "math",
                                     "--out", str(tmp_path)))
    assert [v.label for v in todo] == ["dflash", "reanchor-all"]
    todo, _ = bench.plan(_bench_args("--modes", "reanchor", "--rules", "earliest,all", "--n", "1", "--sets", "math",
                                     "--out", str(tmp_path)))
    assert [v.label for v in todo] == ["reanchor", "reanchor-all"] and capsys.readouterr().err == ""


def test_report_trees_table_for_reanchor_tree_alone(tmp_path):
    """--modes ar,dflash,reanchor-tree: the Trees table (tau and speed over dflash) needed ddtree in --modes too, and
    was left out without a word; it now shows any tree mode against the chain."""
    from engine.bench.report import write_report

    t = _asset_traces()[0]
    todo = bench.variants(["ar", "dflash", "reanchor-tree"], ["earliest"], None)
    md = write_report(_results(todo, {"d": {v.label: t for v in todo}}), tmp_path)
    assert "## Trees: tau / tau over dflash / speed over dflash\n\n| set | dflash | reanchor-tree |" in md


def test_rerun_drops_figures_its_report_does_not_draw(tmp_path):
    """A rerun into a folder whose report draws no budget curve (no --tree-nodes) or no Figure 2 (no dflash or
    reanchor run) left the earlier run's budget_curve.html and fig2_acceptance.html beside the new results, showing
    that run's numbers; a figure this report draws is written anew."""
    t = _asset_traces()[0]
    for name in ("budget_curve.html", "fig2_acceptance.html"):
        (tmp_path / name).write_text("an earlier run's figure")
    todo = bench.variants(["ar", "dflash"], ["earliest"], None)
    bench.write_results(tmp_path, _results(todo, {"d": {v.label: t for v in todo}}))
    assert not (tmp_path / "budget_curve.html").exists()
    assert "an earlier run's" not in (tmp_path / "fig2_acceptance.html").read_text()
    todo = bench.variants(["ar"], ["earliest"], None)
    bench.write_results(tmp_path, _results(todo, {"d": {"ar": t}}))
    assert not (tmp_path / "fig2_acceptance.html").exists()


def test_results_carry_fields_the_report_reads_not_labels(tmp_path):
    """Each results.json run carries mode, rule, acceptance, node budget, auto and sweep point; the report finds
    runs by those fields: renaming every label leaves the auto, acceptance and budget-curve tables as they were."""
    from dataclasses import replace as _replace

    from engine.bench.report import write_report
    from engine.options import run_label

    t = _asset_traces()[0]
    todo = bench.variants(["ar", "dflash", "ddtree", "reanchor-auto", "shifted-fixed"], ["earliest"], None, None, [8],
                          ["speculative", "match"])
    for v in todo:   # the label is composed from the fields, in one place
        assert v.label == run_label(v.mode, v.rule, v.acceptance, v.auto, v.sweep_nodes)
    assert {(v.mode, v.rule) for v in todo if v.label.startswith("shifted-fixed")} == {("shifted-fixed", "fixed")}
    res = _results(todo, {"d": {v.label: t for v in todo}}, temperature=1.0)
    row = next(r for r in res["runs"] if r["label"] == "reanchor-auto-match")
    assert (row["mode"], row["rule"], row["acceptance"], row["auto"], row["max_trie_nodes"]) == \
        ("reanchor", "earliest", "match", True, "auto")
    assert next(r for r in res["runs"] if r["label"] == "ddtree@8")["sweep_nodes"] == 8
    md = write_report(res, tmp_path)
    renamed = [_replace(v, label=f"run{i}") for i, v in enumerate(todo)]
    (tmp_path / "b").mkdir()
    md2 = write_report(_results(renamed, {"d": {v.label: t for v in renamed}}, temperature=1.0), tmp_path / "b")
    for title in ("## Auto budgets", "## Acceptance rule", "## Budget curve"):
        assert title in md and title in md2, title
    assert "| ddtree | 8 |" in md and "| ddtree-match | 8 |" in md


def test_report_trees_by_source(tmp_path):
    """Issue 40: each tree run against ddtree at the same node budget (same drafter and set), with the share of
    accepted drafts shifted blocks proposed and g(0)'s own tree replayed on the run's rounds; the calibrated
    ranking runs as MODE-cal."""
    from engine.bench.report import write_report
    from engine.decode import DecodeConfig, Engine
    from engine.decode.cost import budget_for
    from tiny import tiny_models

    eng = Engine(tiny_models("llama", 3, block_size=5))
    ids = eng.encode_prompt("c a b")
    todo = bench.variants(["ddtree", "reanchor-tree-cal"], ["earliest"], None, None, [9])[2:]
    assert [(v.label, v.mode, v.tree_rank, v.max_trie_nodes) for v in todo] == \
        [("ddtree@9", "ddtree", "drafter", 9), ("reanchor-tree-cal@9", "reanchor-tree", "calibrated", 9)]
    traces = {}
    for v in todo:
        cfg = bench.decode_config(_bench_args("--out", str(tmp_path), "--ignore-eos"), v, 24)
        run = eng.run(ids, cfg, budget_for(eng, cfg))
        run.finish()
        traces[v.label] = run.trace()
    res = _results(todo, {"d": traces})
    row = next(r for r in res["runs"] if r["label"] == "reanchor-tree-cal@9")
    ts = A.tree_sources(traces["reanchor-tree-cal@9"])
    assert row["shifted_token_share"] == ts["shifted_token_share"] is not None
    assert row["ddtree_tau_same_rounds"] == ts["displaced"]["ddtree_tau"] is not None
    md = write_report(res, tmp_path)
    ratio = traces["reanchor-tree-cal@9"]["stats"]["tau"] / traces["ddtree@9"]["stats"]["tau"]
    assert f"| d | s | reanchor-tree-cal@9 | {row['tau']:.2f} | {ratio:.2f}x |" in md
    assert "## Node acceptance by source (first drafter, every set)" in md

"""`bench --out DIR` never overwrites or deletes a user's files: a folder holding files no benchmark wrote is
refused before the models load, and an earlier benchmark's results move to DIR/earlier-runs/ (with or without
traces). Real tiny models through `python -m engine`."""
from __future__ import annotations

import json

from engine.__main__ import main
from helpers import bench_dirs  # noqa: F401  (tiny target, drafter and prompts, saved once)


def _bench(bench_dirs, out, *extra) -> int:  # noqa: F811
    tmp, target, drafter, prompts = bench_dirs
    return main(["bench", "--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                 "--max-new-tokens", "8", "--modes", "ar,dflash", "--out", str(out), *extra])


def test_a_folder_of_the_users_files_is_refused(bench_dirs, capsys):  # noqa: F811
    """A folder with the user's report.md, results.json and a figure: exit 2 before loading, one line naming --out and
    the files, every file as it was. Before: the run replaced report.md and results.json and deleted the figure."""
    out = bench_dirs[0] / "mine"
    out.mkdir()
    mine = {"report.md": "# my notes\n", "results.json": '{"mine": 1}', "budget_curve.html": "<p>my figure</p>",
            "notes.txt": "x"}
    for name, text in mine.items():
        (out / name).write_text(text)
    assert _bench(bench_dirs, out, "--target", "/no/such/target") == 2   # refused before the target is looked at
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: out: {out} holds files no benchmark wrote ("), err
    assert {p.name: p.read_text() for p in out.iterdir()} == mine
    (out / "notes.txt").unlink()   # ours by name, but results.json is not a benchmark's: still refused
    assert _bench(bench_dirs, out) == 2 and {p.name: p.read_text() for p in out.iterdir()} == {
        k: v for k, v in mine.items() if k != "notes.txt"}


def test_an_earlier_benchmark_without_traces_is_set_aside(bench_dirs, capsys):  # noqa: F811
    """A rerun into an earlier benchmark's folder (no --traces): its results.json and report.md are kept in
    DIR/earlier-runs/<time>/, and the run says so. Before: they were replaced without a copy (only a run with
    traces set them aside)."""
    out = bench_dirs[0] / "again"
    assert _bench(bench_dirs, out) == 0
    first = {n: (out / n).read_text() for n in ("results.json", "report.md")}
    capsys.readouterr()
    assert _bench(bench_dirs, out) == 0
    (earlier,) = out.glob("earlier-runs/*")
    assert {n: (earlier / n).read_text() for n in first} == first
    assert json.loads((out / "results.json").read_text())["config"]["earlier_traces"] == str(earlier.relative_to(out))
    assert f"an earlier run left in {out} to {earlier} (not this run's), with its results.json, report.md" \
        in capsys.readouterr().err

"""The bench as a Ray sweep (engine/bench/sweep.py) on one local Ray cluster for the module (2 CPU slots,
loopback only, no dashboard, usage stats off), tiny random models: the same results and traces as the
single-process bench, a worker killed mid-job, a job failing three times, --resume after Ctrl-C, and
the errors (no cluster, no models). Workers are real processes, killed with SIGKILL."""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from engine.__main__ import main as cli
from helpers import poll_until

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [{"id": "p/1", "prompt": "abc dea, fig?"}, {"id": "p2", "prompt": "jig a bad cafe."},
           {"id": "p3", "prompt": "a bag, a cab."}, {"id": "p4", "prompt": "dig deep, jab."}]
LABELS = ["ar", "dflash", "reanchor", "reanchor-all"]
TIMING = {"wall_s", "tokens_per_s", "speedup_vs_ar", "speed_vs_dflash", "draft_ms", "verify_ms", "round_ms",
          "load_s", "stages_ms", "date", "hardware", "torch"}   # times, and the machine (unknown when all was resumed)
SWEEP_ONLY = {"ray", "workers", "resume", "out", "failed", "sweep"}   # config keys a sweep adds or sets


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny import save_tiny_bench

    tmp = tmp_path_factory.mktemp("sweep")
    target, drafter, prompts = save_tiny_bench(tmp, PROMPTS)
    return tmp, ["--prompts", str(prompts), "--target", str(target), "--drafter", str(drafter),
                 "--max-new-tokens", "16", "--modes", "ar,dflash,reanchor", "--rules", "earliest,all"]


OTHERS: set[int] = set()   # processes under pytest that are not the cluster's


@pytest.fixture(scope="module")
def cluster():
    from engine.bench.sweep import connect

    OTHERS.update(descendants(os.getpid()))   # what other tests left running (the session's shared app)
    ray = connect("local", num_cpus=2)
    assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"   # loopback only
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tiny):
    """The single-process bench on the same prompts."""
    tmp, args = tiny
    assert cli(["bench", *args, "--traces", "--out", str(tmp / "single")]) == 0
    return tmp / "single"


SLOW = ("--max-new-tokens", "128", "--ignore-eos")   # ~1 s jobs (the tiny models stop after 2 tokens at 16,
# a few ms): a killer polling every 5 ms sees each run of the job it waits for


@pytest.fixture(scope="module")
def reference_slow(tiny):
    """The single-process bench with SLOW jobs."""
    tmp, args = tiny
    assert cli(["bench", *args, *SLOW, "--traces", "--out", str(tmp / "single-slow")]) == 0
    return tmp / "single-slow"


def sweep(tiny, out: str, *extra: str) -> tuple[int, Path]:
    tmp, args = tiny
    return cli(["bench", *args, "--ray", "local", "--out", str(tmp / out), *extra]), tmp / out


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIMING}
    return [untimed(v) for v in x] if isinstance(x, list) else x


def traces(out: Path) -> dict[str, dict]:
    return {str(p.relative_to(out)): untimed(json.loads(p.read_text()))
            for p in sorted((out / "traces").rglob("*.json"))}


def assert_same_as(reference: Path, out: Path, ids=None) -> None:
    """Every token of every trace and every results.json field but timings, as the single-process run."""
    want, got = results(reference), results(out)
    ref = traces(reference)
    if ids is not None:
        ref = {k: v for k, v in ref.items() if Path(k).stem in ids}
    assert traces(out) == ref
    if ids is None:
        assert untimed(got["runs"]) == untimed(want["runs"])
        assert untimed(got["analyses"]) == untimed(want["analyses"])
    this_run = SWEEP_ONLY | {"interrupted", "earlier_traces"}   # what each run says of itself
    cfg = {k: v for k, v in untimed(got["config"]).items() if k not in this_run}
    assert cfg == {k: v for k, v in untimed(want["config"]).items() if k not in this_run}


def descendants(pid: int, skip: set[int] = frozenset()) -> list[int]:
    """Every process under `pid`, leaving out the subtrees of `skip`."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    stack, out = [pid], []
    while stack:
        for k in kids.get(stack.pop(), []):
            if k not in skip:
                out.append(k)
                stack.append(k)
    return out


def alive(pid: int) -> bool:
    """The process is there and not a zombie (whose cmdline is empty)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def job_processes() -> list[tuple[int, bytes]]:
    """(pid, title) of this test's Ray workers that are running a job (Ray titles them `ray::job NAME`)."""
    out = []
    for pid in descendants(os.getpid()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"ray::job "):
            out.append((pid, title))
    return out


class Killer(threading.Thread):
    """SIGKILLs the worker process decoding a given prompt (Ray names the process after the job it
    runs: `ray::job tiny/p3 (...)`), as many times as asked per prompt."""

    def __init__(self, kills: dict[str, int]):
        super().__init__(daemon=True)
        self.left, self.killed, self.done = dict(kills), Counter(), threading.Event()

    def run(self) -> None:
        while any(self.left.values()) and not self.done.is_set():
            for pid, title in job_processes():
                job = next((j for j, n in self.left.items() if n and title.startswith(f"ray::job {j} ".encode())),
                           None)
                if job:
                    os.kill(pid, signal.SIGKILL)
                    self.left[job] -= 1
                    self.killed[job] += 1
                    poll_until(lambda: not alive(pid), 60, every=0.01)
            self.done.wait(0.005)


class Freezer(threading.Thread):
    """SIGSTOPs the (one) worker as soon as it starts any job but `first`: from then on no job can finish,
    however slowly this thread or the driver runs. thaw() lets it go again."""

    def __init__(self, first: str):
        super().__init__(daemon=True)
        self.first, self.pid, self.done = first, None, threading.Event()

    def run(self) -> None:
        while self.pid is None and not self.done.is_set():
            for pid, title in job_processes():
                if not title.startswith(f"ray::job {self.first} ".encode()):
                    os.kill(pid, signal.SIGSTOP)
                    self.pid = pid
                    break
            self.done.wait(0.005)

    def thaw(self) -> None:
        self.done.set()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def tcp_endpoints(pids: list[int]) -> list[tuple[str, str]]:
    """(local ip, remote ip) of every TCP socket these processes hold (from /proc, no tool needed)."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes |= {int(x[8:-1]) for x in links if x.startswith("socket:[")}

    def ip(hexaddr: str) -> str:
        raw = bytes.fromhex(hexaddr.split(":")[0])
        if len(raw) == 4:
            return socket.inet_ntop(socket.AF_INET, raw[::-1])
        return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))

    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            f = row.split()
            if int(f[9]) in inodes:
                out.append((ip(f[1]), ip(f[2])))
    return out


def test_local_cluster_is_loopback_only_and_silent(cluster):
    """--ray local: every socket of the cluster's processes is on loopback, and its processes run with
    usage stats off (connect() sets it; Ray's own ray.init() also turns it off for the clusters it
    starts, so this checks the outcome, not our line)."""
    pids = descendants(os.getpid(), OTHERS)
    assert len(pids) >= 4   # gcs, raylet, agents, idle workers
    ends = tcp_endpoints(pids)
    assert ends and all(ipaddress.ip_address(a.removeprefix("::ffff:")).is_loopback
                        and (b in ("0.0.0.0", "::") or ipaddress.ip_address(b.removeprefix("::ffff:")).is_loopback)
                        for a, b in ends), ends
    checked = []
    for pid in pids:  # Ray's Python workers and agents ("ray::...") retitle themselves over their environ
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()  # block; they inherit it from the raylet, checked
        if not cmd.startswith(b"ray::"):
            assert b"RAY_USAGE_STATS_ENABLED=0" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"), cmd
            checked.append(cmd)
    assert any(b"raylet" in c for c in checked) and any(b"gcs_server" in c for c in checked)
    assert any(b"dashboard/dashboard.py" in c for c in checked)   # where Ray's usage reporter lives


def test_ray_equals_single_process(tiny, cluster, reference):
    rc, out = sweep(tiny, "ray")
    assert rc == 0
    assert_same_as(reference, out)
    res = results(out)
    assert [r["n"] for r in res["runs"]] == [4] * len(LABELS) and [r["label"] for r in res["runs"]] == LABELS
    assert all(r["lossless"] == 1.0 for r in res["runs"])
    s = res["config"]["sweep"]
    assert s["jobs"] == 4 and s["retried"] == [] and res["config"]["failed"] == []
    assert sum(w["jobs"] for w in s["workers"]) == 4 and s["workers"][0]["ip"] == "127.0.0.1"
    assert (out / "report.md").exists()


def test_workers_killed_mid_job(tiny, cluster, reference_slow, monkeypatch):
    """Workers die in the middle of jobs (SIGKILL): a job killed once runs again on another worker; a job
    killed MAX_ATTEMPTS times is given up and named in results.json; the sweep goes on; every other job is
    saved and counted exactly once, with the single-process run's tokens. (MAX_ATTEMPTS 2 here, 3 in use: each
    kill restarts a worker, which imports torch and loads the models again, seconds of a core each.)"""
    import engine.bench.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "MAX_ATTEMPTS", 2)
    killer = Killer({"tiny/p3": 1, "tiny/p/1": 2})
    killer.start()
    rc, out = sweep(tiny, "killed", "--workers", "2", *SLOW)
    killer.done.set()
    assert rc == 0 and killer.killed == {"tiny/p3": 1, "tiny/p/1": 2}
    res = results(out)
    (failed,) = res["config"]["failed"]
    assert (failed["set"], failed["id"], failed["attempts"], len(failed["errors"])) == ("tiny", "p/1", 2, 2)
    assert all("died" in e for e in failed["errors"])
    retried = res["config"]["sweep"]["retried"]
    assert sorted(r["job"].split(" ")[0] for r in retried) == ["tiny/p/1"] * 2 + ["tiny/p3"]
    assert [r["n"] for r in res["runs"]] == [3] * len(LABELS)            # p2, p3, p4, each once
    assert sum(w["jobs"] for w in res["config"]["sweep"]["workers"]) == 3
    assert_same_as(reference_slow, out, ids={"p2", "p3", "p4"})
    assert "p/1" in (out / "report.md").read_text()


def test_resume_after_interrupt(tiny, cluster, reference):
    """Ctrl-C after the first job: results of the finished jobs; --resume runs only the others. The
    worker is frozen (SIGSTOP) when it starts its second job, so Ctrl-C always comes mid-sweep."""
    tmp, _ = tiny
    out = tmp / "resumed"
    freezer = Freezer("tiny/p/1")   # one worker takes the jobs in prompt order

    def interrupt_after_first_job():
        poll_until(lambda: freezer.pid is not None and any(
            len(list((out / "traces" / "tiny").glob(f"*/{p}.json"))) == len(LABELS)
            for p in ("p_1", "p2", "p3", "p4")), 600, every=0.01)
        handler = signal.getsignal(signal.SIGINT)   # the driver's (bench.sweep.ctrl_c_sets), while it polls
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C: it sets the driver's stop flag
        # the driver has stopped polling once its handler is gone; then let the worker go, as the sweep's cleanup
        # (ray.kill) waits for a frozen worker
        poll_until(lambda: signal.getsignal(signal.SIGINT) is not handler, 60, every=0.01)
        freezer.thaw()

    freezer.start()
    threading.Thread(target=interrupt_after_first_job, daemon=True).start()
    try:
        rc, _ = sweep(tiny, "resumed", "--workers", "1")
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C came after the sweep's loop")
    finally:
        freezer.thaw()
    first = results(out)
    assert rc == 0 and first["config"]["interrupted"]
    finished = {p: p.stat().st_ino for p in (out / "traces").rglob("*.json")}
    assert 1 <= len(finished) // len(LABELS) < 4 and len(finished) % len(LABELS) == 0
    assert first["runs"][0]["n"] == len(finished) // len(LABELS)

    rc, _ = sweep(tiny, "resumed", "--workers", "1", "--resume")
    assert rc == 0
    res = results(out)
    assert res["config"]["sweep"]["resumed"] == len(finished) // len(LABELS) and not res["config"]["interrupted"]
    assert sum(w["jobs"] for w in res["config"]["sweep"]["workers"]) == 4 - len(finished) // len(LABELS)
    assert all(p.stat().st_ino == ino for p, ino in finished.items())   # not rewritten
    assert_same_as(reference, out)
    # nothing left: no worker starts, the results are rebuilt from the traces alone
    assert sweep(tiny, "resumed", "--resume")[0] == 0
    res = results(out)
    assert res["config"]["sweep"]["resumed"] == 4 and res["config"]["sweep"]["workers"] == []
    assert_same_as(reference, out)


def test_resume_keeps_its_jobs_traces_and_sets_the_rest_aside(tiny, reference):
    """--resume into a folder that also holds traces of no job of this sweep (another mode, set or drafter): they
    stayed beside the sweep's own, unlisted. Now they move to earlier-runs/, while the finished jobs' traces stay
    untouched and resumed (every job here: no cluster starts), and results.json's trace_files lists exactly those."""
    import shutil

    tmp, _ = tiny
    out = tmp / "resume-strays"
    shutil.copytree(reference, out)
    own = {p: p.stat().st_ino for p in (out / "traces").rglob("*.json")}
    stray = out / "traces" / "tiny" / "dflash" / "p2.json"
    for where in ("traces/tiny/ddtree/p2.json", "traces/other/ar/p2.json", "drafters/d/traces/tiny/ar/p2.json"):
        (out / where).parent.mkdir(parents=True)
        shutil.copy(stray, out / where)
    rc, _ = sweep(tiny, "resume-strays", "--resume")
    res = results(out)
    assert rc == 0 and res["config"]["sweep"]["resumed"] == len(PROMPTS)
    assert {p: p.stat().st_ino for p in (out / "traces").rglob("*.json")} == own   # kept, not rewritten
    assert res["trace_files"] == sorted(str(p.relative_to(out)) for p in own) and len(own) == 4 * len(LABELS)
    earlier = out / res["config"]["earlier_traces"]
    assert sorted(str(p.relative_to(earlier)) for p in earlier.rglob("*.json") if p.parent != earlier) == [
        "drafters/d/traces/tiny/ar/p2.json", "traces/other/ar/p2.json", "traces/tiny/ddtree/p2.json"]
    assert not (out / "drafters").exists()
    assert_same_as(reference, out)


def test_ctrl_c_is_a_flag_that_cannot_be_swallowed():
    """Inside ctrl_c_sets, SIGINT sets the flag instead of raising: code that catches the KeyboardInterrupt (as
    Ray's blocking calls can, inside their own loop) cannot lose it. A second Ctrl-C raises; outside, it raises."""
    from engine.bench.sweep import ctrl_c_sets

    # a shell that starts pytest in the background (`cmd &`) hands it SIGINT ignored: start from Python's default
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_round_trip(ctrl_c_sets)
    finally:
        signal.signal(signal.SIGINT, inherited)


def _ctrl_c_round_trip(ctrl_c_sets) -> None:
    flag = threading.Event()
    with ctrl_c_sets(flag):
        try:
            signal.raise_signal(signal.SIGINT)   # its handler runs before the next line
        except KeyboardInterrupt:   # what swallowed the Ctrl-C before
            pass
        assert flag.is_set()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)   # its handler runs before the next line
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_resume_refuses_other_settings(tiny, reference, capsys):
    """Traces made with other settings are not mixed in: one line naming the file and the setting,
    before any cluster starts."""
    tmp, args = tiny
    rc = cli(["bench", *args, "--ray", "local", "--out", str(reference), "--resume", "--seed", "1"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and line.startswith("error: resume: ") and "was made with seed=0, not 1" in line


SWAPS = {"block": ["--block-size", "4"], "dtype": ["--dtype", "bfloat16"], "draft": ["--draft-dtype", "float32"],
         "calibration": ["--calibration", "fixed"]}


@pytest.mark.parametrize("swap, key", [("drafter", "drafter"), ("target", "target"), ("block", "block_size"),
                                       ("dtype", "dtype"), ("draft", "draft_head_dtype"),
                                       ("calibration", "calibration")])
def test_resume_refuses_traces_of_other_models(tiny, reference, capsys, swap, key):
    """A trace made by another drafter, target, block size or precision (the target's; the drafter's vocabulary
    projection: bf16 unless --draft-dtype is given), or with another run setting that the CLI's defaults fill
    (calibration), is not finished work for this sweep: refused, naming the file and the setting, before any
    cluster starts (it was taken as done and mixed in)."""
    from tiny import save_tiny

    tmp, args = tiny
    other_t, other_d = save_tiny(tmp / "other-models", "llama", 1, block_size=4)
    flag = {"drafter": "--drafter", "target": "--target"}
    if swap in SWAPS:
        extra = SWAPS[swap]
    else:
        extra = [flag[swap], str(other_d if swap == "drafter" else other_t)]
    rc = cli(["bench", *args, *extra, "--ray", "local", "--out", str(reference), "--resume"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and line.startswith("error: resume: ") and f"was made with {key}=" in line, line


def test_resume_takes_a_model_folder_named_another_way(tiny, reference, monkeypatch):
    """The same folders given as relative paths: the traces are this sweep's, every job is resumed (no cluster)."""
    import argparse

    from engine.bench.main import add_bench_args, plan
    from engine.bench.sweep import add_sweep_args, load_finished, make_jobs

    tmp, args = tiny
    monkeypatch.chdir(tmp)
    rel = [os.path.relpath(a, tmp) if a.startswith(str(tmp)) else a for a in args]
    parser = argparse.ArgumentParser()
    add_sweep_args(add_bench_args(parser.add_subparsers()))
    a = parser.parse_args(["bench", *rel, "--ray", "local", "--out", str(reference), "--resume"])
    todo, sets = plan(a)
    jobs = make_jobs(sets, [a.drafter], [a.temperature])
    assert len(load_finished(reference, jobs, todo, a)) == len(PROMPTS)


def test_drafters_with_ray_is_refused(tiny, capsys):
    """`--drafters A,B --ray` ran --drafter alone, silently: refused, naming --drafters, before any cluster starts."""
    tmp, args = tiny
    i = args.index("--drafter")
    drafter, rest = args[i + 1], args[:i] + args[i + 2:]
    rc = cli(["bench", *rest, "--drafters", f"{drafter},random", "--ray", "local", "--out", str(tmp / "two")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and line.startswith("error: drafters: a sweep runs one drafter"), line


def test_no_ray_installed_is_one_line(tiny, tmp_path, monkeypatch, capsys):
    """Without the ray package: one line naming the version to install, exit 2 (not a traceback)."""
    _, args = tiny
    monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` raises ModuleNotFoundError, as when not installed
    rc = cli(["bench", *args, "--ray", "local", "--out", str(tmp_path / "noray")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and lines[-1] == "error: ray: Ray is not installed (pip install ray==2.60.0)", lines[-3:]


def test_worker_without_the_models(tiny, cluster, capsys):
    tmp, args = tiny
    bad = [a if a != args[3] else str(tmp / "no-such-target") for a in args]
    assert cli(["bench", *bad, "--ray", "local", "--workers", "1", "--out", str(tmp / "nomodels")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: workers: no worker could load the models: worker 0 on ")
    assert "127.0.0.1" in line and "no-such-target is not a folder" in line


def test_no_cluster_at_address(tiny, tmp_path):
    _, args = tiny
    p = subprocess.run([sys.executable, "-m", "engine", "bench", *args, "--ray", "127.0.0.1:9", "--out",
                        str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ray: no Ray cluster at 127.0.0.1:9 (")
    assert "ray start --head" in lines[0]


def test_app_and_single_process_bench_never_import_ray(tiny):
    tmp, args = tiny
    code = ("import sys, app.__main__ as am\n"
            "from app.loader import ModelLoader\nfrom app.ui import build_ui\n"
            "build_ui(ModelLoader(am.parse_args(['--no-model']), enabled=False))\n"
            "from engine.__main__ import main\n"
            f"assert main(['bench', *{args!r}, '--modes', 'ar,dflash', '--max-new-tokens', '4', "
            f"'--out', {str(tmp / 'noray')!r}]) == 0\n"
            "print('ray' in sys.modules, 'engine.bench.sweep' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-2:] == ["False", "True"]   # the sweep module is loaded (the CLI), ray is not

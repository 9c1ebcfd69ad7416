"""The benchmark as a sweep over a Ray cluster: `python -m engine bench ... --ray ADDRESS|local`.

Size: over 500 lines because the driver, its workers' lifecycle (restarts, retries, a lost node) and --resume are
one protocol over the same jobs.

A job is one prompt of one set, for one drafter at one temperature, with every variant (mode, rule)
run one after the other on one worker: a prompt's speed ratios are measured side by side on one
device, as in the single-process bench. Workers are Ray actors, one per GPU (one per CPU slot on a
cluster without GPUs), each loading the models once and warming up. The driver hands out jobs,
writes each finished job's traces where the single-process bench writes them (workers need no shared
disk) and aggregates results.json and report.md from them with the bench's own code.

Failures: a worker that dies mid-job (killed, out of memory, node lost) is restarted by Ray and its
job goes back to the queue, to another worker when one is free; a job is tried at most MAX_ATTEMPTS
times, then named in results.json ("failed") and the sweep goes on. Only a finished job is saved and
counted, once (jobs are keyed). `--resume` loads the jobs whose traces are all on disk and runs the rest;
every other trace in --out (another set, mode or drafter, a job left half done) moves to earlier-runs/.

Only this module imports ray, and only once a sweep starts: the app and the single-process bench never do.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..decode.config import DecodeConfig
from ..errors import InputError
from ..options import DTYPE_NAMES, EMBEDDED_NAME, auto_dtype
from ..paths import REPO, default_drafter
from ..trace import trace_drafter
from .main import (Variant, aggregate, check_drafter_flags, decode_config, drafter_label, engine_info, parse_drafters,
                   plan, prepare, run_config, run_prompt, save_traces, set_aside_traces, start_out, trace_path,
                   write_results)
from .main import main as bench_main

MAX_ATTEMPTS = 3          # a job that fails (or kills its worker) this often is given up, and named
WORKER_RESTARTS = 5       # Ray restarts a dead worker this often (each restart reloads the models)
# a resumed trace must have been made with every run setting (and models and precision: model_keys); the block
# size is the drafter's unless --block-size sets it (model_keys)
DECODE_KEYS = tuple(f.name for f in fields(DecodeConfig) if f.name != "block_size")
RAY_VERSION = "2.60.0"    # the version requirements.txt pins and docs/benchmark.md names


@dataclass(frozen=True)
class Job:
    set: str
    id: str
    prompt: str
    drafter: str | None      # job dimensions even where the CLI gives one of each
    temperature: float

    @property
    def name(self) -> str:
        return f"{self.set}/{self.id} (drafter {self.drafter or 'default'}, T={self.temperature:g})"

    def paths(self, out: Path, todo: list[Variant]) -> list[Path]:
        return [trace_path(out, self.set, v.label, self.id) for v in todo]


def make_jobs(sets: dict[str, list[dict]], drafters: list, temperatures: list[float]) -> list[Job]:
    return [Job(s, p["id"], p["prompt"], d, t) for s, ps in sets.items() for p in ps
            for d in drafters for t in temperatures]


# -- the worker (a Ray actor) --------------------------------------------------------------------

class BenchWorker:
    """Loads the models once per drafter, warms up, then runs jobs. A load failure is kept and
    reported by ready(), naming this worker, instead of raising (Ray would restart it in a loop)."""

    def __init__(self, args: argparse.Namespace, todo: list[Variant], warm_prompt: str):
        import ray

        self.args, self.todo, self.warm = args, todo, warm_prompt
        self.engines: dict = {}
        self.where = {"host": socket.gethostname(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}
        self.error, self.info, self.load_s = None, {}, 0.0
        try:
            eng = self.engine(args.drafter)
        except Exception as e:  # noqa: BLE001 -- any load failure is this worker's, reported by name
            self.error = f"cannot load the models: {_first_line(e)}"
            return
        self.info = {**engine_info(eng, args), "load_s": round(self.load_s, 2)}
        if any("auto" in (v.max_shifted, v.max_trie_nodes) for v in todo):
            from ..decode.cost import engine_profile
            self.info["cost"] = engine_profile(eng).as_dict()

    def engine(self, drafter):
        if drafter not in self.engines:
            from ..decode import Engine
            from ..models.args import models_from_args

            t0 = time.perf_counter()
            eng = Engine(models_from_args(self.args, drafter))
            self.load_s += time.perf_counter() - t0  # loading only, as the single-process bench counts it
            prepare(eng, self.todo, {"warm-up": [{"prompt": self.warm}]}, self.args)
            self.engines[drafter] = eng
        return self.engines[drafter]

    def ready(self) -> dict:
        return {**self.where, **self.info, "error": self.error}

    def run_job(self, job: Job) -> dict:
        """{"traces": JSON text of {label: trace}} or {"skipped": why} (bad input, e.g. too long)."""
        if self.error:
            return {"load_error": self.error}
        eng = self.engine(job.drafter)
        args = copy.copy(self.args)
        args.temperature = job.temperature
        try:
            traces = run_prompt(eng, eng.encode_prompt(job.prompt), self.todo, args, args.max_new_tokens)
        except InputError as e:
            return {"skipped": str(e)}
        return {"traces": json.dumps(traces)}  # traces travel as JSON, never pickled


# -- the cluster ---------------------------------------------------------------------------------

def connect(address: str, num_cpus: int | None = None):
    """Ray, connected to the cluster at `address` ("host:port", "auto") or to a new local one
    ("local"). Usage stats are off by construction; a local cluster listens on loopback only."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if address == "local":
        # Ray's switch for a loopback-only node (named for Windows and macOS, honoured everywhere):
        # the node binds 127.0.0.1 instead of looking up a route to the outside. Read at import.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    elif address != "auto":
        _check_reachable(address)
    try:
        import ray
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "ray":   # Ray is there but lacks a dependency: say which
            raise
        raise InputError("ray", f"Ray is not installed (pip install ray=={RAY_VERSION})") from None

    if ray.is_initialized():
        return ray
    kw = dict(num_cpus=num_cpus, include_dashboard=False) if address == "local" else {}
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR",
                 runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InputError("ray", f"no Ray cluster at {address}: {_first_line(e)}") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds, not after Ray's minute of retries, when nothing listens at host:port."""
    if address.startswith("ray://"):
        raise InputError("ray", "Ray Client addresses (ray://) are not supported: run the sweep on a node of "
                                "the cluster with --ray auto or the head's host:6379")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InputError("ray", f"{address!r} is not host:port, 'auto' or 'local'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise InputError("ray", f"no Ray cluster at {address} ({e.strerror or e}); start one with "
                                "`ray start --head` (README: Sweeps on Ray)") from None


def worker_options(ray, args) -> tuple[int, dict]:
    """How many workers and what each reserves: a GPU each when the cluster has GPUs (and --device
    allows them), else one CPU each."""
    res = ray.cluster_resources()
    gpus = int(res.get("GPU", 0)) if args.device != "cpu" else 0
    if args.device.startswith("cuda") and not gpus:
        raise InputError("device", "the Ray cluster has no GPU")
    n, opts = (gpus, {"num_gpus": 1, "num_cpus": 1}) if gpus else (int(res.get("CPU", 1)), {"num_cpus": 1})
    return max(1, min(n, args.workers or n)), opts


# -- the driver ----------------------------------------------------------------------------------

@dataclass
class Worker:
    n: int
    actor: object
    name: str = ""
    lost: bool = False

    def __str__(self) -> str:
        return self.name or f"worker {self.n}"


@dataclass
class Sweep:
    """Hands jobs to ready workers, saves and counts each finished job once, retries failed ones."""
    ray: object
    args: argparse.Namespace
    todo: list[Variant]
    queue: deque
    out: Path
    done: dict = field(default_factory=dict)        # Job -> {label: trace}
    calls: dict = field(default_factory=dict)       # ObjectRef -> (Worker, Job | None: readiness)
    workers: list = field(default_factory=list)
    idle: list = field(default_factory=list)
    infos: dict = field(default_factory=dict)       # worker n -> what it loaded, where
    attempts: Counter = field(default_factory=Counter)
    avoid: dict = field(default_factory=dict)       # Job -> workers it failed on
    skipped: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    retried: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    restarting: dict = field(default_factory=dict)  # worker n -> (Worker, when to ask again if ready)
    stopping: threading.Event = field(default_factory=threading.Event)   # Ctrl-C: stop handing out jobs

    def start(self, n: int, opts: dict, warm_prompt: str) -> None:
        cls = self.ray.remote(BenchWorker).options(max_restarts=WORKER_RESTARTS, **opts)
        for i in range(n):
            w = Worker(i, cls.remote(self.args, self.todo, warm_prompt))
            self.workers.append(w)
            self.await_ready(w)

    def await_ready(self, w: Worker, delay: float = 0.0) -> None:
        """Ask the worker whether it is ready (has loaded the models), now or after `delay` seconds."""
        if delay:
            self.restarting[w.n] = (w, time.monotonic() + delay)
        else:
            self.calls[w.actor.ready.remote()] = (w, None)

    def run(self, bar) -> None:
        while (self.queue or any(job for _, job in self.calls.values())) and not self.stopping.is_set():
            for w, t in list(self.restarting.values()):
                if t <= time.monotonic():
                    del self.restarting[w.n]
                    self.await_ready(w)
            self.dispatch()
            if not self.calls and not self.restarting:  # every worker lost
                if not self.infos:
                    raise InputError("workers", "no worker could load the models: " + "; ".join(self.lost))
                for job in list(self.queue):
                    self.give_up(job, "no worker left", bar)
                return
            if not self.calls:  # only restarting workers
                time.sleep(0.2)
                continue
            ready, _ = self.ray.wait(list(self.calls), num_returns=1, timeout=0.5)
            for ref in ready:
                self.settle(ref, bar)

    def dispatch(self) -> None:
        while self.idle and self.queue:
            w = self.idle.pop()
            job = next((j for j in self.queue if self.may_run(j, w)), self.queue[0])
            self.queue.remove(job)
            # named: `ps` on a node and Ray's task list show which prompt each worker decodes
            self.calls[w.actor.run_job.options(name=f"job {job.name}").remote(job)] = (w, job)

    def may_run(self, job: Job, w: Worker) -> bool:
        """A retried job goes to a worker it has not failed on, while one is left."""
        tried = self.avoid.get(job, set())
        return w.n not in tried or all(x.n in tried for x in self.workers if not x.lost)

    def settle(self, ref, bar) -> None:
        from ray.exceptions import ActorUnavailableError, RayError, RayTaskError

        w, job = self.calls.pop(ref)
        try:
            r = self.ray.get(ref)
        except RayTaskError as e:  # the job raised; the worker lives on
            cause = getattr(e, "cause", None) or e
            if job is None:
                self.lose(w, f"failed: {_first_line(cause)}")
                return
            self.retry(job, w, f"{type(cause).__name__}: {_first_line(cause)}", bar)
            self.idle.append(w)
        except RayError as e:  # the worker died (killed, out of memory, node lost)
            if job is not None:
                self.retry(job, w, f"{w} died ({type(e).__name__})", bar)
            if job is not None or isinstance(e, ActorUnavailableError):
                self.await_ready(w, 1.0)  # Ray restarts it: ask again until it has reloaded
            else:  # for good: out of restarts, or it could not even start (e.g. no engine package there)
                self.lose(w, f"died ({type(e).__name__}: {_first_line(e)})")
        else:
            self.on_ready(w, r) if job is None else self.on_result(w, job, r, bar)

    def on_ready(self, w: Worker, info: dict) -> None:
        w.name = f"worker {w.n} on {info['host']} ({info['ip']}" + (
            f", {info['device_used']})" if "device_used" in info else ")")
        if info["error"]:
            self.lose(w, info["error"])
            return
        self.infos[w.n] = {**info, "jobs": self.infos.get(w.n, {}).get("jobs", 0)}
        self.idle.append(w)

    def on_result(self, w: Worker, job: Job, r: dict, bar) -> None:
        if "load_error" in r:  # restarted where the models are missing: not the job's fault
            self.queue.appendleft(job)
            self.lose(w, r["load_error"])
            return
        if "skipped" in r:
            self.skipped.append({"set": job.set, "id": job.id, "error": r["skipped"]})
        else:
            traces = json.loads(r["traces"])
            save_traces(self.out, job.set, job.id, traces)
            self.done[job] = traces
        self.infos[w.n]["jobs"] += 1
        self.idle.append(w)
        bar.update()

    def retry(self, job: Job, w: Worker, why: str, bar) -> None:
        self.attempts[job] += 1
        self.retried.append({"job": job.name, "worker": str(w), "error": why})
        if self.attempts[job] >= MAX_ATTEMPTS:
            self.give_up(job, why, bar)
        else:
            self.avoid.setdefault(job, set()).add(w.n)
            self.queue.appendleft(job)

    def give_up(self, job: Job, why: str, bar) -> None:
        from tqdm import tqdm

        if job in self.queue:
            self.queue.remove(job)
        errors = [r["error"] for r in self.retried if r["job"] == job.name] or [why]
        self.failed.append({"set": job.set, "id": job.id, "drafter": job.drafter,
                            "temperature": job.temperature, "attempts": self.attempts[job], "errors": errors})
        tqdm.write(f"job {job.name} failed after {self.attempts[job]} attempts, given up: {why}", file=sys.stderr)
        bar.update()

    def lose(self, w: Worker, why: str) -> None:
        from tqdm import tqdm

        w.lost = True
        self.lost.append(f"{w}: {why}")
        tqdm.write(f"{w}: {why}; the sweep goes on without it", file=sys.stderr)
        self.ray.kill(w.actor, no_restart=True)

    def stop(self) -> None:
        for w in self.workers:
            self.ray.kill(w.actor, no_restart=True)


def model_keys(args, v: Variant, device: str) -> dict:
    """The models a trace of `v` must have been made with, as the trace's config names them (trace.make_trace):
    the target, the drafter (`ar` drafts nothing: "none"), the block size when --block-size sets it (else
    it is the drafter's own; round 0's blocks shrink to --max-new-tokens), and the precision on the trace's
    `device` (a worker's: --dtype auto resolves there) of the target, the drafter and its vocabulary projection
    (decode.Engine: bf16 unless --draft-dtype is given)."""
    target = args.target or EMBEDDED_NAME
    drafter = args.drafter or "default"
    if drafter == "default":
        drafter = default_drafter(target)
    keys = {"target": target, "drafter": trace_drafter(v.mode, drafter)}
    if args.block_size and v.mode != "ar":
        keys["block_size"] = min(args.block_size, args.max_new_tokens)
    named = lambda flag: DTYPE_NAMES.get(flag, flag) if flag not in (None, "", "auto") else None  # noqa: E731
    keys["dtype"] = named(args.dtype) or auto_dtype(device.partition(":")[0])
    if v.mode != "ar":
        keys["draft_dtype"] = named(args.draft_dtype) or keys["dtype"]
        keys["draft_head_dtype"] = keys["draft_dtype"] if named(args.draft_dtype) else "bfloat16"
    return keys


def _same(k: str, had, want) -> bool:
    """Equal settings; a model folder named two ways (relative, absolute) is the same folder."""
    if had == want:
        return True
    if k in ("target", "drafter") and isinstance(had, str) and isinstance(want, str):
        a, b = Path(had).expanduser(), Path(want).expanduser()
        return a.exists() and b.exists() and a.resolve() == b.resolve()
    return False


def load_finished(out: Path, jobs: list[Job], todo: list[Variant], args) -> dict[Job, dict]:
    """--resume: the jobs whose every variant's trace is on disk. A trace made with other decoding
    settings or other models (target, drafter, block size) is an error (a mixed sweep would be
    meaningless); an unreadable one is run again."""
    from ..trace import TraceError, load_trace

    want = {v.label: {k: getattr(decode_config(args, v, args.max_new_tokens), k) for k in DECODE_KEYS} for v in todo}
    variants = {v.label: v for v in todo}
    done = {}
    for job in jobs:
        paths = job.paths(out, todo)
        if not all(p.exists() for p in paths):
            continue
        try:
            traces = {v.label: load_trace(p) for v, p in zip(todo, paths)}
        except TraceError:
            continue
        for (label, tr), path in zip(traces.items(), paths):
            models = model_keys(args, variants[label], str(tr["config"].get("device", "")))
            for k, v in {**want[label], **models, "temperature": job.temperature}.items():
                if not _same(k, tr["config"].get(k), v):
                    raise InputError("resume", f"{path} was made with {k}={tr['config'].get(k)!r}, not {v!r}: "
                                               "use another --out, or the same settings")
        done[job] = traces
    return done


def run_sweep(args) -> dict:
    todo, sets = plan(args)
    out, args.traces = Path(args.out), True  # the traces are the sweep's record of finished jobs
    jobs = make_jobs(sets, [args.drafter], [args.temperature])
    done = load_finished(out, jobs, todo, args) if args.resume else {}
    # every other trace in --out is an earlier run's (another set, mode or drafter; a job left half done)
    earlier = set_aside_traces(out, {p for job in done for p in job.paths(out, todo)})
    sweep = Sweep(None, argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "func"}), todo,
                  deque(j for j in jobs if j not in done), out)
    interrupted = drive(sweep, args, len(jobs), len(done)) if sweep.queue else False
    finished = {**done, **sweep.done}
    results = sweep_results(args, todo, sets, jobs, finished, sweep, interrupted, len(done))
    results["config"]["earlier_traces"] = earlier
    results["trace_files"] = sorted(str(p.relative_to(out)) for j in jobs if j in finished for p in j.paths(out, todo))
    return results


def drive(sweep: Sweep, args, total: int, resumed: int) -> bool:
    """Connects, starts the workers, runs the queue; True when Ctrl-C stopped it."""
    from tqdm import tqdm

    was_up = _ray_is_up()
    sweep.ray = ray = connect(args.ray)
    bar = tqdm(total=total, initial=resumed, desc="jobs", unit="job", file=sys.stderr, dynamic_ncols=True)
    try:
        with ctrl_c_sets(sweep.stopping):
            sweep.start(*worker_options(ray, args), min((j.prompt for j in sweep.queue), key=len))
            sweep.run(bar)
    except KeyboardInterrupt:
        sweep.stopping.set()
    finally:
        bar.close()
        sweep.stop()
        if not was_up:
            ray.shutdown()
    if sweep.stopping.is_set():
        print("\ninterrupted: writing the results of the jobs that finished (--resume runs the rest)",
              file=sys.stderr)
    return sweep.stopping.is_set()


@contextlib.contextmanager
def ctrl_c_sets(flag: threading.Event):
    """SIGINT sets `flag` instead of raising KeyboardInterrupt, while inside. A KeyboardInterrupt raised
    where it cannot propagate (a finaliser such as a dropped ObjectRef's, a callback from Ray's C++ side)
    is printed and dropped: Ctrl-C then went unnoticed and the sweep ran to the end. A flag cannot be
    dropped. A second Ctrl-C raises as usual. Outside the main thread (no handler can be set) signals
    stay as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        if flag.is_set():
            raise KeyboardInterrupt
        flag.set()

    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray and ray.is_initialized())


def sweep_results(args, todo, sets, jobs, done, sweep: Sweep, interrupted: bool, resumed: int) -> dict:
    """results.json as the single-process bench writes it, plus what the sweep ran where."""
    infos = [sweep.infos[n] for n in sorted(sweep.infos)]
    first = infos[0] if infos else {}
    engine = {k: v for k, v in first.items() if k not in ("host", "ip", "pid", "error", "load_s", "cost", "jobs")}
    if not engine and done:  # every job was resumed: what was loaded, as the traces recorded it
        engine = traces_info(next(iter(done.values())))
    config = run_config(args, engine, todo, max((i["load_s"] for i in infos), default=0.0), interrupted,
                        sweep.skipped)
    config["failed"] = sweep.failed
    config["sweep"] = {"address": args.ray, "jobs": len(jobs), "resumed": resumed, "lost": sweep.lost,
                       "retried": sweep.retried,
                       "workers": [{k: v for k, v in i.items() if k not in ("error", "cost")} for i in infos]}
    label = drafter_label(config.get("drafter_name") or "drafter")   # one drafter: aggregate's {drafter: traces}
    by_set = {s: [(j.id, {label: done[j]}) for j in jobs if j.set == s and j in done] for s in sets}
    results = aggregate(by_set, todo, args.temperature, config)
    if "cost" in first:
        results["cost"] = first["cost"]
    return results


def traces_info(traces: dict[str, dict]) -> dict:
    """engine_info's model fields as one finished job's traces recorded them."""
    c = next((t["config"] for t in traces.values() if t["config"]["mode"] != "ar"),
             next(iter(traces.values()))["config"])
    return dict(target_name=c["target"], drafter_name=c["drafter"], device_used=c["device"],
                dtype_used=c["dtype"], block_size=c["block_size"])


# -- CLI -----------------------------------------------------------------------------------------

def add_sweep_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep on a Ray cluster (README: Sweeps on Ray)")
    g.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the prompts as jobs on Ray workers: host:port of a running cluster "
                        "(`ray start --head`), auto, or local (a cluster on this machine). Traces are always saved")
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help="at most N workers (default: one per GPU, or one per CPU on a cluster without GPUs)")
    g.add_argument("--resume", action="store_true", help="skip the jobs whose traces are in --out (with --ray)")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.workers is not None and args.workers < 1:   # with or without --ray (0 is no flag left out)
        raise InputError("workers", f"must be at least 1, got {args.workers}")
    if args.ray is None:
        for flag in ("resume", "workers"):
            if getattr(args, flag) not in (None, False):
                raise InputError(flag, "needs --ray")
        return bench_main(args)
    if args.device.startswith("cuda:"):
        raise InputError("device", "with --ray each worker uses the GPU Ray gives it: use auto or cuda")
    check_drafter_flags(args)
    if args.drafters:
        names = parse_drafters(args.drafters)
        if len(names) > 1:   # jobs, traces and results are per drafter: a silent --drafter-only run misleads
            raise InputError("drafters", "a sweep runs one drafter: run one sweep per drafter (--drafter, each "
                                         "with its own --out), or the single-process bench for side-by-side drafters")
        args.drafter, args.drafters = names[0], None
    write_results(start_out(args), run_sweep(args))
    return 0

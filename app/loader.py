"""Loading the models in a background thread, so the UI is up (and shows progress) meanwhile.

One target is shared by every drafter: the drafter given at start (--drafter) loads with it, and each
other drafter of the Drafter menu (the shipped ones, for the embedded target) gets its own Engine over
the same target the first time a run asks for it. A float32 load also gets a bfloat16 copy of the target
and that drafter (the Race tab's precision choice: ~285 MB for the embedded pair), measured after the float32
profile."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

from engine.errors import InputError
from engine.options import EMBEDDED_NAME
from engine.paths import shipped_drafters

from .tokentext import bidi_visible

log = logging.getLogger("reanchor.app")


def dtype_name(engine) -> str:
    """An Engine's target dtype as the page names it: float32, bfloat16."""
    return str(engine.models.dtype).replace("torch.", "")


def shown_name(name: str) -> str:
    """A model's name as the page shows it: a hub id or the embedded model's name as given, a folder on
    the server by its last part only (the page must not tell visitors where the server keeps files)."""
    name = bidi_visible(str(name))
    if os.path.isabs(name) or name.startswith(("~", ".")) or Path(name).exists():
        return Path(name.rstrip("/\\")).name or name
    return name


class ModelLoader:
    """Holds the shared, read-only Engines once loaded; no per-run state lives here."""

    def __init__(self, args, enabled: bool = True, race: bool = True):
        """`args`: the model flags of engine.models.args.add_model_args. `race`: also build what the Race tab needs
        after the profile, the bfloat16 copy (profiled) and the calibration race (a bench of Explore runs needs
        neither: ~1 minute on the embedded model)."""
        self.args = args
        self.enabled = enabled
        self.race = race
        self.engine = None               # the Engine of the drafter given at start
        self.engines: dict[str, object] = {}
        self.error: str | None = None
        self.started = None
        self.loaded_s: float | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._on_phase: list = []
        self.profile_step: tuple[int, int] | None = None   # (done, total) while the hardware is profiled
        self.profile_s: float | None = None
        self.profile_dtype: str | None = None   # the dtype being profiled now
        self.profile_times: dict[str, float] = {}   # dtype -> seconds its profile took
        self.by_dtype: dict[str, object] = {}   # dtype -> the start drafter's Engine in it (the race's precision)
        self.profiles_done = threading.Event()   # set when profiling ends (or never runs): a race waits on it
        self.calibrating = False
        self.race_calibration: list[dict] | None = None   # the calibration race's lanes (app.race.calibrate)

    def on_phase(self, fn) -> None:
        """Call fn() whenever the status line moves to a new phase: models loaded (the hardware profile may
        still run: "ready: ..., measuring this machine"), and loading ended (loaded or failed); at once if it
        has ended. Calling it once more than needed is harmless: fn reads the loader's state."""
        if self.enabled and self.loading:
            self._on_phase.append(fn)
            if self.ready:  # loaded already, the profile running: that phase's text now
                fn()
        if not self.loading:  # ended meanwhile (or never started)
            fn()

    def _phase(self) -> None:
        for fn in list(self._on_phase):
            fn()

    def start(self) -> "ModelLoader":
        if self.enabled and self._thread is None:
            self.started = time.monotonic()
            self._thread = threading.Thread(target=self._load, name="model-loader", daemon=True)
            self._thread.start()
        return self

    def _load(self) -> None:
        try:
            from engine.decode import Engine
            from engine.models.args import models_from_args

            engine = Engine(models_from_args(self.args))
            self.engines[self.default_drafter()] = engine
            self.profile_step = (0, 0) if engine.models.drafter is not None else None
            self.by_dtype[dtype_name(engine)] = engine
            self.engine = engine
            self.loaded_s = time.monotonic() - self.started
        except Exception as e:  # InputError (bad --target / --drafter) and anything else
            self.error = str(e).splitlines()[0] if str(e) else type(e).__name__
            if isinstance(e, InputError):  # the user's mistake, named: one line, no traceback
                print(f"error: {self.error}", file=sys.stderr, flush=True)
            else:
                traceback.print_exc()
        if self.profile_step is not None:
            self._phase()   # a fresh page says "ready" while the profile runs, not "loading models… 0 s"
            self._profile(self.engine)
            if self.race:
                if dtype_name(self.engine) == "float32":
                    self._profile(self._lower_precision())
                self._calibrate()
        self.profile_step = None
        self.profiles_done.set()
        from .session import give_back_memory

        give_back_memory()  # what loading and profiling freed: glibc kept ~110 MiB of it (docs/security.md)
        self._phase()

    def _lower_precision(self):
        """The start drafter's Engine over a bfloat16 copy of the models (built once, here, after the float32
        profile): the Race tab's bfloat16 lanes, plain decoding too. None if it cannot be built."""
        from engine.decode import Engine
        from engine.models import in_dtype
        import torch

        try:
            engine = Engine(in_dtype(self.engine.models, torch.bfloat16))
        except Exception as e:  # a model that cannot run in bfloat16: the race's bfloat16 choice names it
            log.warning("no bfloat16 copy for the race: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return None
        self.by_dtype["bfloat16"] = engine
        log.info("bfloat16 copy of the target and drafter built for the race's precision choice")
        return engine

    def _calibrate(self) -> None:
        """The race preset's calibration race (app.race.calibrate), once the profiles are measured: seconds, bounded;
        the page is up meanwhile and the preset says it is not measured yet."""
        from .race import calibrate

        self.calibrating = True
        try:
            limit = getattr(self.args, "calibration_seconds", None)   # --calibration-seconds (python -m app)
            self.race_calibration = calibrate(self) if limit is None else calibrate(self, limit_s=limit)
        except Exception:  # the preset then says it measured nothing; the app serves on
            traceback.print_exc()
        finally:
            self.calibrating = False

    def _profile(self, engine) -> None:
        """The auto budget's hardware profile of `engine`, measured now (the model answers runs meanwhile; an
        auto run started meanwhile waits for it), so that no auto run spends its first seconds measuring."""
        from engine.decode.cost import engine_profile

        if engine is None:
            return
        name = self.profile_dtype = dtype_name(engine)

        def step(done: int, total: int) -> None:
            self.profile_step = (done, total)
            if done == 0:
                log.info("measuring this machine in %s: verify and draft cost by size (%d steps)", name, total)

        self.profile_step = (0, 0)
        t0 = time.monotonic()
        try:
            engine_profile(engine, progress=step)
            self.profile_times[name] = time.monotonic() - t0
            self.profile_s = sum(self.profile_times.values())
            log.info("hardware profile measured in %s in %.1f s", name, self.profile_times[name])
        except Exception:  # the runs that need it measure it themselves (and say what failed)
            traceback.print_exc()

    # -- drafters ---------------------------------------------------------------------------------
    def drafter_choices(self) -> dict[str, str]:
        """Menu label -> what load_drafter reads: the drafter given at start, then (for the embedded target,
        which they are trained for) every shipped drafter."""
        given = self.args.drafter or "default"
        choices = {} if given == "default" else {given: given}
        if (self.args.target or EMBEDDED_NAME) == EMBEDDED_NAME:
            choices |= {d.name: str(d) for d in shipped_drafters()}
        if not choices:
            choices[given] = given
        return choices

    def default_drafter(self) -> str:
        """The menu label of the drafter loaded at start."""
        given = self.args.drafter or "default"
        return given if given != "default" else next(iter(self.drafter_choices()))

    def engine_for(self, label: str | None):
        """The Engine drafting with `label`'s drafter over the shared target, loaded on first use (raises
        engine.errors.InputError for a label not in the menu or a drafter that does not fit the target)."""
        from engine.errors import InputError

        label = label or self.default_drafter()
        with self._lock:
            if label in self.engines:
                return self.engines[label]
            choices = self.drafter_choices()
            if label not in choices:
                raise InputError("drafter", f"unknown drafter {label!r} (one of {', '.join(choices)})")
            from engine.decode import Engine
            from engine.models import load_drafter

            m = self.engine.models
            drafter, name = load_drafter(choices[label], m.target, m.device, next(
                m.drafter.parameters()).dtype if m.drafter is not None else m.dtype, m.target_name)
            self.engines[label] = Engine(replace(m, drafter=drafter, drafter_name=name))
            return self.engines[label]

    # -- status -----------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def profiling(self) -> bool:
        return self.profile_step is not None

    @property
    def loading(self) -> bool:
        """Models loading, or the hardware being profiled after (the status line keeps counting)."""
        return self.enabled and (not self.ready or self.profiling) and self.error is None

    def race_dtypes(self) -> list[str]:
        """The precisions a race can run in: the loaded dtype, and bfloat16 after a float32 load (its copy is built
        after the float32 profile; with no drafter there is none). Before the load ends (the page is built without
        torch), from the flags: --dtype auto reads as float32 unless --device names CUDA."""
        if self.engine is not None:
            loaded = dtype_name(self.engine)
        else:
            d, dev = self.args.dtype, str(self.args.device)
            loaded = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(d, d) \
                if d not in (None, "", "auto") else "bfloat16" if dev.startswith("cuda") else "float32"
        return [loaded, "bfloat16"] if loaded == "float32" and self.args.drafter != "none" else [loaded]

    def race_engine(self, dtype: str):
        """The start drafter's Engine in `dtype` (the race's precision), or InputError naming what there is."""
        if self.engine is not None and dtype == dtype_name(self.engine):
            return self.engine
        if dtype in self.by_dtype:
            return self.by_dtype[dtype]
        have = ", ".join(self.by_dtype) or "none yet"
        raise InputError("precision", f"{dtype!r} is not loaded (this app holds {have}; a bfloat16 copy comes "
                                      "with a float32 load that has a drafter; the app log says if it failed)")

    def profile_status(self) -> str:
        """What the page says of the auto budget's hardware profile."""
        if self.calibrating:
            return ("measuring this machine for the race preset: a short calibration race of every candidate lane "
                    "(once; runs may start meanwhile)")
        if self.profiling:
            done, total = self.profile_step
            which = " in bfloat16 (the race's bfloat16 lanes)" if self.profile_dtype == "bfloat16" and \
                "float32" in self.by_dtype else ""
            return (f"measuring this machine for the auto budget{which}: verify and draft cost by size, "
                    f"{done} of {total or '…'} (once; an auto run started now waits for it)")
        if not self.profile_s:
            return ""
        each = ", ".join(f"{d} {s:.0f} s" for d, s in self.profile_times.items()) \
            if len(self.profile_times) > 1 else ""
        return f"machine measured in {self.profile_s:.0f} s{f' ({each})' if each else ''} (auto budgets start at once)"

    def status(self) -> str:
        if not self.enabled:
            return "replay only: no model loaded (--no-model); load a trace to explore it"
        if self.error:
            return f"model loading failed: {self.error}"
        if self.ready:
            m = self.engine.models
            profile = self.profile_status()
            return (f"ready: target {shown_name(m.target_name)}, drafter {shown_name(m.drafter_name)}, {m.device}, "
                    f"{dtype_name(self.engine)} (loaded in {self.loaded_s:.1f} s; other drafters "
                    "of the menu load on their first run)" + (f"; {profile}" if profile else ""))
        t = time.monotonic() - self.started if self.started else 0.0
        return (f"loading models… {t:.0f} s (the first start de-quantises the embedded model, ~25 s); "
                "example traces can be explored meanwhile")

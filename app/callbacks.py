"""The page's callbacks: each reads the session's state (gr.State) and returns component values
(app.views); the loaded Engine is shared read-only (app.loader). Wired to components in app.ui.

Size: over 500 lines because every event's callback is a method of the one Callbacks object app.ui wires, and they
share its session helpers (_session, _show_new, begin); the work itself lives in app.views, app.runs and app.session."""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import shutil
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

import gradio as gr

from engine.options import DEFAULT_RULE, MODES, RULES, TREE_MODES

from . import analysis, plots, records, render, runs, session, views
from .runs import bad_input, check_choice, end_status, engine_or_error, parse_inputs, start_run, stream_run

log = logging.getLogger("reanchor.app")

TEXT_INTERVAL_S = 0.1       # text/metrics at most this often: each update shows every round since the last
FIG_INTERVAL_S = 0.5        # round figure at most this often while streaming
TIMELINE_INTERVAL_S = 1.0   # timeline at most this often while streaming, times rounds / TIMELINE_ROUNDS
TIMELINE_ROUNDS = 200       # (a timeline of n bars costs the page O(n) per draw: keep its share bounded)
STREAM_TAIL = 300           # generated tokens shown while a run streams; the whole text once it ends
CURVE_NODES = (4, 8, 16, 32, 64)   # the budget curve's node budgets (anchor included)
CURVE_TOKENS = 64           # new tokens per point of the budget curve
CURVE_POINTS = 1 + len(TREE_MODES) * len(CURVE_NODES)   # dflash's chain, then each tree mode at each budget
# What goto returns (views.NAV_OUTPUTS, as app.ui wires them): slider, caption, round figure, follow, and the text
# view (skipped unless a windowed view must follow the round: views.text_follow)
NAV_OUTPUTS = len(views.NAV_OUTPUTS)


def _state(st) -> dict:
    return st if isinstance(st, dict) else session.new_state()


# Round switches (goto and everything built on it) run concurrently (queue=False). The page sends them in order, but
# on a loaded machine their answers can land out of order, and an older answer landing last took the slider and
# caption back to its round: a typed jump that never showed. So each switch takes a ticket, and one whose ticket is no
# longer the session's newest when its views are built answers nothing; the round asked for is the session's view at
# once, so that a "next" sent right after a jump steps from the round jumped to.
NAV_LOCK = threading.Lock()


def ask_round(st: dict, i, delta: int = 0) -> tuple[int, int]:
    """Make round i (None: the view + delta, read under the lock, so that two quick steps make two) the session's
    view, clamped; return it and this switch's ticket."""
    with NAV_LOCK:
        i = session.clamp_round(st.get("trace"), st.get("view", 0) + delta if i is None else i)
        st["view"], st["view_in_run"] = i, True
        st["nav_ticket"] = ticket = st.get("nav_ticket", 0) + 1
    return i, ticket


def drop_export(path: str | None) -> None:
    """Delete a trace's exported copy (session.export_trace's folder; an example's own file is no export)."""
    if path and Path(path).parent.name.startswith(session.EXPORT_PREFIX):
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def unexpected(label: str, e: Exception) -> gr.Error:
    """An exception no check foresaw (a bug): a toast naming the control and one log line with where."""
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    log.error("%s: %s: %s%s", label, type(e).__name__, e, at)
    return gr.Error(runs.toast_text(f"{label}: could not show this ({type(e).__name__}: {str(e)[:200]})"),
                    title="Error", print_exception=False)


@contextlib.contextmanager
def named_errors(label: str):
    """Any exception but our own messages becomes a message naming `label`."""
    try:
        yield
    except gr.Error:
        raise
    except Exception as e:
        raise unexpected(label, e) from None


def shows(label: str):
    """For callbacks on the load and show paths (runs too): nothing reaches the page as a bare "Error"."""
    def wrap(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stream(*args, **kwargs):
                with named_errors(label):
                    yield from fn(*args, **kwargs)
            return stream

        @functools.wraps(fn)
        def call(*args, **kwargs):
            with named_errors(label):
                return fn(*args, **kwargs)
        return call
    return wrap


class CurveRuns:
    """The budget curve's runs as one for Stop and the run limit (it stands in the session's "run"): stopping it
    stops the point under way and starts no other; after `seconds` it stops itself."""

    def __init__(self, seconds: float):
        self._lock, self._run, self.ended, self.time_limited = threading.Lock(), None, False, False
        self._timer = threading.Timer(seconds, self._time_up)
        self._timer.daemon = True
        self._timer.start()

    def _time_up(self) -> None:
        self.time_limited = True
        self.stop()

    def take(self, run) -> bool:
        """`run` is the point under way; False (and it is stopped) once the curve has ended."""
        with self._lock:
            self._run = run
            if self.ended:
                run.stop()
            return not self.ended

    def stop(self) -> None:
        """Stop and the run limit: the point under way and every later one."""
        with self._lock:
            self.ended = True
            self._timer.cancel()
            if self._run is not None:
                self._run.stop()

    def close(self) -> None:
        """The curve is done (or its client gone): no timer left, no point running."""
        self._timer.cancel()
        with self._lock:
            if self._run is not None:
                self._run.stop()


class Callbacks:
    def __init__(self, loader, trace_choices: list[tuple[str, str]], sessions: session.Sessions):
        self.loader, self.trace_choices, self.sessions = loader, trace_choices, sessions

    def _session(self, st) -> dict:
        """The session's state, marked used (Sessions frees idle and surplus sessions' traces)."""
        st = _state(st)
        self.sessions.touch(st)
        return st

    def _show_new(self, st, trace, trace_file, status: str, example: str | None = None, i: int | None = None,
                  compare: dict | None = None):
        """Show another trace in this session (a loaded one, the example labelled `example`), on round i (None: its
        most instructive round), beside `compare` (None: no comparison); the one it replaces is freed. The views are
        built on a copy of the state, which replaces the session's only once they are: if building fails, the
        session keeps showing (and holding) what it showed."""
        had = session.owns_traces(st) and compare is None
        new = session.State(st)
        new.update(trace=trace, trace_file=trace_file, example=bool(example), example_label=example, freed=None,
                   keyed=None, compare=compare)
        try:
            out = views.show_trace(new, i, status)
        except BaseException:
            session.drop_export(trace_file)   # the session never held it
            raise
        if compare is not None:
            out.update(zip(views.COMPARE_OUTPUTS, views.compare_views(new)))
            new["compare_shown"] = True
        with NAV_LOCK:   # a round switch still being built for the trace replaced answers nothing (goto)
            old_file = st.get("trace_file")
            st.update(new, nav_ticket=st.get("nav_ticket", 0) + 1)
        if old_file != trace_file:
            session.drop_export(old_file)   # the replaced trace's export: one file a session
        self.sessions.touch(st)
        if had:
            session.give_back_memory()
        return views.ordered({**out, "state": st})

    # -- page load and status ---------------------------------------------------------------------
    @shows("Example trace")
    def on_load(self, st):
        st = self._session(st)
        if st.get("trace") is None and self.trace_choices:
            try:
                st.update(trace=session.load_example(self.trace_choices[0][1]), trace_file=self.trace_choices[0][1],
                          example=True, example_label=self.trace_choices[0][0])
            except ValueError as e:
                log.warning("example trace: %s", e)
        return views.ordered(views.show_trace(st, None, "example trace" if st.get("trace") else ""))

    def on_unload(self, request: gr.Request):
        """The tab closed: Gradio would keep the session's state for an hour, and its last outputs (for deep
        links: a whole text view) until 100 more sessions came; free both now."""
        holder = getattr(request.request.app, "state_holder", None) if request.request else None
        if holder is not None and request.session_hash in holder:
            holder.delete_state(request.session_hash)  # calls Sessions.release on our state
            with holder.lock:
                holder.session_data.pop(request.session_hash, None)
                holder.time_last_used.pop(request.session_hash, None)

    def on_status(self):
        return self.loader.status(), gr.Timer(active=self.loader.loading)

    # -- runs -------------------------------------------------------------------------------------
    def begin(self, st, settings: runs.Settings, drafter: str | None, label: str):
        """Refuse a second run in the session, start one with `settings` and the drafter labelled `drafter` (the
        Drafter menu's): (state, engine, run, ids, config)."""
        st = self._session(st)
        engine = engine_or_error(self.loader, drafter)
        if st.get("run") is not None:
            raise bad_input(f"{label}: a run is already in progress in this session; press Stop first")
        run, ids = start_run(engine, settings)
        st["run"] = run
        config = run.trace_config()   # the engine's builder: the trace a finished run saves has the same block
        return st, engine, run, ids, config

    def _trace_drafter(self, trace: dict, label: str) -> str | None:
        """The Drafter menu's label of the drafter `trace` was run with (None: the menu's first; a trace of another
        target, or a drafter not in the menu, is refused: its run again would not be the same run)."""
        cfg = trace.get("config") if isinstance(trace.get("config"), dict) else {}
        engine = engine_or_error(self.loader)
        target = cfg.get("target")
        if isinstance(target, str) and target != engine.models.target_name:
            raise bad_input(f"{label}: the trace shown was recorded on target {target[-80:]!r}; this app runs "
                            f"{engine.models.target_name[-80:]!r}; a comparison runs the trace's own prompt and "
                            "settings on its own target", "Compare")
        drafter = cfg.get("drafter")
        if not isinstance(drafter, str) or drafter in ("none", ""):
            return None
        base = lambda v: str(v).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]  # noqa: E731
        for name, where in self.loader.drafter_choices().items():
            if drafter in (name, where) or base(drafter) == base(where):
                return name
        raise bad_input(f"{label}: the trace shown was drafted by {base(drafter)[:80]!r}, which is not in the "
                        "Drafter menu", "Compare")

    def _live_update(self, st, live, clock: dict):
        """One streaming update of the view (text, metrics, slider, and the figures at their own pace)."""
        skip = gr.skip()
        now, i = time.monotonic(), len(live["rounds"]) - 1
        fig_out = cap_out = tl_out = skip
        at = i if st.get("follow") else None
        if st.get("follow") and (now - clock["fig"] >= FIG_INTERVAL_S or i == 0):
            _, cap_out, fig_out = views.round_outputs(st, i, prefetch=False)
            clock["fig"] = now
        elif not st.get("follow") and not st.get("view_in_run") and not st.get("view_zero"):
            # not following, and the inspector still shows the trace this run replaced (its caption, figure and
            # round number): show this run's round 0, once
            at, st["view"], st["view_zero"] = 0, 0, True
            _, cap_out, fig_out = views.round_outputs(st, 0, prefetch=False)
        if now - clock["tl"] >= TIMELINE_INTERVAL_S * max(1.0, i / TIMELINE_ROUNDS) or i == 0:
            tl_out, clock["tl"] = views.timeline_json(live, st.get("view")), now
        status = "stopping at the next round…" if st.get("stopping") else f"running… round {i}"
        return views.ordered({"state": st, "text_box": views.text(live, tail=STREAM_TAIL),
                              "metrics": views.metrics(st, status), "slider": views.slider(live, at), "caption": cap_out,
                              "round_plot": fig_out, "timeline_plot": tl_out, "export_btn": gr.update(interactive=False)})

    @shows("Run")
    def on_run(self, prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v, nodes_v, drafter_v, st):
        settings = parse_inputs(prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v, nodes_v)
        st, engine, run, ids, config = self.begin(st, settings, drafter_v, "Run")
        st["follow"] = True if st.get("follow") is None else st["follow"]
        st.update(compare=None, example=False, example_label=None)  # this run replaces both
        # the round in view belongs to the trace this run replaces until the inspector follows one of this run's
        # rounds or the user picks one ("view_in_run"); till then, not following, it shows the run's round 0, and
        # the finished run opens on its most instructive round. A playback of the old trace stops (its ticks would
        # walk the new run's rounds).
        st.update(view_in_run=False, view_zero=False, playing=False)
        live = None
        clock = {"text": 0.0, "fig": 0.0, "tl": 0.0}
        log.info("run started: %s", config)
        yield views.ordered({"state": st, "metrics": render.metrics_view(None, status="running… (prefill)"),
                             "export_btn": gr.update(interactive=False), "example_trace": gr.update(value=None),
                             "tables": "", **dict(zip(views.COMPARE_OUTPUTS, views.compare_reset(st))),
                             "token_no": gr.update(value=None), "rule_rounds": ""})  # token_no: a number in the old text
        try:
            for live, rec in stream_run(engine, run, ids, config):
                if st.get("trace_file"):   # the replaced trace's export goes with it (kept if stopped in the prefill)
                    session.replace_export(st, "trace_file", None)
                st.update(trace=live, example=False, freed=None)
                i = len(live["rounds"]) - 1
                if st.get("follow"):
                    st["view"], st["view_in_run"] = i, True
                if time.monotonic() - clock["text"] < TEXT_INTERVAL_S and i > 0:
                    continue  # fast rounds (tiny models) would flood the page; the next update has them
                clock["text"] = time.monotonic()
                yield self._live_update(st, live, clock)
        finally:  # normal end, Stop, or the generator closed (client gone / cancelled)
            run.stop()
            st["run"], st["stopping"] = None, False
            log.info("run ended after %d rounds", len(live["rounds"]) if live else 0)
        if not run.output_ids:  # stopped in the prefill: no trace; the one shown stays
            raise bad_input(f"Run: {end_status(run)} before the first token", "Stopped")
        trace = run.trace()
        session.replace_export(st, "trace_file", session.export_trace(trace))
        st.update(trace=trace, example=False, freed=None)
        self.sessions.touch(st)
        status = end_status(run)
        yield views.ordered(views.show_trace(
            st, st.get("view", 0) if st.get("view_in_run") and not st.get("follow") else None, status, new_text=False))

    def on_stop(self, st):
        """Ends this session's run at the next round boundary; the run's own updates report it."""
        active = isinstance(st, dict) and st.get("run") is not None
        log.info("stop requested (run active: %s)", active)
        if active:
            st["stopping"] = True
            st["run"].stop()

    @shows("Run comparison")
    def on_compare(self, mode_v, rule_v, st):
        """The trace shown run again with the comparison's mode and rule: its own prompt tokens, temperature, seed,
        length, budgets, drafter and target. Runs of different lengths are refused (their tau and counterfactuals
        would compare different texts)."""
        label = "Run comparison"
        check_choice("Comparison mode", mode_v, MODES)
        check_choice("Comparison rule", rule_v, RULES)
        st = self._session(st)
        trace = st.get("trace")
        if not trace or not trace.get("rounds"):
            raise bad_input(f"{label}: no trace shown to compare with; run one or load one first")
        settings = runs.trace_settings(trace, label).with_assembly(mode_v, rule_v)
        st, engine, run, ids, config = self.begin(st, settings, self._trace_drafter(trace, label), label)
        last, skip = 0.0, gr.skip()
        try:
            for live, _ in stream_run(engine, run, ids, config):
                if time.monotonic() - last >= 1.0:
                    last = time.monotonic()
                    status = f"comparison running… round {len(live['rounds']) - 1}"
                    yield (st, render.metrics_view(session.stats_of(live), status=status),
                           skip, skip, skip, skip, skip, skip, skip, skip)
        finally:
            run.stop()
            st["run"], st["stopping"] = None, False
        if not run.output_ids:
            raise bad_input(f"Run comparison: {end_status(run)} before the first token", "Stopped")
        other = run.trace()
        mine, theirs = len(trace.get("output_ids") or []), len(other.get("output_ids") or [])
        if mine != theirs:
            raise bad_input(f"{label}: the comparison made {theirs} tokens, the trace shown {mine}; runs of "
                            "different lengths are not compared (at T>0 a run may stop sooner)", "Compare")
        st["compare"], st["compare_shown"] = other, True
        self.sessions.touch(st)
        *panel, table = views.compare_views(st)
        yield (st, *panel, views.metrics(st, "with comparison"), table)

    @shows("Inspect the comparison run")
    def on_swap(self, st, i: int | None = None):
        """The comparison run takes the round inspector (on round i, else its most instructive), and the trace it was
        compared with becomes the comparison: the Compare panel swaps sides, and the same button swaps back."""
        label = "Inspect the comparison run"
        st = self._session(st)
        if st.get("compare") is None or not st.get("trace"):
            raise bad_input(f"{label}: no comparison run to inspect; run one first (Run comparison)")
        if st.get("run") is not None:
            raise bad_input(f"{label}: a run is in progress; press Stop first")
        mine, other, old_file = st["trace"], st["compare"], st.get("trace_file")
        out = self._show_new(st, other, session.export_trace(other), "comparison run in the inspector (swapped)",
                             i=i, compare=mine)
        drop_export(old_file)  # the download button's copy of the trace that left the inspector (made again if back)
        return out

    @shows("Compare")
    def on_swap_click(self, st, evt: gr.EventData):
        """A round of the comparison run clicked in the Compare panel: that run takes the inspector, on that round."""
        r = (getattr(evt, "_data", None) or {}).get("round")
        if not isinstance(r, int) or isinstance(r, bool):
            return views.ordered({})
        return self.on_swap(st, r)

    @shows("Budget curve")
    def on_budget_curve(self, prompt_v, temp_v, seed_v, max_v, st):
        """tau and tokens/s of both tree modes against the node budget N, on the prompt box's prompt
        (DDTree's budget figure for this prompt and this machine); dflash's chain for reference. The whole curve
        is one run for the queue: Stop and the run limit (session.RUN_SECONDS) end it, not just its point."""
        st = self._session(st)
        settings = parse_inputs(prompt_v, "ddtree", DEFAULT_RULE, temp_v, seed_v, max_v)
        engine = engine_or_error(self.loader)
        if st.get("run") is not None:
            raise bad_input("Budget curve: a run is in progress in this session; press Stop first")
        points: list[dict] = []
        curve = st["run"] = CurveRuns(session.RUN_SECONDS)
        try:
            for mode, N in [("dflash", None)] + [(m, N) for m in TREE_MODES for N in CURVE_NODES]:  # CURVE_POINTS
                run, _ = start_run(engine, replace(settings, mode=mode, max_new_tokens=min(settings.max_new_tokens,
                                                                                          CURVE_TOKENS), max_trie_nodes=N))
                if not curve.take(run):
                    break
                result = run.finish()
                if curve.ended:   # the point cut short measures nothing
                    break
                stats = result["stats"]
                points.append({"mode": mode, "nodes": N, "tau": stats["tau"], "tokens_per_s": stats["tokens_per_s"]})
                yield plots.budget_curve_figure(points), {"budget_curve": points}
        finally:
            curve.close()
            st["run"], st["stopping"] = None, False
        if curve.ended and len(points) < CURVE_POINTS:
            why = (f"stopped at the time limit ({session.RUN_SECONDS:g} s a run)" if curve.time_limited
                   else "stopped")
            yield plots.budget_curve_figure(points), {"budget_curve": points, "stopped": why}
            raise bad_input(f"Budget curve: {why} after {len(points)} of {CURVE_POINTS} points", "Stopped")

    # -- round navigation -------------------------------------------------------------------------
    @shows("Round inspector")
    def goto(self, st, i, delta: int = 0):
        """Round i (None: the view + delta) in the inspector."""
        st = self._session(st)
        trace = st.get("trace")
        if trace is None and st.get("freed"):
            raise bad_input(f"Round inspector: this session's trace was freed ({st['freed']}); load or run again",
                            "Trace freed")
        i, ticket = ask_round(st, i, delta)
        i, cap, fig = views.round_outputs(st, i)
        if st.get("nav_ticket") != ticket:   # a later switch (or load) came in while this one was built
            return (gr.skip(),) * NAV_OUTPUTS
        following = st.get("run") is not None and trace and i == len(trace.get("rounds", [])) - 1
        follow_out = gr.skip()
        if st.get("run") is not None and not following and st.get("follow"):
            st["follow"] = False  # looking at an earlier round: stop following the live one
            follow_out = False
        return i, cap, fig, follow_out, views.text_follow(st, i)

    def step_phase(self, st, delta: int | None):
        """The step-through: the next or previous phase of the round in view (from the whole round, delta +1 opens
        phase 1, -1 the last); None: the whole round again."""
        st = _state(st)
        n, now = len(render.PHASES), int(st.get("phase") or 0)
        st["phase"] = 0 if delta is None else (now + delta) % (n + 1)
        return self.goto(st, st.get("view", 0))

    def on_projector(self, v, st):
        _state(st)["projector"] = bool(v)
        return self.goto(st, _state(st).get("view", 0))

    def on_fold(self, st, evt: gr.EventData):
        if not (getattr(evt, "_data", None) or {}).get("fold"):
            return (gr.skip(),) * NAV_OUTPUTS
        _state(st)["unfold"] = not _state(st).get("unfold")
        return self.goto(st, _state(st).get("view", 0))

    def step(self, st, delta: int):
        return self.goto(st, None, delta)

    def last(self, st):
        return self.goto(st, len((_state(st).get("trace") or {}).get("rounds", [])) - 1)

    @shows("Text view")
    def on_token_click(self, st, evt: gr.EventData):
        """The token's round, and its number in "Go to round of token #"."""
        data = getattr(evt, "_data", None) or {}
        r, k = data.get("r"), data.get("k")
        if r is None:
            return (gr.skip(),) * (NAV_OUTPUTS + 1)
        return (*self.goto(st, max(0, int(r))),  # -1: the prefill's token; show the first round
                int(k) if isinstance(k, int) and not isinstance(k, bool) else gr.skip())

    @shows("Timeline")
    def on_timeline_click(self, st, evt: gr.EventData):
        r = (getattr(evt, "_data", None) or {}).get("round")
        if r is None:
            return (gr.skip(),) * NAV_OUTPUTS
        return self.goto(st, int(r))

    @shows("Go to round of token #")
    def on_token_go(self, k, st):
        trace = (st or {}).get("trace")
        if not trace:
            raise bad_input("Go to round of token #: no run to look into")
        rounds_of_tok = records.token_rounds(trace)
        try:
            k = int(k)
        except (TypeError, ValueError, OverflowError):
            raise bad_input("Go to round of token #: enter a token number") from None
        if not 0 <= k < len(rounds_of_tok):
            raise bad_input(f"Go to round of token #: must be between 0 and {len(rounds_of_tok) - 1}")
        return self.goto(st, max(0, rounds_of_tok[k]))

    def on_play(self, st):
        st["playing"] = not st.get("playing")
        if st["playing"] and st.get("run") is not None:
            st["follow"] = False  # playing a live run's rounds: stop jumping to the newest one
        return gr.Timer(active=st["playing"]), gr.update(value="⏸ pause" if st["playing"] else "▶ play"), \
            gr.update(value=bool(st.get("follow")))

    @shows("Play")
    def on_tick(self, st):
        trace = st.get("trace")
        n = len(trace.get("rounds", [])) if trace else 0
        i = st.get("view", 0) + 1
        if i >= n or not st.get("playing"):  # the end, or a run replaced the trace played
            st["playing"] = False
            return (*(gr.skip(),) * NAV_OUTPUTS, gr.Timer(active=False), gr.update(value="▶ play"))
        return (*self.goto(st, i), gr.Timer(active=True), gr.skip())

    # -- traces -----------------------------------------------------------------------------------
    @shows("Load trace")
    def on_upload(self, file, st):
        """`file`: Gradio's file entry, unprocessed (RAW: its preprocess left an empty temporary file in the
        upload folder on every load), or a path."""
        st = self._session(st)
        path = file.get("path") if isinstance(file, dict) else file
        if not isinstance(path, str) or not path.lower().endswith(".json"):
            name = os.path.basename(path) if isinstance(path, str) else path
            raise bad_input(f"Load trace: {str(name)[:80]!r} is not a .json file", "Bad trace")
        # checked before it is claimed: an upload of Gradio's route (never another file of its folder) named .json
        # is deleted when the session ends, loaded or refused; anything else is left to the upload sweep
        self.sessions.claim_upload(st, path)
        if st.get("run") is not None:
            raise bad_input("Load trace: a run is in progress; press Stop first")
        try:
            trace = session.load_trace_file(path)
        except ValueError as e:
            raise bad_input(str(e), "Bad trace") from None
        # the session's own copy, freed with it (the upload, shared by identical uploads, goes when the last
        # session that loaded it ends: Sessions.claim_upload)
        return self._show_new(st, trace, session.export_trace(trace), "loaded trace")

    @shows("Example trace")
    def on_example_trace(self, label, st):
        path = dict(self.trace_choices).get(label) if isinstance(label, str) else None
        if not path:
            raise bad_input(f"Example trace: {str(label)[:80]!r} is not one of: "
                            f"{', '.join(name for name, _ in self.trace_choices)}")
        st = self._session(st)
        if st.get("run") is not None:
            raise bad_input("Example trace: a run is in progress; press Stop first")
        return self._show_new(st, session.load_example(path), path, "example trace", example=label)

    @shows("Analyse the example traces")
    def on_example_analyses(self):
        """The paper's analyses over every shipped example trace at once (recorded with the embedded model)."""
        traces = [session.load_example(path) for _, path in self.trace_choices]
        if not traces:
            raise bad_input("Analyse the example traces: none are installed (assets/traces)")
        res = {"pooled": {"traces": [label for label, _ in self.trace_choices],
                          "rounds": sum(len(t["rounds"]) for t in traces)}, **analysis.compute(traces)}
        scope = f"{len(traces)} example traces pooled"
        return (res, *analysis.figures(res, scope), analysis.paper_tables(traces, scope))

    @shows("Back to the current run")
    def on_current_analyses(self, st):
        """The analyses of the trace shown (after the pooled ones)."""
        res, h, g = views.analyses(_state(st).get("trace"))
        trace = _state(st).get("trace")
        return res, h, g, analysis.paper_tables(trace, "current run") if trace and trace.get("rounds") else ""

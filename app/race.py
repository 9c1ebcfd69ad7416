"""The Race tab: two to four decoding modes on one prompt, plain decoding (`ar`) the reference lane. Lanes run
interleaved round by round on this machine (one round of each lane in turn: they share its noise), each lane's
clock counting only its own rounds, each streaming its text as it decodes; the finished race is replayed side by
side on one clock from those times (app.race_view draws it).
Also: the demo preset this machine's measured profile picks, the race's HTML export, and a lane opened in the
round inspector through the app's own trace-loading path (Callbacks.on_upload)."""
from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import gradio as gr

from engine.decode import DecodeConfig
from engine.decode.cost import budget_for, profiled
from engine.errors import InputError
from engine.options import DEFAULT_RULE, DEFAULT_TREE_NODES, auto_label, mode_rule

from . import assets, race_view, session, views
from .page import PLOTLY_JS
from .examples import WRITTEN
from .runs import bad_input, engine_or_error, field_error, parse_inputs, stream_run

log = logging.getLogger("reanchor.app")

REFERENCE = "ar"
LANES = {  # label -> what the lane shows under its name
    "ar": "plain decoding: the target alone, one token a pass",
    "dflash": "DFlash: one drafted block a round",
    "ddtree": f"DDTree: a {DEFAULT_TREE_NODES}-node draft tree",
    "reanchor": "ReAnchor: shifted blocks, every offset",
    "reanchor-tree": f"ReAnchor tree: {DEFAULT_TREE_NODES} nodes",
    "ddtree-auto": "DDTree, node budget sized for this machine",
    "reanchor-auto": "ReAnchor, shifted blocks and nodes sized for this machine",
    "reanchor-tree-auto": "ReAnchor tree, node budget sized for this machine",
}
MIN_LANES, MAX_LANES = 2, 4
RACE_MAX_NEW = 256          # a demo, not a benchmark: bounds what a session's race holds (four traces)
UPDATE_S = 0.1              # the live lanes at most this often (every round on the embedded model)
DEMO_PROMPT = dict(WRITTEN)["code: Fibonacci"]
NOTE = ("Lanes ran interleaved round by round on this machine (one round of each lane in turn, so they share its "
        "load); each lane's clock counts only its own rounds. Replayed side by side on that clock (measured time) "
        "or on target forward passes (hardware-free).")


def lane_config(label: str) -> tuple[str, str, str | None, str | None]:
    """(mode, rule, max_shifted, max_trie_nodes) of a lane label: a mode, or MODE-auto (engine.options)."""
    return auto_label(label) or (label, mode_rule(label, DEFAULT_RULE), None, None)


AUTO_LANES = ["ar", "ddtree-auto", "reanchor-tree-auto"]
PRECISIONS = {"float32": "float32 (exact, token for token)", "bfloat16": "bfloat16 (faster trees on a CPU, not exact)"}
# The calibration race at load: every candidate lane in groups beside plain decoding, interleaved round by round on
# the preset's prompt, CALIBRATION_TOKENS each, ended after CALIBRATION_S (the lanes' tokens/s so far then count).
CALIBRATION_TOKENS = 64   # the preset's own length: a tree's first tokens (a code block's opening) are its easiest
CALIBRATION_S = 45.0
# The first group once, this many tokens a lane, unmeasured: measured first after the load, plain decoding ran cold
# (8.4 tokens/s, where the races after it gave 11-14) and every float32 lane's ×N read high (2.0× for ~1.4×).
WARMUP_TOKENS = 8
# Few lanes, so that each gets rounds enough within the bound on a loaded machine: the start drafter's modes in the
# loaded precision, its trees' and chain's fastest in the other; the other shipped drafters' 32-node tree (float32:
# no auto budget without a profile of their own drafter).
START_MODES = {"float32": ["ddtree-auto", "reanchor-tree-auto", "dflash"], "bfloat16": ["ddtree-auto", "dflash"]}
OTHER_MODES = ["ddtree"]
# An inexact (bfloat16) configuration is chosen only when no exact one is at least this much faster than plain
# decoding and it is this much faster than the best exact one: the demo's promise is the same text as plain decoding
# (a bfloat16 lane can differ), so a faster bfloat16 one beside an exact win is named in the note instead.
CLEARLY_FASTER = 1.15


def precision_choices(dtypes: list[str]) -> list[tuple[str, str]]:
    """The Precision control's (label, value) pairs."""
    return [(PRECISIONS.get(d, d), d) for d in dtypes]


def calibration_lanes(dtypes: list[str], drafters: list[str]) -> list[list[tuple[str, str, str]]]:
    """The calibration race's groups of (dtype, drafter, lane label), each raced on its own with plain decoding in
    its precision first: lanes interleaved on one set of weights, since a lane stepped after another precision's
    finds its weights out of the caches (plain decoding, memory-bound, most). The start drafter's (drafters[0])
    modes in each precision, then the other drafters' in the loaded one."""
    groups = [[(d, drafters[0], REFERENCE)] + [(d, drafters[0], m) for m in START_MODES.get(d, START_MODES["float32"])]
              for d in dtypes]
    others = [(dtypes[0], dr, m) for dr in drafters[1:] for m in OTHER_MODES]
    return groups + ([[(dtypes[0], drafters[1], REFERENCE)] + others] if others else [])


def demo_preset(measured: list[dict] | None, loaded: str = "float32", drafter: str = "") \
        -> tuple[str, str, list[str], str, str]:
    """(dtype, drafter, lanes, why, figures) from the calibration race's measured tokens/s: `measured` = [{dtype,
    drafter, label, tps}], plain decoding (label "ar", the loaded dtype) among them; None: not measured yet (the
    loaded dtype's auto lanes). The fastest exact (`loaded`, float32) configuration where it is CLEARLY_FASTER than
    plain decoding (a faster inexact one then named in `why`), else an inexact one CLEARLY_FASTER than it; its lanes: plain decoding and that (dtype, drafter)'s two fastest modes. `why`: one sentence;
    `figures`: every candidate's tokens/s and ×N against plain decoding, a Markdown table."""
    plain: dict[str, float] = {}   # dtype -> its plain decoding's tokens/s (its first group's)
    group_ref: dict[int, float] = {}
    for m in measured or []:
        if m["label"] == REFERENCE and m.get("tps"):
            plain.setdefault(m["dtype"], m["tps"])
            group_ref[m.get("group", 0)] = m["tps"]
    ref = {"tps": plain[loaded]} if loaded in plain else None
    if ref is None:
        return loaded, drafter, AUTO_LANES, ("not measured yet (a short calibration race runs after this machine's "
                                             f"profile): {', '.join(AUTO_LANES[1:])} in {loaded} meanwhile"), ""
    cands = [m for m in measured if m["label"] != REFERENCE and m.get("tps") and m.get("group", 0) in group_ref]
    if not cands:
        return loaded, drafter, AUTO_LANES, f"the calibration race measured no speculative lane: {loaded}", ""
    # ×N against the loaded precision's plain decoding: against its own group's plain decoding (raced beside it),
    # times its precision's plain decoding over the loaded one's
    x = {id(m): m["tps"] / group_ref[m.get("group", 0)] * plain.get(m["dtype"], ref["tps"]) / ref["tps"]
         for m in cands}
    exact = [m for m in cands if m["dtype"] == loaded]
    best = max(exact or cands, key=lambda m: x[id(m)])
    inexact = max((m for m in cands if m["dtype"] != loaded), key=lambda m: x[id(m)], default=None)
    why = ""
    faster = inexact is not None and (not exact or x[id(inexact)] >= CLEARLY_FASTER * x[id(best)])
    if faster and exact and x[id(best)] >= CLEARLY_FASTER:   # an exact win: the demo stays exact
        why = (f"; {inexact['label']} in {inexact['dtype']} ran {x[id(inexact)] / x[id(best)]:.2f}× faster still, not "
               f"exact (pick it under Precision)")
    elif faster:
        why = (f", {x[id(inexact)] / x[id(best)]:.2f}× the best exact configuration ({best['label']} in {loaded})"
               if exact else "")
        best = inexact
    group = sorted((m for m in cands if (m["dtype"], m["drafter"]) == (best["dtype"], best["drafter"])),
                   key=lambda m: -x[id(m)])
    lanes = [REFERENCE] + [m["label"] for m in group[:2]]
    exact_word = "exact" if best["dtype"] == loaded else "not exact"
    why = (f"{best['label']} with the {best['drafter']} drafter in {best['dtype']} ({exact_word}) ran fastest here: "
           f"{x[id(best)]:.2f}× {loaded} plain decoding in a {CALIBRATION_TOKENS}-token calibration race{why}")
    rows = "\n".join(f"| {m['label']} | {m['drafter']} | {m['dtype']} | {m['tps']:.1f} | {x[id(m)]:.2f}× |"
                      for m in sorted(cands, key=lambda m: -x[id(m)]))
    figures = (f"| lane | drafter | precision | tokens/s | × {loaded} plain decoding ({ref['tps']:.1f} tokens/s) |\n"
               f"|---|---|---|---|---|\n{rows}")
    return best["dtype"], best["drafter"], lanes, why, figures


def versus(dtype: str) -> str:
    """What ×N is measured against: plain decoding in the race's precision."""
    return "plain decoding" if dtype == "float32" else f"plain decoding in {dtype}"


def badge_words(dtype: str) -> str:
    """What the texts are compared with: plain decoding of the same target in the same dtype (the badge's words;
    that a non-float32 race is not exact is said once, in the note: precision_note)."""
    return "plain decoding" if dtype == "float32" else f"plain decoding in {dtype}"


def precision_note(dtype: str) -> str:
    """The note's sentence on a race's precision: empty for float32 (exact)."""
    return "" if dtype == "float32" else (f" Not exact: {dtype} numerics change with the batch shape, so a lane's "
                                          "text may differ from plain decoding's (float32 is token for token).")


def check_lanes(lanes) -> list[str]:
    if not isinstance(lanes, (list, tuple)) or not all(isinstance(x, str) for x in lanes):
        raise bad_input(f"Lanes: pick {MIN_LANES} to {MAX_LANES} of: {', '.join(LANES)}")
    bad = [x for x in lanes if x not in LANES]
    if bad:
        raise bad_input(f"Lanes: {', '.join(repr(x)[:40] for x in bad)} not one of: {', '.join(LANES)}")
    lanes = sorted(dict.fromkeys(lanes), key=lambda x: (x != REFERENCE, list(LANES).index(x)))
    if not MIN_LANES <= len(lanes) <= MAX_LANES:
        raise bad_input(f"Lanes: pick {MIN_LANES} to {MAX_LANES}, got {len(lanes)}")
    return lanes


class LaneRuns:
    """A race's runs as the session's one run (st["run"]): Stop stops every lane at its next round boundary."""

    def __init__(self, runs: list):
        self.runs = runs

    def stop(self) -> None:
        for run in self.runs:
            run.stop()


def lane_end(run) -> str:
    """A finished lane's status: done, stopped (Stop), or cut by the per-run time limit."""
    return race_view.CUT if getattr(run, "time_limited", False) else \
        "stopped" if (run.result or {}).get("stopped") else "done"


def interleave(ids: list[int], runs: list[tuple], st: dict, every: float = UPDATE_S):
    """Step the lanes' runs one round each in turn, the order reversed every other sweep (a lane that has ended is
    passed over), so that they share the machine's load; each lane's clock (own, seconds) counts only the time spent stepping it: its prefill, its rounds
    and their records. `runs`: (Run, config) per lane. Yields (traces, own, statuses, ended) at most every `every`
    seconds while lanes run, then once with ended True: the final traces (None for a lane stopped in its prefill).
    The runs are the session's run (st["run"]) meanwhile."""
    n = len(runs)
    traces, own, statuses = [None] * n, [0.0] * n, ["running"] * n
    gens = [stream_run(run.engine, run, ids, cfg) for run, cfg in runs]
    st["run"] = LaneRuns([run for run, _ in runs])
    active, last, sweep = list(range(n)), 0.0, 0
    try:
        while active:
            # the order alternates sweep by sweep (A B C, C B A, ...): no lane always runs right after the same other
            # lane (whose memory traffic it would inherit)
            sweep += 1
            for i in list(active) if sweep % 2 else active[::-1]:
                t0 = time.perf_counter()
                live = next(gens[i], None)
                own[i] += time.perf_counter() - t0
                if live is not None:
                    traces[i] = live[0]
                    continue
                active.remove(i)
                run = runs[i][0]
                try:
                    traces[i] = run.trace()
                except InputError:   # stopped (or cut) in its prefill: no token, an empty lane
                    traces[i] = None
                statuses[i] = lane_end(run)
            if active and time.monotonic() - last >= every:
                last = time.monotonic()
                yield traces, own, statuses, False
    finally:
        for g in gens:
            g.close()   # stream_run stops its run
        st["run"] = None
    yield traces, own, statuses, True


def drafter_menu(loader) -> list[str]:
    """The race's Drafter menu: the start drafter first, then the loader's other choices."""
    start = loader.default_drafter()
    return [start] + [d for d in loader.drafter_choices() if d != start]


def calibrate(loader, tokens: int = CALIBRATION_TOKENS, limit_s: float = CALIBRATION_S) -> list[dict]:
    """The calibration race (at load, after the hardware profiles): calibration_lanes on the preset's prompt, each
    group interleaved round by round like a race's lanes, `tokens` each, stopped after its share of `limit_s`
    seconds (a lane's tokens/s so far then stands: two rounds at least, else None); fixed calibration, as the
    preset races. The first group runs WARMUP_TOKENS once before, unmeasured. [{group, dtype, drafter, label,
    tokens, tps}]."""
    dtypes = [d for d in loader.race_dtypes() if d in loader.by_dtype]
    groups = calibration_lanes(dtypes, drafter_menu(loader))
    out, t_all = [], time.monotonic()
    if groups:
        _race_group(loader, groups[0], dtypes, WARMUP_TOKENS, limit_s / len(groups))
    for g, group in enumerate(groups):
        out += [{**lane, "group": g} for lane in _race_group(loader, group, dtypes, tokens, limit_s / len(groups))]
    log.info("calibration race in %.1f s: %s", time.monotonic() - t_all,
             ", ".join(f"{m['label']} ({m['drafter']}, {m['dtype']}) {m['tps']}" for m in out))
    return out


def _race_group(loader, group: list[tuple[str, str, str]], dtypes: list[str], tokens: int, limit_s: float) \
        -> list[dict]:
    """One calibration group's lanes interleaved, `tokens` each, stopped after `limit_s`: [{dtype, drafter, label,
    tokens, tps}] (a lane whose engine does not load here left out, logged)."""
    lanes, runs = [], []
    for dtype, drafter, label in group:
        try:
            engine = loader.engine_for(drafter) if dtype == dtypes[0] else loader.race_engine(dtype)
        except Exception as e:  # noqa: BLE001 (a shipped drafter that does not load here: left out, logged)
            log.warning("calibration: no %s engine for %s: %s", dtype, drafter, e)
            continue
        mode, rule, k, N = lane_config(label)
        cfg = DecodeConfig(mode=mode, rule=rule, max_new_tokens=tokens, max_shifted=k, max_trie_nodes=N,
                           calibration="fixed")
        ids = engine.encode_prompt(DEMO_PROMPT)
        lanes.append({"dtype": dtype, "drafter": drafter, "label": label})
        runs.append((engine.run(ids, cfg, budget_for(engine, cfg)), {
            "mode": mode, "rule": rule, "temperature": 0.0, "seed": 0, "max_new_tokens": tokens,
            "max_shifted": k, "max_trie_nodes": N}))
    if not runs:
        return []
    st, t0 = {}, time.monotonic()
    for traces, own, _, ended in interleave(ids, runs, st, every=0.5):
        if not ended and time.monotonic() - t0 > limit_s:
            st["run"].stop()
    for lane, trace, s in zip(lanes, traces, own):
        # tokens/s over the lane's rounds, the prefill left out: a lane the bound stops early (plain decoding,
        # whose rounds are the most) would otherwise be judged mostly on its prefill
        marks = race_view.lane_marks(trace, s) if trace else []
        span = (marks[-1][0] - marks[0][0]) / 1000.0 if len(marks) > 2 else 0.0
        lane.update(tokens=marks[-1][2] if marks else 0,
                    tps=round((marks[-1][2] - marks[0][2]) / span, 2) if span > 0 else None)
    return lanes


class Race:
    """The race callbacks; per-session state in gr.State (st["race"]: the last race's lanes and payload)."""

    def __init__(self, loader, sessions: session.Sessions, callbacks):
        self.loader, self.sessions, self.cb = loader, sessions, callbacks

    def preset(self):
        """The demo preset's controls (prompt, lanes, tokens, repeatable, precision, drafter) and its note: one
        sentence, the calibration race's figures behind a disclosure."""
        dtype, drafter, lanes, why, figures = demo_preset(self.loader.race_calibration, self.loader.race_dtypes()[0],
                                                          self.loader.default_drafter())
        words = f"**Demo preset:** {', '.join(lanes)}, {min(64, RACE_MAX_NEW)} tokens: {why}." + (
            f"\n\n<details><summary>the calibration race's figures</summary>\n\n{figures}\n\n</details>"
            if figures else "")
        return DEMO_PROMPT, lanes, 64, True, dtype, drafter, words

    def on_tab(self, precision):
        """The tab shown: the preset's note, and the precisions the loaded app offers (the page was built before
        the load; the choice made is kept where it is offered)."""
        dtypes = self.loader.race_dtypes()
        return self.preset()[-1], gr.update(choices=precision_choices(dtypes),
                                            value=precision if precision in dtypes else dtypes[0])

    def _lanes_payload(self, labels, traces, statuses, ref, phase, dtype, own=None):
        own = own or [None] * len(labels)
        lanes = [race_view.lane_payload(lb, LANES[lb], statuses[i], traces[i], own[i]) for i, lb in enumerate(labels)]
        return race_view.payload(lanes, ref, phase, NOTE + precision_note(dtype), badge_words(dtype), versus(dtype))

    def _precision(self, precision, drafter=None):
        """The race's Engine in the chosen precision (the loaded one when none is given) and drafter (the start
        drafter when none is), waiting (and saying so) while a copy is still being built at load; yields status
        updates, returns (engine, dtype)."""
        engine_or_error(self.loader)            # a clear error while the models load, or after they failed
        loaded = self.loader.race_dtypes()[0]   # the loaded engine's dtype (app.loader imports this module)
        dtype = precision or loaded
        if drafter and drafter != self.loader.default_drafter():
            if drafter not in self.loader.drafter_choices():
                raise bad_input(f"Drafter: {str(drafter)[:40]!r} not one of: {', '.join(self.loader.drafter_choices())}")
            if dtype != loaded:
                raise bad_input(f"Drafter: a {dtype} race runs with the start drafter ({self.loader.default_drafter()}) "
                                f"only; pick {loaded} for {drafter}")
            try:
                return self.loader.engine_for(drafter), dtype
            except InputError as e:
                raise field_error(e) from None
        if dtype not in self.loader.race_dtypes():
            raise bad_input(f"Precision: {str(dtype)[:40]!r} not one of: {', '.join(self.loader.race_dtypes())}")
        while dtype not in self.loader.by_dtype and dtype != loaded and \
                not self.loader.profiles_done.is_set():
            yield gr.skip(), f"waiting for the {dtype} copy of the models ({self.loader.profile_status()})", gr.skip()
            self.loader.profiles_done.wait(1.0)
        try:
            return self.loader.race_engine(dtype), dtype
        except InputError as e:
            raise field_error(e) from None

    def on_race(self, prompt, lanes, max_new, repeatable, precision, st, drafter=None):
        """Run the lanes interleaved round by round, streaming them, in the chosen precision (plain decoding too);
        then the replay and the export."""
        st = st if isinstance(st, dict) else session.new_state()
        self.sessions.touch(st)
        settings = parse_inputs(prompt, REFERENCE, DEFAULT_RULE, 0.0, 0, max_new)
        p, n = settings.prompt, settings.max_new_tokens
        if n > RACE_MAX_NEW:
            raise bad_input(f"Max new tokens: a race runs at most {RACE_MAX_NEW}, got {n}")
        labels = check_lanes(lanes)
        if st.get("run") is not None:
            raise bad_input("Race: a run is already in progress in this session; press Stop first")
        engine, dtype = yield from self._precision(precision, drafter)
        calibration = "fixed" if repeatable else "online"
        try:
            ids = engine.encode_prompt(p)
        except InputError as e:
            raise field_error(e) from None
        ref = labels.index(REFERENCE) if REFERENCE in labels else None
        st.update(race_stop=False, race=None)
        skip = gr.skip()
        if self.loader.profiling and profiled(engine) is None and any("auto" in lb for lb in labels):
            yield skip, f"waiting for this machine's profile ({self.loader.profile_status()})", skip
        runs = []
        for label in labels:
            mode, rule, k, N = lane_config(label)
            cfg = DecodeConfig(mode=mode, rule=rule, temperature=0.0, seed=0, max_new_tokens=n, max_shifted=k,
                               max_trie_nodes=N, calibration=calibration)
            try:
                runs.append((engine.run(ids, cfg, budget_for(engine, cfg)),
                             {"mode": mode, "rule": rule, "temperature": 0.0, "seed": 0, "max_new_tokens": n,
                              "max_shifted": k, "max_trie_nodes": N}))
            except InputError as e:
                raise field_error(e) from None
        log.info("race started: %s, %d tokens, %s, %s budget, interleaved", labels, n, dtype, calibration)
        for traces, own, statuses, ended in interleave(ids, runs, st):
            if ended:
                break
            yield (race_view.payload_json(self._lanes_payload(labels, traces, statuses, ref, "live", dtype, own)),
                   f"racing {len(labels)} lanes, one round of each in turn… " +
                   ", ".join(f"{lb} {len((t or {}).get('rounds') or [])}" for lb, t in zip(labels, traces))
                   + " rounds", skip)
        phase = "stopped" if st.get("race_stop") else "done"
        p_final = self._lanes_payload(labels, traces, statuses, ref, phase, dtype, own)
        st["race"] = {"labels": labels, "traces": traces, "dtype": dtype}
        path = session.replace_export(st, "race_export", self.export(p_final, labels))   # the last race's only
        log.info("race ended: %s", [(lb, lane["tps"]) for lb, lane in zip(labels, p_final["lanes"])])
        yield (race_view.payload_json(p_final), "stopped: the lanes that ran are replayed" if phase == "stopped"
               else "done: replaying the race side by side (see the clock)", gr.update(value=path, interactive=True))

    def export(self, p: dict, labels: list[str]) -> str:
        name = f"reanchor-race-{'-'.join(labels)}-{time.strftime('%Y%m%d-%H%M%S')}.html"
        path = session.export_folder() / name   # deleted when replaced or when the session ends
        path.write_text(race_view.export_html(p, "ReAnchor race: " + " vs ".join(labels),
                                              PLOTLY_JS.read_text(encoding="utf-8")), encoding="utf-8")
        return str(path)

    def on_stop(self, st):
        """Stop the lane running now (Run.stop(): at its next round boundary) and skip the lanes after it."""
        if isinstance(st, dict):
            st["race_stop"] = True
            if st.get("run") is not None:
                st["run"].stop()

    def on_inspect(self, st, evt: gr.EventData):
        """A lane's rounds in the round inspector: its trace loads through the app's trace-loading path."""
        i = (getattr(evt, "_data", None) or {}).get("lane")
        race = (st or {}).get("race") if isinstance(st, dict) else None
        if not race or not isinstance(i, int) or not 0 <= i < len(race["traces"]) or race["traces"][i] is None:
            raise bad_input("Race: no finished lane to open; run a race first")
        path = session.export_trace(race["traces"][i])
        try:
            out = list(self.cb.on_upload(path, st))
        finally:
            session.drop_export(path)   # read: the session holds its own copy (on_upload)
        # the lane's full label, as the race named it (mode with -auto, precision), in the inspector's status
        at = ("state",) + views.VIEW_OUTPUTS
        out[at.index("metrics")] = views.metrics(out[0], f"race lane {race['labels'][i]} in {race.get('dtype', '?')}")
        return (*out, gr.Tabs(selected="explore"))


def layout(c: SimpleNamespace, dtypes: list[str], drafters: list[str] | None = None) -> None:
    """The Race tab's components (call inside its gr.Tab): compact, so that the lanes fit a 720-px screen.
    `dtypes`: the precisions this app races in, the loaded one first (ModelLoader.race_dtypes); `drafters`: the
    Drafter menu, the start drafter first."""
    drafters = drafters or ["default"]
    gr.Markdown("Plain decoding against the speculative modes, on one prompt: each lane's text coloured by where its "
                "tokens came from (blue: the drafter's block, other colours: a shifted block, amber: the target's "
                "own token), then replayed side by side. Stop ends the running lane at its next round.",
                elem_classes=["rx-status"])
    c.race_preset_note = gr.Markdown("", elem_id="rx-race-preset", elem_classes=["rx-status"])
    with gr.Row(equal_height=True):
        c.race_prompt = gr.Textbox(value=DEMO_PROMPT, label="Prompt", lines=1, max_lines=6, elem_id="rx-race-prompt",
                                   scale=4)
        c.race_max_new = gr.Number(value=64, label=f"Max new tokens (≤ {RACE_MAX_NEW})", precision=0,
                                   elem_id="rx-race-max-new", scale=1, min_width=120)
        c.race_repeatable = gr.Checkbox(value=True, label="repeatable budget (fixed calibration)",
                                        elem_id="rx-race-repeatable", scale=1, min_width=150)
        c.race_dtype = gr.Radio(precision_choices(dtypes), value=dtypes[0],
                                label="Precision (every lane, plain decoding too)", elem_id="rx-race-dtype", scale=2,
                                min_width=240)
        c.race_drafter = gr.Dropdown(list(drafters), value=drafters[0], label="Drafter", elem_id="rx-race-drafter",
                                     scale=1, min_width=140)
    c.race_lanes = gr.CheckboxGroup(list(LANES), value=["ar", "ddtree-auto", "reanchor-tree-auto"],
                                    label=f"Lanes ({MIN_LANES} to {MAX_LANES}; ar, plain decoding, is the reference)",
                                    elem_id="rx-race-lanes")
    with gr.Row():
        c.race_btn = gr.Button("Race", variant="primary", elem_id="rx-race-run")
        c.race_stop_btn = gr.Button("Stop", variant="stop", elem_id="rx-race-stop")
        c.race_preset_btn = gr.Button("Demo preset for this machine", elem_id="rx-race-preset-btn")
        c.race_export = gr.DownloadButton("Export race (HTML, plays offline)", interactive=False,
                                          elem_id="rx-race-export")
    c.race_status = gr.Markdown("", elem_classes=["rx-status"], elem_id="rx-race-status")
    c.race_view = gr.HTML("", html_template=race_view.RACE_TEMPLATE, js_on_load=race_view.JS_RACE,
                          apply_default_css=False, elem_id="rx-race")


def wire(c: SimpleNamespace, race: Race, view_out: list) -> None:
    model = dict(concurrency_limit=1, concurrency_id="model", show_progress="minimal", preprocess=False)
    c.race_btn.click(race.on_race, [c.race_prompt, c.race_lanes, c.race_max_new, c.race_repeatable, c.race_dtype,
                                    c.state, c.race_drafter],
                     [c.race_view, c.race_status, c.race_export], api_name="race", **model)
    c.race_stop_btn.click(race.on_stop, [c.state], None, queue=False, show_progress="hidden", api_name="race_stop")
    preset_out = [c.race_prompt, c.race_lanes, c.race_max_new, c.race_repeatable, c.race_dtype, c.race_drafter,
                  c.race_preset_note]
    c.race_preset_btn.click(race.preset, None, preset_out, queue=False, api_name="race_preset")
    c.race_tab.select(race.on_tab, [c.race_dtype], [c.race_preset_note, c.race_dtype], queue=False,
                      show_progress="hidden")
    c.race_view.click(race.on_inspect, [c.state], view_out + [c.tabs], api_name="race_inspect").then(
        None, js=assets.read("inspector_scroll.js"))

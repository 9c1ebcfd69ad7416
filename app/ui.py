"""The Gradio Blocks layout and its callbacks.

Per-session state lives in gr.State (app.session.new_state); the loaded Engine is shared read-only.
Model runs share one queue slot (concurrency_id "model", limit 1); every other callback only reads
traces. Figures come from app.plots (pure), HTML from app.render (escaped).
"""
from __future__ import annotations

import json
import logging
import time

import gradio as gr

from . import analysis, plots, records, render, session
from .examples import example_prompts
from .page import JS_PLOT, JS_TIMELINE, JS_TOKEN_CLICK, PLOT_TEMPLATE

log = logging.getLogger("reanchor.app")

MODES = ["ar", "dflash", "shifted-fixed", "reanchor", "in-block", "extension"]
RULES = ["earliest", "fixed", "random", "latest", "all"]
# Shifted blocks drafted per round: every available offset (the paper), the cost model's budget for
# this hardware, or a fixed cap (any whole number can be typed).
SHIFTED_CHOICES = ["all", "auto", "0", "1", "2", "4", "8"]
TEXT_INTERVAL_S = 0.1       # text/metrics at most this often: each update shows every round since the last
FIG_INTERVAL_S = 0.5        # round figure at most this often while streaming
TIMELINE_INTERVAL_S = 1.0   # timeline at most this often while streaming, times rounds / TIMELINE_ROUNDS
TIMELINE_ROUNDS = 200       # (a timeline of n bars costs the page O(n) per draw: keep its share bounded)
STREAM_TAIL = 300           # generated tokens shown while a run streams; the whole text once it ends
PLAY_INTERVAL_S = 0.8
MAX_PAYLOAD = 50 * 1024     # bytes of figure JSON per round update, the prefetched next round included

# ---------------------------------------------------------------- view helpers (pure over state)

def _view_key(state: dict) -> int:
    """A number that changes whenever the session shows another trace: the browser's figure-cache key."""
    if state.get("keyed") is not state.get("trace"):
        state["keyed"], state["view_key"] = state.get("trace"), state.get("view_key", 0) + 1
    return state["view_key"]


def _round_outputs(state: dict, i: int, prefetch: bool = True):
    """(slider value, caption, round figure payload) for round i of the session's trace; the payload
    also carries round i+1 (prefetch) for the browser's next-round cache."""
    trace = state.get("trace")
    rounds = trace.get("rounds", []) if trace else []
    if not rounds:
        return 0, "No rounds to show.", plots.empty_figure("no round yet").to_json()
    i = session.clamp_round(trace, i)
    texts = trace.get("token_texts", {})

    def part(k: int) -> tuple[str, str]:
        return render.round_caption(rounds[k], k, len(rounds)), plots.round_figure(rounds[k], texts).to_json()

    caption, fig = part(i)
    head = f'{{"key":{_view_key(state)},"round":{i},"caption":{json.dumps(caption)},"fig":{fig},"next":'
    if prefetch and i + 1 < len(rounds):
        c2, f2 = part(i + 1)
        payload = f'{head}{{"round":{i + 1},"caption":{json.dumps(c2)},"fig":{f2}}}}}'
        if len(payload) <= MAX_PAYLOAD:  # else "next" asks the server (about 45 ms)
            return i, caption, payload
    return i, caption, head + "null}"


def _slider(trace: dict | None, i: int | None = None):
    n = len(trace.get("rounds", [])) if trace else 0
    if i is None:
        return gr.update(maximum=max(n - 1, 1))
    return gr.update(maximum=max(n - 1, 1), value=session.clamp_round(trace, i))


def _text(trace: dict | None) -> str:
    if not trace:
        return "<div class='rx-text'></div>"
    return render.text_view(trace.get("prompt_ids", []), trace.get("first_token"), trace.get("rounds", []),
                            trace.get("token_texts", {}))


def _metrics(state: dict, status: str = "") -> str:
    trace, cmp = state.get("trace"), state.get("compare")
    return render.metrics_view(session.stats_of(trace), session.stats_of(cmp) if cmp else None, status)


def _analyses(trace: dict | None):
    if not trace or not trace.get("rounds"):
        return {}, plots.empty_figure("no run"), plots.empty_figure("no run")
    res = analysis.compute(trace)
    h, g = analysis.figures(res)
    return res, h, g


def _timeline(trace: dict | None, title: str = "accepted length per round"):
    if not trace or not trace.get("rounds"):
        return plots.empty_figure("no run yet", 200)
    return plots.timeline_figure(trace["rounds"], title)


def _timeline_json(trace: dict | None) -> str:
    return _timeline(trace).to_json()


def show_trace(state: dict, i: int = 0, status: str = ""):
    """Everything that depends on the shown trace: text, metrics, slider, caption, figures, analyses."""
    trace = state.get("trace")
    i, caption, fig = _round_outputs(state, i)
    state["view"] = i
    res, h, g = _analyses(trace)
    return (state, _text(trace), _metrics(state, status), _slider(trace, i), caption, fig, _timeline_json(trace),
            gr.update(value=state.get("trace_file"), interactive=bool(state.get("trace_file"))), res, h, g)


def _run_name(trace: dict) -> str:
    cfg = trace.get("config") or {}
    return f"{cfg.get('mode', '?')} / {cfg.get('rule', '?')}"


def compare_views(state: dict):
    """Side by side: (comparison metrics, its timeline, this run's metrics, its timeline, the comparison's
    assembly on this run's rounds, this run's assembly on the comparison's rounds, counterfactual totals)."""
    a, b = state.get("trace"), state.get("compare")
    an, bn = _run_name(a or {}), _run_name(b or {})
    b_cfg, a_cfg = (b or {}).get("config") or {}, (a or {}).get("config") or {}
    a_cf, a_sum = analysis.counterfactual(a, b_cfg.get("mode"), b_cfg.get("rule"), f"comparison's {bn}")
    b_cf, b_sum = analysis.counterfactual(b, a_cfg.get("mode"), a_cfg.get("rule"), f"this run's {an}")
    return (render.metrics_view(session.stats_of(b), status=f"comparison: {bn}"),
            _timeline(b, f"comparison: {bn}"),
            render.metrics_view(session.stats_of(a), status=f"this run: {an}"),
            _timeline(a, f"this run: {an}"),
            a_cf, b_cf, {f"{bn} on this run's rounds": a_sum, f"{an} on the comparison's rounds": b_sum})


def _to_int(value, label: str, lo: int, hi: int) -> int:
    try:
        f = float(value)
        if f != int(f):
            raise ValueError
        v = int(f)
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"{label}: {value!r} is not a whole number", title="Bad input")
    if not lo <= v <= hi:
        raise gr.Error(f"{label}: must be between {lo} and {hi}, got {v}", title="Bad input")
    return v


def parse_shifted(value) -> int | str | None:
    """"all" -> None (no cap), "auto" -> the cost budget, a whole number >= 0 -> that cap."""
    v = "all" if value is None else str(value).strip().lower()
    if v in ("all", "auto"):
        return None if v == "all" else "auto"
    return _to_int(v, "Shifted blocks", 0, 4096)


def parse_inputs(prompt, mode, rule, temperature, seed, max_new, shifted="all"):
    """Check the controls; raise gr.Error naming the field (the app keeps serving)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Prompt: is empty; type a prompt or pick an example", title="Bad input")
    if len(prompt) > session.MAX_PROMPT_CHARS:
        raise gr.Error(f"Prompt: {len(prompt)} characters, at most {session.MAX_PROMPT_CHARS}", title="Bad input")
    if mode not in MODES:
        raise gr.Error(f"Mode: unknown mode {mode!r}", title="Bad input")
    if rule not in RULES:
        raise gr.Error(f"Attachment rule: unknown rule {rule!r}", title="Bad input")
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise gr.Error(f"Temperature: {temperature!r} is not a number", title="Bad input")
    if not 0.0 <= t <= 10.0:
        raise gr.Error(f"Temperature: must be between 0 and 10, got {t}", title="Bad input")
    s = _to_int(seed, "Seed", 0, 2**31 - 1)
    n = _to_int(max_new, "Max new tokens", 1, session.APP_MAX_NEW_TOKENS)
    return prompt, mode, rule, t, s, n, parse_shifted(shifted)


def _engine_or_error(loader):
    if loader.ready:
        return loader.engine
    if loader.error:
        raise gr.Error(f"Model: loading failed ({loader.error}); restart the app with other --target/--drafter")
    if not loader.enabled:
        raise gr.Error("Model: this app runs replay-only (--no-model); load a trace instead")
    raise gr.Error("Model: still loading; try again in a few seconds (see the status line)")


def start_run(engine, prompt, mode, rule, t, s, n, k=None):
    """(run, prompt ids) or gr.Error naming the field the engine rejected."""
    from engine.decode import DecodeConfig
    from engine.errors import InputError

    try:
        ids = engine.encode_prompt(prompt)
        run = engine.run(ids, DecodeConfig(mode=mode, rule=rule, temperature=t, seed=s, max_new_tokens=n,
                                           max_shifted=k))
    except InputError as e:
        raise gr.Error(f"{session.field_label(e.field)}: {e.message}", title="Bad input")
    return run, ids


def stream_run(engine, run, ids, config: dict):
    """Iterate a run, yielding (live trace, record) per round; the live trace follows the trace schema.

    The run is stopped in `finally`, so a closed generator (Stop, client gone) ends it.
    """
    tok = engine.models.tokenizer
    live = {"schema": "reanchor-trace/1", "config": config, "prompt_ids": list(ids), "token_texts": {},
            "rounds": [], "first_token": None, "stats": {}, "complete": False, "elapsed_s": 0.0}
    session.add_texts(live["token_texts"], tok, ids)
    t0 = time.monotonic()
    try:
        for rec in run:
            if live["first_token"] is None:
                live["first_token"] = int(rec["anchor"])
            session.add_texts(live["token_texts"], tok, records.round_ids(rec))
            live["rounds"].append(rec)
            live["elapsed_s"] = time.monotonic() - t0
            yield live, rec
    finally:
        run.stop()


# ---------------------------------------------------------------- layout

def build_ui(loader) -> gr.Blocks:
    examples = example_prompts()
    trace_choices = session.example_traces()

    with gr.Blocks(title="ReAnchor Explorer", analytics_enabled=False) as demo:
        state = gr.State(session.new_state(), time_to_live=6 * 3600)
        gr.Markdown("## ReAnchor Explorer\nSpeculative decoding with a DFlash block-diffusion drafter: "
                    "shifted blocks re-anchored on rejected-suffix features are attached to the baseline "
                    "block by token matching, merged into a trie and verified in one pass.")
        model_status = gr.Markdown(loader.status(), elem_classes=["rx-status"], elem_id="rx-model-status")
        with gr.Row():
            with gr.Column(scale=2, min_width=320):
                prompt = gr.Textbox(label="Prompt", lines=4, max_lines=14, elem_id="rx-prompt",
                                    placeholder="Type a prompt or pick an example below")
                gr.Examples(examples=[[p] for _, p in examples], inputs=[prompt],
                            example_labels=[label for label, _ in examples], label="Example prompts",
                            examples_per_page=13)
                with gr.Row():
                    mode = gr.Dropdown(MODES, value="reanchor", label="Mode", elem_id="rx-mode")
                    rule = gr.Dropdown(RULES, value="earliest", label="Attachment rule", elem_id="rx-rule")
                    shifted = gr.Dropdown(SHIFTED_CHOICES, value="all", label="Shifted blocks",
                                          allow_custom_value=True, elem_id="rx-shifted",
                                          info="per round: all (paper), auto (cost budget) or at most N")
                with gr.Row():
                    temperature = gr.Number(value=0.0, label="Temperature", elem_id="rx-temperature")
                    seed = gr.Number(value=0, label="Seed", precision=0, elem_id="rx-seed")
                    max_new = gr.Number(value=96, label="Max new tokens", precision=0, elem_id="rx-max-new")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", elem_id="rx-run")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="rx-stop")
                with gr.Row():
                    export_btn = gr.DownloadButton("Export trace (JSON)", interactive=False, elem_id="rx-export")
                    load_btn = gr.UploadButton("Load trace", file_types=[".json"], type="filepath",
                                               elem_id="rx-load")
                example_trace = gr.Dropdown([label for label, _ in trace_choices],
                                            value=trace_choices[0][0] if trace_choices else None,
                                            label="Example trace", elem_id="rx-example-trace")
            with gr.Column(scale=3, min_width=420):
                metrics = gr.HTML(render.metrics_view(None), elem_id="rx-metrics")
                gr.HTML(render.LEGEND)
                text_box = gr.HTML("<div class='rx-text'></div>", js_on_load=JS_TOKEN_CLICK,
                                   elem_id="rx-text-box")
                with gr.Row():
                    token_no = gr.Number(label="Go to round of token #", precision=0, value=None,
                                         elem_id="rx-token-no", scale=3)
                    token_go = gr.Button("Go", scale=1, elem_id="rx-token-go")

        gr.Markdown("### Round inspector")
        with gr.Row():
            first_btn = gr.Button("|◀ first", size="sm", elem_id="rx-first", min_width=60)
            prev_btn = gr.Button("◀ prev", size="sm", elem_id="rx-prev", min_width=60)
            next_btn = gr.Button("next ▶", size="sm", elem_id="rx-next", min_width=60)
            last_btn = gr.Button("last ▶|", size="sm", elem_id="rx-last", min_width=60)
            play_btn = gr.Button("▶ play", size="sm", elem_id="rx-play", min_width=60)
            follow = gr.Checkbox(value=True, label="follow live", elem_id="rx-follow", min_width=100)
        slider = gr.Slider(0, 1, value=0, step=1, label="Round", elem_id="rx-slider")
        caption = gr.HTML("No rounds to show.", elem_id="rx-caption", js_on_load=None)
        gr.HTML(render.FIGURE_LEGEND)
        round_plot = gr.HTML(plots.empty_figure("no round yet").to_json(), html_template=PLOT_TEMPLATE,
                             js_on_load=JS_PLOT, apply_default_css=False, elem_id="rx-round-plot")
        timeline_plot = gr.HTML(plots.empty_figure("no run yet", 200).to_json(), html_template=PLOT_TEMPLATE,
                                js_on_load=JS_TIMELINE, apply_default_css=False, elem_id="rx-timeline")
        timer = gr.Timer(PLAY_INTERVAL_S, active=False)
        status_timer = gr.Timer(1.0, active=loader.loading)

        with gr.Accordion("Compare: a second run on the same prompt and seed, side by side", open=False):
            gr.Markdown("Runs the prompt box's prompt with the comparison mode and rule (same temperature, seed, "
                        "max new tokens and shifted blocks). Under each run: the other's assembly replayed on "
                        "its rounds, from the same state and the same drafted blocks (the per-round "
                        "counterfactual; T=0 only).", elem_classes=["rx-status"])
            with gr.Row():
                cmp_mode = gr.Dropdown(MODES, value="dflash", label="Comparison mode", elem_id="rx-cmp-mode")
                cmp_rule = gr.Dropdown(RULES, value="earliest", label="Comparison rule", elem_id="rx-cmp-rule")
                cmp_btn = gr.Button("Run comparison", elem_id="rx-cmp-run")
            with gr.Row(equal_height=False):
                with gr.Column(min_width=320):
                    cmp_a_metrics = gr.HTML(render.metrics_view(None, status="this run"), elem_id="rx-cmp-a-metrics")
                    cmp_a_timeline = gr.Plot(plots.empty_figure("no comparison yet", 200), show_label=False,
                                             elem_id="rx-cmp-a-timeline")
                    cmp_a_cf = gr.Plot(plots.empty_figure("no comparison yet", 200), show_label=False,
                                       elem_id="rx-cmp-a-cf")
                with gr.Column(min_width=320):
                    cmp_metrics = gr.HTML(render.metrics_view(None, status="no comparison yet"),
                                          elem_id="rx-cmp-metrics")
                    cmp_timeline = gr.Plot(plots.empty_figure("no comparison yet", 200), show_label=False,
                                           elem_id="rx-cmp-timeline")
                    cmp_b_cf = gr.Plot(plots.empty_figure("no comparison yet", 200), show_label=False,
                                       elem_id="rx-cmp-b-cf")
            cmp_json = gr.JSON(label="Counterfactual totals", elem_id="rx-cmp-json")

        with gr.Accordion("Analyses of the current run, or of the example traces pooled", open=False):
            examples_btn = gr.Button("Analyse the example traces (pooled)", size="sm", elem_id="rx-ex-analyses")
            with gr.Row():
                hist_plot = gr.Plot(plots.empty_figure("no run"), show_label=False, elem_id="rx-hist")
                gain_plot = gr.Plot(plots.empty_figure("no run"), show_label=False, elem_id="rx-gain")
            analysis_json = gr.JSON(label="Analyses (engine.analyses)", elem_id="rx-analyses")

        view_out = [state, text_box, metrics, slider, caption, round_plot, timeline_plot, export_btn,
                    analysis_json, hist_plot, gain_plot]
        round_out = [slider, caption, round_plot]

        # ------------------------------------------------------------ callbacks
        def on_load(st):
            st = st if isinstance(st, dict) else session.new_state()
            if st.get("trace") is None and trace_choices:
                try:
                    st["trace"] = session.load_example(trace_choices[0][1])
                    st["trace_file"] = trace_choices[0][1]
                except ValueError as e:
                    log.warning("example trace: %s", e)
            return show_trace(st, 0, "example trace" if st.get("trace") else "")

        def on_status():
            return loader.status(), gr.Timer(active=loader.loading)

        def begin(st, inputs: tuple, label: str):
            """Check the controls, refuse a second run in the session, start one: (state, engine, run, ids, config)."""
            st = st if isinstance(st, dict) else session.new_state()
            p, m, r, t, s, n, k = parse_inputs(*inputs)
            engine = _engine_or_error(loader)
            if st.get("run") is not None:
                raise gr.Error(f"{label}: a run is already in progress in this session; press Stop first")
            run, ids = start_run(engine, p, m, r, t, s, n, k)
            st["run"] = run
            config = {"mode": m, "rule": r, "temperature": t, "seed": s, "max_new_tokens": n, "max_shifted": k}
            return st, engine, run, ids, config

        def on_run(prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v, st):
            st, engine, run, ids, config = begin(
                st, (prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v), "Run")
            st["follow"] = True if st.get("follow") is None else st["follow"]
            skip = gr.skip()
            last_fig = last_tl = 0.0
            live = None
            log.info("run started: %s", config)
            yield (st, skip, _metrics(st, "running… (prefill)"), skip, skip, skip, skip, gr.update(interactive=False),
                   skip, skip, skip)
            last_text = 0.0
            try:
                for live, rec in stream_run(engine, run, ids, config):
                    st["trace"] = live
                    st["trace_file"] = None
                    now = time.monotonic()
                    i = len(live["rounds"]) - 1
                    if st.get("follow"):
                        st["view"] = i
                    if now - last_text < TEXT_INTERVAL_S and i > 0:
                        continue  # fast rounds (tiny models) would flood the page; the next update has them
                    last_text = now
                    fig_out = cap_out = skip
                    if st.get("follow"):
                        if now - last_fig >= FIG_INTERVAL_S or i == 0:
                            _, cap_out, fig_out = _round_outputs(st, i, prefetch=False)
                            last_fig = now
                    tl_out = skip
                    if now - last_tl >= TIMELINE_INTERVAL_S * max(1.0, i / TIMELINE_ROUNDS) or i == 0:
                        tl_out = _timeline_json(live)
                        last_tl = now
                    slider_out = _slider(live, i if st.get("follow") else None)
                    status = "stopping at the next round…" if st.get("stopping") else f"running… round {i}"
                    text = render.text_view(live["prompt_ids"], live["first_token"], live["rounds"],
                                            live["token_texts"], tail=STREAM_TAIL)
                    yield (st, text, _metrics(st, status), slider_out, cap_out, fig_out,
                           tl_out, gr.update(interactive=False), skip, skip, skip)
            finally:  # normal end, Stop, or the generator closed (client gone / cancelled)
                run.stop()
                st["run"], st["stopping"] = None, False
                log.info("run ended after %d rounds", len(live["rounds"]) if live else 0)
            trace = run.trace()
            trace_status = "stopped" if (run.result or {}).get("stopped") else "done"
            st["trace"] = trace
            st["trace_file"] = session.export_trace(trace)
            yield show_trace(st, st.get("view", 0) if not st.get("follow") else len(trace["rounds"]) - 1,
                             trace_status)

        def on_stop(st):
            """Ends this session's run at the next round boundary; the run's own updates report it."""
            active = isinstance(st, dict) and st.get("run") is not None
            log.info("stop requested (run active: %s)", active)
            if active:
                st["stopping"] = True
                st["run"].stop()

        def goto(st, i):
            st = st if isinstance(st, dict) else session.new_state()
            trace = st.get("trace")
            i, cap, fig = _round_outputs(st, i)
            st["view"] = i
            following = st.get("run") is not None and trace and i == len(trace.get("rounds", [])) - 1
            follow_out = gr.skip()
            if st.get("run") is not None and not following and st.get("follow"):
                st["follow"] = False  # looking at an earlier round: stop following the live one
                follow_out = False
            return i, cap, fig, follow_out

        nav_out = round_out + [follow]
        first_btn.click(lambda st: goto(st, 0), [state], nav_out, show_progress="hidden", api_name="first_round",
                        queue=False)
        prev_btn.click(lambda st: goto(st, st.get("view", 0) - 1), [state], nav_out, show_progress="hidden",
                       api_name="prev_round", queue=False)
        next_btn.click(lambda st: goto(st, st.get("view", 0) + 1), [state], nav_out, show_progress="hidden",
                       api_name="next_round", queue=False)
        last_btn.click(lambda st: goto(st, len((st.get("trace") or {}).get("rounds", [])) - 1), [state], nav_out,
                       show_progress="hidden", api_name="last_round", queue=False)
        # .input: keyboard and the number box; .release: mouse drags and clicks
        slider.input(lambda v, st: goto(st, v), [slider, state], nav_out, show_progress="hidden",
                     api_name="goto_round", queue=False, trigger_mode="always_last")
        slider.release(lambda v, st: goto(st, v), [slider, state], nav_out, show_progress="hidden",
                       api_name="slider_release", queue=False, trigger_mode="always_last")
        follow.input(lambda v, st: st.update(follow=bool(v)), [follow, state], None, show_progress="hidden",
                     api_name="follow", queue=False)

        def on_token_click(st, evt: gr.EventData):
            data = getattr(evt, "_data", None) or {}
            r = data.get("r")
            if r is None:
                return gr.skip(), gr.skip(), gr.skip(), gr.skip()
            if int(r) < 0:
                r = 0  # the prefill's token: show the first round
            return goto(st, int(r))

        def on_timeline_click(st, evt: gr.EventData):
            r = (getattr(evt, "_data", None) or {}).get("round")
            if r is None:
                return gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return goto(st, int(r))

        timeline_plot.click(on_timeline_click, [state], nav_out, show_progress="hidden",
                            api_name="timeline_click", queue=False)
        text_box.click(on_token_click, [state], nav_out, show_progress="hidden", api_name="token_click",
                       queue=False)

        def on_token_go(k, st):
            trace = (st or {}).get("trace")
            if not trace:
                raise gr.Error("Go to round of token #: no run to look into")
            rounds_of_tok = records.token_rounds(trace)
            try:
                k = int(k)
            except (TypeError, ValueError):
                raise gr.Error("Go to round of token #: enter a token number")
            if not 0 <= k < len(rounds_of_tok):
                raise gr.Error(f"Go to round of token #: must be between 0 and {len(rounds_of_tok) - 1}")
            return goto(st, max(0, rounds_of_tok[k]))

        token_go.click(on_token_go, [token_no, state], nav_out, show_progress="hidden", api_name="token_round",
                       queue=False)

        def on_play(st):
            st["playing"] = not st.get("playing")
            if st["playing"]:
                st["follow"] = False
            return gr.Timer(active=st["playing"]), gr.update(value="⏸ pause" if st["playing"] else "▶ play"), \
                gr.update(value=bool(st.get("follow")))

        play_btn.click(on_play, [state], [timer, play_btn, follow], show_progress="hidden", api_name="play",
                       queue=False)

        def on_tick(st):
            trace = st.get("trace")
            n = len(trace.get("rounds", [])) if trace else 0
            i = st.get("view", 0) + 1
            if i >= n:
                st["playing"] = False
                return (gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False),
                        gr.update(value="▶ play"))
            return (*goto(st, i), gr.Timer(active=True), gr.skip())

        timer.tick(on_tick, [state], nav_out + [timer, play_btn], show_progress="hidden", api_name="play_tick",
                   queue=False)
        status_timer.tick(on_status, None, [model_status, status_timer], show_progress="hidden",
                          api_name="model_status")

        run_btn.click(on_run, [prompt, mode, rule, temperature, seed, max_new, shifted, state], view_out,
                      concurrency_limit=1, concurrency_id="model", show_progress="minimal", api_name="run")
        stop_btn.click(on_stop, [state], None, queue=False, show_progress="hidden", api_name="stop")

        def on_upload(path, st):
            st = st if isinstance(st, dict) else session.new_state()
            if st.get("run") is not None:
                raise gr.Error("Load trace: a run is in progress; press Stop first")
            try:
                trace = session.load_trace_file(path)
            except ValueError as e:
                raise gr.Error(str(e), title="Bad trace")
            st["trace"], st["trace_file"], st["compare"] = trace, path, None
            return show_trace(st, 0, "loaded trace")

        load_btn.upload(on_upload, [load_btn, state], view_out, api_name="load_trace")

        def on_example_trace(label, st):
            path = dict(trace_choices).get(label)
            if not path:
                return (gr.skip(),) * len(view_out)
            st = st if isinstance(st, dict) else session.new_state()
            if st.get("run") is not None:
                raise gr.Error("Example trace: a run is in progress; press Stop first")
            st["trace"], st["trace_file"], st["compare"] = session.load_example(path), path, None
            return show_trace(st, 0, "example trace")

        example_trace.input(on_example_trace, [example_trace, state], view_out, api_name="example_trace")

        def on_example_analyses():
            """The paper's analyses over every shipped example trace at once (recorded with the embedded model)."""
            traces = [session.load_example(path) for _, path in trace_choices]
            if not traces:
                raise gr.Error("Analyse the example traces: none are installed (assets/traces)")
            res = {"pooled": {"traces": [label for label, _ in trace_choices],
                              "rounds": sum(len(t["rounds"]) for t in traces)}, **analysis.compute(traces)}
            return (res, *analysis.figures(res))

        examples_btn.click(on_example_analyses, None, [analysis_json, hist_plot, gain_plot], queue=False,
                           api_name="example_analyses")

        def on_compare(prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v, st):
            st, engine, run, ids, config = begin(
                st, (prompt_v, mode_v, rule_v, temp_v, seed_v, max_v, shifted_v), "Run comparison")
            last, skip = 0.0, gr.skip()
            try:
                for live, _ in stream_run(engine, run, ids, config):
                    if time.monotonic() - last >= 1.0:
                        last = time.monotonic()
                        yield (st, render.metrics_view(session.stats_of(live), status=f"comparison running… "
                                                       f"round {len(live['rounds']) - 1}"),
                               skip, skip, skip, skip, skip, skip, skip)
            finally:
                run.stop()
                st["run"], st["stopping"] = None, False
            st["compare"] = run.trace()
            yield (st, *compare_views(st), _metrics(st, "with comparison"))

        cmp_btn.click(on_compare, [prompt, cmp_mode, cmp_rule, temperature, seed, max_new, shifted, state],
                      [state, cmp_metrics, cmp_timeline, cmp_a_metrics, cmp_a_timeline, cmp_a_cf, cmp_b_cf, cmp_json,
                       metrics], concurrency_limit=1, concurrency_id="model", show_progress="minimal",
                      api_name="compare")

        demo.load(on_load, [state], view_out, api_name="show_example")
    return demo

"""The page: its layout (the components, section by section) and the wiring of events to app.callbacks.

Per-session state lives in gr.State (app.session.new_state); the loaded Engine is shared read-only.
Model runs share one queue slot (concurrency_id "model", limit 1); every other callback only reads
traces and skips the queue.
"""
from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
from gradio.context import get_blocks_context

from engine.options import DEFAULT_TREE_NODES, MAX_TRIE_NODES, MODE_HELP, MODES, RULE_HELP, RULES, SHIFTED_WORDS
from engine.options import (DEFAULT_APP_MAX_NEW_TOKENS, DEFAULT_APP_MAX_SHIFTED, DEFAULT_APP_MODE,  # the controls'
                            DEFAULT_RULE)                                                          # first values

from . import assets, glossary, plots, race, render, runs, session, views
from .callbacks import Callbacks
from .examples import LESSON_TRACE, example_prompts
from .page import JS_PLOT, JS_ROUND_LIST, JS_TIMELINE, JS_TOKEN_CLICK, PLOT_TEMPLATE, js_round_plot

# Shifted blocks drafted per round: every available offset (the paper), the cost model's budget for
# this hardware, or a fixed cap (any whole number can be typed).
SHIFTED_CHOICES = list(SHIFTED_WORDS) + ["0", "1", "2", "4", "8"]
# Verified trie nodes per round (the anchor included); the tree modes' node budget.
NODE_CHOICES = list(SHIFTED_WORDS) + ["8", "16", "32", "64"]
PLAY_INTERVAL_S = 0.8
# Events whose callbacks check their inputs themselves, naming the control: values sent through the API
# skip Gradio's checks, which name none ("Value: ... is not in the list of choices", or a bare "Error").
RAW = dict(preprocess=False)
# The menus' choices: each mode and rule with its one line (engine.options), the value its bare name
MODE_CHOICES = [(f"{m} · {MODE_HELP[m]}", m) for m in MODES]
RULE_CHOICES = [(f"{r} · {RULE_HELP[r]}", r) for r in RULES]

# ---------------------------------------------------------------- layout

def checked_examples(ex: gr.Examples) -> None:
    """The Examples' click event is an API endpoint too (fn_index 0): an index the page cannot send (13, None,
    "x") failed in Gradio's preprocess with a bare "Error" and a traceback. Its function takes the raw index
    now, checked here, naming the control; then Gradio's own function loads the example as before."""
    fn = get_blocks_context().fns[ex.load_input_event["id"]]
    load, samples = fn.fn, ex.dataset.raw_samples

    def load_example(index):
        if type(index) is not int or not 0 <= index < len(samples):  # bool too: True is not an index
            raise runs.bad_input(f"Example prompts: index {repr(index)[:80]} is not one of 0-{len(samples) - 1}")
        return load((index, samples[index]))

    fn.fn, fn.preprocess = load_example, False


def _controls(c: SimpleNamespace, trace_choices, loader) -> None:
    examples = example_prompts()
    c.prompt = gr.Textbox(label="Prompt", lines=4, max_lines=14, elem_id="rx-prompt",
                          placeholder="Type a prompt or pick an example below")
    checked_examples(gr.Examples(examples=[[p] for _, p in examples], inputs=[c.prompt],
                                 example_labels=[label for label, _ in examples], label="Example prompts",
                                 examples_per_page=13))
    with gr.Row():
        c.mode = gr.Dropdown(MODE_CHOICES, value=DEFAULT_APP_MODE, label="Mode", elem_id="rx-mode")
        c.rule = gr.Dropdown(RULE_CHOICES, value=DEFAULT_RULE, label="Attachment rule", elem_id="rx-rule")
        c.shifted = gr.Dropdown(SHIFTED_CHOICES, value=DEFAULT_APP_MAX_SHIFTED, label="Shifted blocks", allow_custom_value=True,
                                elem_id="rx-shifted", info="per round: all (paper), auto (cost budget) or at most N")
        c.nodes = gr.Dropdown(NODE_CHOICES, value="all", label="Trie nodes", allow_custom_value=True,
                              elem_id="rx-nodes", info=f"verified per round: all (tree modes: {DEFAULT_TREE_NODES}), auto or at most N (≤ {MAX_TRIE_NODES})")
    # one default drafter for the page: the one loaded at start, which the status line names; the example traces
    # say their own (the metrics' settings line)
    default = loader.default_drafter()
    c.drafter = gr.Dropdown(list(loader.drafter_choices()), value=default, label="Drafter", elem_id="rx-drafter",
                            info=f"{default} by default (loaded at start, as the status line says); each other "
                                 "drafter (DFlash and its variants: Domino, DSpark, Draft-OPD) loads on its first run, "
                                 "over the same target")
    with gr.Row():
        c.temperature = gr.Number(value=0.0, label="Temperature", elem_id="rx-temperature")
        c.seed = gr.Number(value=0, label="Seed", precision=0, elem_id="rx-seed")
        c.max_new = gr.Number(value=DEFAULT_APP_MAX_NEW_TOKENS, label="Max new tokens", precision=0, elem_id="rx-max-new",
                              info=f"runs take turns: each stops after {session.RUN_SECONDS:g} s")
    with gr.Row():
        c.run_btn = gr.Button("Run", variant="primary", elem_id="rx-run")
        c.stop_btn = gr.Button("Stop", variant="stop", elem_id="rx-stop")
    with gr.Row():
        c.export_btn = gr.DownloadButton("Export trace (JSON)", interactive=False, elem_id="rx-export")
        c.load_btn = gr.UploadButton("Load trace", file_types=[".json"], type="filepath", elem_id="rx-load")
    c.example_trace = gr.Dropdown([label for label, _ in trace_choices],
                                  value=trace_choices[0][0] if trace_choices else None,
                                  label="Example trace", elem_id="rx-example-trace")


def _text_panel(c: SimpleNamespace) -> None:
    c.metrics = gr.HTML(render.metrics_view(None), elem_id="rx-metrics")
    gr.HTML(render.LEGEND)
    c.text_box = gr.HTML("<div class='rx-text'></div>", js_on_load=JS_TOKEN_CLICK, elem_id="rx-text-box")
    with gr.Row():
        c.token_no = gr.Number(label="Go to round of token #", precision=0, value=None, elem_id="rx-token-no",
                               scale=3)
        c.token_go = gr.Button("Go", scale=1, elem_id="rx-token-go")


def _inspector(c: SimpleNamespace, loader) -> None:
    gr.Markdown("### Round inspector  <span class='rx-status'>(← → step rounds; ↓ ↑ step through the round in "
                "view: from the previous round's rejection to what the next round keeps)</span>",
                elem_id="rx-inspector")
    with gr.Row():
        c.first_btn = gr.Button("|◀ first", size="sm", elem_id="rx-first", min_width=60)
        c.prev_btn = gr.Button("◀ prev", size="sm", elem_id="rx-prev", min_width=60)
        c.next_btn = gr.Button("next ▶", size="sm", elem_id="rx-next", min_width=60)
        c.last_btn = gr.Button("last ▶|", size="sm", elem_id="rx-last", min_width=60)
        c.play_btn = gr.Button("▶ play", size="sm", elem_id="rx-play", min_width=60)
        c.follow = gr.Checkbox(value=True, label="follow live", elem_id="rx-follow", min_width=100)
    with gr.Row():
        c.phase_prev = gr.Button("◀ step (↑)", size="sm", elem_id="rx-phase-prev", min_width=60)
        c.phase_next = gr.Button("step ▶ (↓)", size="sm", elem_id="rx-phase-next", min_width=60)
        c.phase_off = gr.Button("whole round", size="sm", elem_id="rx-phase-off", min_width=60)
        c.projector = gr.Checkbox(value=False, label="projector (14 px labels)", elem_id="rx-projector",
                                  min_width=100)
    c.slider = gr.Slider(0, 1, value=0, step=1, label="Round", elem_id="rx-slider")
    c.caption = gr.HTML("No rounds to show.", elem_id="rx-caption", js_on_load=None)
    c.round_plot = gr.HTML(plots.empty_figure("no round yet").to_json(), html_template=PLOT_TEMPLATE,
                           js_on_load=JS_PLOT, apply_default_css=False, elem_id="rx-round-plot")
    gr.HTML(render.FIGURE_LEGEND)  # under the figure: the sentence and the figure share the screen
    gr.HTML(render.GLOSSARY, elem_id="rx-glossary", js_on_load=glossary.controls_js())
    c.timeline_plot = gr.HTML(plots.empty_figure("no run yet", 200).to_json(), html_template=PLOT_TEMPLATE,
                              js_on_load=JS_TIMELINE, apply_default_css=False, elem_id="rx-timeline")
    # the rounds where the rules disagree (tree traces: where the shifted blocks changed the accepted length), each a
    # button to its round
    c.rule_rounds = gr.HTML("", js_on_load=JS_ROUND_LIST, elem_id="rx-rule-rounds")
    c.timer = gr.Timer(PLAY_INTERVAL_S, active=False)
    c.status_timer = gr.Timer(1.0, active=loader.loading)


def _compare(c: SimpleNamespace) -> None:
    def plot(elem_id: str, other: bool):
        """A figure drawn by Plotly from its JSON; a click on a round goes to it (`other`: a round of the comparison
        run, which the inspector takes first)."""
        return gr.HTML(plots.empty_figure("no comparison yet", 200).to_json(), html_template=PLOT_TEMPLATE,
                       js_on_load=js_round_plot(False, other), apply_default_css=False, elem_id=elem_id)

    with gr.Accordion("Compare: a second run of the trace shown, side by side", open=False):
        gr.Markdown("Runs the trace shown again with the comparison mode and rule: its own prompt, temperature, "
                    "seed, length, budgets and drafter (the controls above are not read). Under each run: the "
                    "other's assembly replayed on "
                    "its rounds, from the same state and the same drafted blocks (the per-round "
                    "counterfactual; at T>0 along the run's realised draw). Click a round's bar or ◆ to open it in the round inspector (on the "
                    "comparison's side, the comparison run takes the inspector: the sides swap).",
                    elem_classes=["rx-status"])
        with gr.Row():
            c.cmp_mode = gr.Dropdown(MODE_CHOICES, value="dflash", label="Comparison mode", elem_id="rx-cmp-mode")
            c.cmp_rule = gr.Dropdown(RULE_CHOICES, value=DEFAULT_RULE, label="Comparison rule", elem_id="rx-cmp-rule")
            c.cmp_btn = gr.Button("Run comparison", elem_id="rx-cmp-run")
            c.cmp_swap = gr.Button("Inspect the comparison run (swap sides)", elem_id="rx-cmp-swap")
        with gr.Row(equal_height=False):
            with gr.Column(min_width=320):
                c.cmp_a_metrics = gr.HTML(render.metrics_view(None, status="this run"), elem_id="rx-cmp-a-metrics")
                c.cmp_a_timeline, c.cmp_a_cf = plot("rx-cmp-a-timeline", False), plot("rx-cmp-a-cf", False)
            with gr.Column(min_width=320):
                c.cmp_metrics = gr.HTML(render.metrics_view(None, status="no comparison yet"),
                                        elem_id="rx-cmp-metrics")
                c.cmp_timeline, c.cmp_b_cf = plot("rx-cmp-timeline", True), plot("rx-cmp-b-cf", True)
        c.cmp_table = gr.HTML("", elem_id="rx-cmp-table")
        with gr.Accordion("Counterfactual totals as JSON", open=False):
            c.cmp_json = gr.JSON(label="Counterfactual totals", elem_id="rx-cmp-json")


def _analyses(c: SimpleNamespace) -> None:
    with gr.Accordion("Analyses: the paper's Figure 2 and Tables 1, 5 and 8, of the current run or of the "
                      "example traces pooled", open=False):
        with gr.Row():
            c.examples_btn = gr.Button("Analyse the example traces (pooled)", size="sm", elem_id="rx-ex-analyses")
            c.current_btn = gr.Button("Back to the current run", size="sm", elem_id="rx-cur-analyses")
        c.tables = gr.Markdown("", elem_id="rx-tables")
        with gr.Row():
            c.hist_plot = gr.Plot(plots.empty_figure("no run"), show_label=False, elem_id="rx-hist")
            c.gain_plot = gr.Plot(plots.empty_figure("no run"), show_label=False, elem_id="rx-gain")
        with gr.Accordion("Every analysis as JSON (engine.analyses)", open=False):
            c.analysis_json = gr.JSON(label="Analyses (engine.analyses)", elem_id="rx-analyses")
        c.curve_btn = gr.Button("Budget curve of the tree modes on this prompt (τ and tokens/s against the node "
                                "budget; 11 short runs)", size="sm", elem_id="rx-curve")
        c.curve_plot = gr.Plot(plots.empty_figure("no budget curve yet"), show_label=False, elem_id="rx-curve-plot")


def layout(loader, trace_choices, sessions: session.Sessions) -> SimpleNamespace:
    """Every component, by name; call inside gr.Blocks."""
    c = SimpleNamespace()
    c.state = gr.State(session.new_state(), time_to_live=session.SESSION_LIFETIME_S, delete_callback=sessions.release)
    gr.Markdown("## ReAnchor Explorer\nSpeculative decoding with a DFlash block-diffusion drafter: "
                "shifted blocks re-anchored on rejected-suffix features are attached to the baseline "
                "block by token matching, merged into a trie and verified in one pass.", elem_id="rx-intro")
    c.model_status = gr.Markdown(loader.status(), elem_classes=["rx-status"], elem_id="rx-model-status")
    with gr.Tabs(selected="explore", elem_id="rx-tabs") as c.tabs:
        with gr.Tab("Explore", id="explore", elem_id="rx-tab-explore"):
            with gr.Row():
                with gr.Column(scale=2, min_width=320):
                    _controls(c, trace_choices, loader)
                with gr.Column(scale=3, min_width=420):
                    _text_panel(c)
            _inspector(c, loader)
            _compare(c)
            _analyses(c)
        with gr.Tab("Race", id="race", elem_id="rx-tab-race") as c.race_tab:
            race.layout(c, loader.race_dtypes(), race.drafter_menu(loader))
    return c


# ---------------------------------------------------------------- wiring

def _wire_navigation(c: SimpleNamespace, cb: Callbacks) -> None:
    nav = [getattr(c, name) for name in views.NAV_OUTPUTS]
    fast = dict(show_progress="hidden", queue=False)  # reads the session's trace only
    c.first_btn.click(lambda st: cb.goto(st, 0), [c.state], nav, api_name="first_round", **fast)
    # a second step while the first is out is a step too ("multiple"; Gradio's default "once" dropped it, and the
    # first's answer took the page back from the round it had shown)
    c.prev_btn.click(lambda st: cb.step(st, -1), [c.state], nav, api_name="prev_round", trigger_mode="multiple", **fast)
    c.next_btn.click(lambda st: cb.step(st, +1), [c.state], nav, api_name="next_round", trigger_mode="multiple", **fast)
    c.last_btn.click(cb.last, [c.state], nav, api_name="last_round", **fast)
    # .input: keyboard and the number box; .release: mouse drags and clicks. Each call carries its own value
    # ("multiple"): "always_last" sent a call typed while another was out only after that one's answer, with the
    # slider's value read then, which that answer had set back (a typed jump lost). A slower, earlier call's answer
    # is dropped by the server's ticket (Callbacks.goto).
    c.slider.input(lambda v, st: cb.goto(st, v), [c.slider, c.state], nav, api_name="goto_round",
                   trigger_mode="multiple", **fast, **RAW)
    c.slider.release(lambda v, st: cb.goto(st, v), [c.slider, c.state], nav, api_name="slider_release",
                     trigger_mode="multiple", **fast, **RAW)
    c.follow.input(lambda v, st: st.update(follow=bool(v)), [c.follow, c.state], None, api_name="follow", **fast,
                   **RAW)
    c.timeline_plot.click(cb.on_timeline_click, [c.state], nav, api_name="timeline_click", **fast)
    c.rule_rounds.click(cb.on_timeline_click, [c.state], nav, api_name="rule_round_click", **fast)
    for name, plot in (("timeline", c.cmp_a_timeline), ("counterfactual", c.cmp_a_cf)):  # this run's rounds
        plot.click(cb.on_timeline_click, [c.state], nav, api_name=f"compare_{name}_click", **fast)
    c.text_box.click(cb.on_token_click, [c.state], nav + [c.token_no], api_name="token_click", **fast)
    # a typed token number can be wrong: queued, its error is a toast (an unqueued call's error showed none)
    c.token_go.click(cb.on_token_go, [c.token_no, c.state], nav, api_name="token_round", show_progress="hidden", **RAW)
    c.phase_next.click(lambda st: cb.step_phase(st, +1), [c.state], nav, api_name="next_phase", **fast)
    c.phase_prev.click(lambda st: cb.step_phase(st, -1), [c.state], nav, api_name="prev_phase", **fast)
    c.phase_off.click(lambda st: cb.step_phase(st, None), [c.state], nav, api_name="whole_round", **fast)
    c.projector.input(cb.on_projector, [c.projector, c.state], nav, api_name="projector", **fast, **RAW)
    c.round_plot.click(cb.on_fold, [c.state], nav, api_name="fold", **fast)
    c.play_btn.click(cb.on_play, [c.state], [c.timer, c.play_btn, c.follow], api_name="play", **fast)
    c.timer.tick(cb.on_tick, [c.state], nav + [c.timer, c.play_btn], api_name="play_tick", **fast)


def _wire_runs(c: SimpleNamespace, cb: Callbacks, view_out: list) -> None:
    inputs = [c.prompt, c.mode, c.rule, c.temperature, c.seed, c.max_new, c.shifted, c.nodes, c.drafter, c.state]
    model = dict(concurrency_limit=1, concurrency_id="model", show_progress="minimal", **RAW)
    c.run_btn.click(cb.on_run, inputs, view_out, api_name="run", **model)
    c.stop_btn.click(cb.on_stop, [c.state], None, queue=False, show_progress="hidden", api_name="stop")
    cmp_inputs = [c.cmp_mode, c.cmp_rule, c.state]  # the rest: the trace shown's own (Callbacks.on_compare)
    c.curve_btn.click(cb.on_budget_curve, [c.prompt, c.temperature, c.seed, c.max_new, c.state],
                      [c.curve_plot, c.analysis_json], api_name="budget_curve", **model)
    c.cmp_btn.click(cb.on_compare, cmp_inputs,
                    [c.state, c.cmp_metrics, c.cmp_timeline, c.cmp_a_metrics, c.cmp_a_timeline, c.cmp_a_cf,
                     c.cmp_b_cf, c.cmp_json, c.metrics, c.cmp_table], api_name="compare", **model)


def _wire_traces(c: SimpleNamespace, cb: Callbacks, view_out: list) -> None:
    c.cmp_swap.click(cb.on_swap, [c.state], view_out, api_name="swap_compare", show_progress="hidden")
    for name, plot in (("timeline", c.cmp_timeline), ("counterfactual", c.cmp_b_cf)):  # the comparison's rounds:
        plot.click(cb.on_swap_click, [c.state], view_out, api_name=f"comparison_{name}_click",  # it takes the
                   show_progress="hidden")                                                        # inspector first
    c.load_btn.upload(cb.on_upload, [c.load_btn, c.state], view_out, api_name="load_trace", **RAW)
    c.example_trace.input(cb.on_example_trace, [c.example_trace, c.state], view_out, api_name="example_trace", **RAW)
    c.examples_btn.click(cb.on_example_analyses, None, [c.analysis_json, c.hist_plot, c.gain_plot, c.tables],
                         queue=False, api_name="example_analyses")
    c.current_btn.click(cb.on_current_analyses, [c.state], [c.analysis_json, c.hist_plot, c.gain_plot, c.tables],
                        queue=False, api_name="current_analyses")
    c.status_timer.tick(cb.on_status, None, [c.model_status, c.status_timer], show_progress="hidden",
                        api_name="model_status")


def build_ui(loader, sessions: session.Sessions | None = None) -> gr.Blocks:
    """The page; `sessions` bounds what its sessions hold (default: this machine's bounds, app.session)."""
    # the page opens on the example the lesson (docs/teaching.md) walks through
    trace_choices = sorted(session.example_traces(), key=lambda c: c[0] != LESSON_TRACE)
    sessions = sessions or session.Sessions().start_sweeper()
    cb = Callbacks(loader, trace_choices, sessions)
    with gr.Blocks(title="ReAnchor Explorer", analytics_enabled=False) as demo:
        c = layout(loader, trace_choices, sessions)
        view_out = [c.state] + [getattr(c, name) for name in views.VIEW_OUTPUTS]
        _wire_navigation(c, cb)
        _wire_runs(c, cb, view_out)
        _wire_traces(c, cb, view_out)
        race.wire(c, race.Race(loader, sessions, cb), view_out)
        # a tab shown again: Plotly figures drawn while it was hidden take its width
        c.tabs.select(None, js=assets.read("tab_resize.js"))
        demo.load(cb.on_load, [c.state], view_out, api_name="show_example")
        demo.unload(cb.on_unload)
    loader.on_phase(lambda: status_settled(demo, c, loader))
    return demo


def status_settled(demo: gr.Blocks, c: SimpleNamespace, loader) -> None:
    """At each loading phase (models loaded with the profile still running; loading ended), a fresh page shows so
    at once: the status line's value and the status timer are part of the page's config, built once (Gradio serves
    blocks.config to every page), so both are set there too. Else every new page said "loading models… 0 s" until
    its timer's first tick. The timer ticks on while the profile's steps are counted."""
    c.model_status.value, c.status_timer.active = loader.status(), loader.loading
    for comp in (getattr(demo, "config", None) or {}).get("components", []):
        if comp.get("id") == c.model_status._id:
            comp["props"]["value"] = c.model_status.value
        elif comp.get("id") == c.status_timer._id:
            comp["props"]["active"] = c.status_timer.active

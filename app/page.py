"""What runs in and styles the page: the browser-side JavaScript of the text view, the round figure
and the timeline (files of app/static/: token_click.js, page.js, timeline.js), the plotly.js script tag, the
theme and the CSS (text.css, race.css, app.css); app.ui wires them to the components."""
from __future__ import annotations

from pathlib import Path

import gradio as gr
import plotly

from . import assets, plots, race_view, render, views

# Clicking a token (a span with data-r / data-k in the text view) sends its round to Python.
JS_TOKEN_CLICK = assets.read("token_click.js")

# plotly.js from the plotly package (the version its figure JSON is written for), served by this app:
# the round figure and the timeline draw with it without waiting for a gr.Plot to load Gradio's copy.
# Served at a route of our own (app/__main__.py), not Gradio's /gradio_api/file=<absolute path>, which
# would show every visitor where the server's Python packages live.
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_ROUTE = "/rx/plotly.min.js"
HEAD = f'<script defer src="{PLOTLY_ROUTE}"></script>'

# The round figure is drawn by Plotly straight from its JSON (gr.HTML), skipping gr.Plot's second full
# redraw. The value is a payload {key, round, n, src, caption, fig, next}: `next`, the following round, is drawn
# ahead into an offscreen div, so "next ▶" only swaps divs (the round left behind stays drawn for
# "◀ prev"); the server's answer to the click then confirms it, and wins whenever it differs. `key`
# changes with the session's trace and its view settings, and empties the browser's caches. `src` (a finished
# trace): the session's rounds route (app.views.rounds_json), from which the page fetches the other rounds (up to
# PREFETCH_ROUNDS around the one shown) while it is idle, so that a jump (the slider) draws at once, before the
# server's answer, which again wins where it differs.
PREFETCH_ROUNDS = 128  # rounds the page holds for jumps: ~20 KB of figure JSON each
DRAWN_AHEAD = 24  # of them, those nearest the shown round drawn offscreen (~850 page elements each)
# The Python values the page's scripts read (as RX.<name>): one JSON block before each script
CONSTANTS = {"PREFETCH_ROUNDS": PREFETCH_ROUNDS, "ROUNDS_PER_FETCH": views.ROUNDS_PER_FETCH,
             "DRAWN_AHEAD": DRAWN_AHEAD, "VIEW_MARK": plots.VIEW_MARK}
# data-shown marks the figure shown: the rounds drawn ahead lie beside it, hidden (page.js)
PLOT_TEMPLATE = "<div class='rx-plot' data-shown style='width:100%;min-height:120px'></div>"
JS_PLOT = assets.with_constants(CONSTANTS, "rounds.js", "page.js")  # rounds.js: its pure logic (window.rxRounds)

# The timeline, drawn the same way (a gr.Plot kept detached DOM alive on every streamed update: 1.4 M
# nodes after a 2,000-round run); a click on a bar opens that round. The frame around the round in view
# (app.plots.view_frame) follows the round figure (window.__rxRound) on every round switch, moved by hand:
# Plotly.relayout of a shape redraws every bar (0.55 s a switch on a 2,000-round timeline). Its drawn paths
# shift along x; the layout keeps the new place for Plotly's next redraw (a resize, a streamed timeline).


def js_round_plot(frame: bool, other: bool = False) -> str:
    """A figure of rounds drawn from its JSON (gr.HTML with PLOT_TEMPLATE) whose click on a round goes to it: the
    inspector's timeline (`frame`: it frames the round in view; one a page) or a Compare panel figure (`other`: a
    round of the comparison run, which the server puts in the inspector first)."""
    return assets.with_constants({**CONSTANTS, "FRAME": frame, "OTHER": other}, "timeline.js")


JS_TIMELINE = js_round_plot(frame=True)

# The list of rounds (app.views.rule_rounds): a click on a round goes to it (a round the page holds at once, as a
# token click) and brings the inspector into view
JS_ROUND_LIST = assets.read("round_list.js")

SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica Neue", "Arial",
                "DejaVu Sans", "sans-serif"]
MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "DejaVu Sans Mono", "monospace"]


def theme() -> gr.themes.Base:
    """System fonts only: no web-font requests."""
    return gr.themes.Default(font=SYSTEM_FONTS, font_mono=MONO_FONTS)


CSS = render.CSS + race_view.CSS + assets.read("app.css")

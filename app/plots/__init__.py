"""Pure Plotly figure builders: a figure is a function of round records (+ the token_texts map) only.

Every string placed in a figure, token text or label or title, goes through app.tokentext.plotly_text
(escaped once; token text also made visible): titles arrive as plain text, a newline breaks the line.
A figure's size follows the lists of the (validated) round it draws, never a number read from a file.
Figures carry no template (template "none") to keep the JSON small.

The rooms, by figure kind: round.py (the round figure) draws grid.py's alignment grid above trie.py's merged trie
on geometry.py's position axis; runs.py the run-level figures. The colours are app.palette's. Callers use the
names here.
"""
from __future__ import annotations

from .grid import MAX_OTHER_SITES, strip_rows
from .round import DRAWN_ROWS, FIT_BRANCHES, FIT_HEIGHT, PHASE_PARTS, round_figure, round_figure_json, round_figure_parts
from .runs import TIMELINE_BARS, VIEW_MARK, bar_figure, budget_curve_figure, counterfactual_figure, empty_figure, \
    share_axes, timeline_figure, view_frame
from .trie import DOTS_A_NODE, DRAWN_NODES, drawn_trie, fitted_trie, retained_path

__all__ = ["DOTS_A_NODE", "DRAWN_NODES", "DRAWN_ROWS", "FIT_BRANCHES", "FIT_HEIGHT", "MAX_OTHER_SITES", "PHASE_PARTS", "TIMELINE_BARS",
           "VIEW_MARK", "bar_figure", "budget_curve_figure", "counterfactual_figure", "drawn_trie", "empty_figure", "fitted_trie",
           "retained_path", "round_figure", "round_figure_json", "round_figure_parts", "share_axes", "strip_rows",
           "timeline_figure", "view_frame"]

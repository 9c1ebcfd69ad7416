"""The round figure's geometry: its Style (label size, row and slot heights), the columns of its position axis
(Cols: uniform, or as wide as each position's widest label), and fitting a token's label to its room."""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from .. import records
from ..tokentext import tok_fit

def path_label(rec: dict, i: int) -> str:
    p = rec["paths"][i]
    src = int(p["source"])
    if src == 0:
        return "g(0)"
    return f"g({src})@{p['site']}" if p.get("site") is not None else f"g({src})"


@dataclass(frozen=True)
class Style:
    """How big the round figure draws: `projector` labels of 14 px (else 11), rows and trie slots spaced for them,
    labels cut to a 1280 px page's plot area (else a 1024 px page's). `row`, `slot`: a grid row's and a trie row's
    height when a projector phase squeezes them to fit the screen (lesson_fit)."""
    projector: bool = False
    row: int | None = None
    slot: int | None = None
    left: int | None = None

    @property
    def font(self) -> int:
        return 14 if self.projector else 11

    @property
    def row_px(self) -> int:   # a grid row: its label in the middle, marks in the bands above and below it
        return self.row or (40 if self.projector else 30)

    @property
    def cell_px(self) -> int:  # a grid cell's height: the bands above and below it hold the marks
        return self.row_px - 16 if self.projector else 18

    @property
    def slot_px(self) -> int:  # a trie row: the node, its label above it
        return self.slot or (40 if self.projector else 30)

    @property
    def left_px(self) -> int:  # the margin of the row names
        return self.left or (PROJECTOR_LEFT_PX if self.projector else 112)

    @property
    def plot_px(self) -> int:
        return PROJECTOR_PLOT_PX + PROJECTOR_LEFT_PX - self.left_px if self.projector else PLOT_PX


class Cols:
    """Where each position stands on the figure's x axis. Uniform (x = the position) by default; in the projector
    setting each position's column is as wide as its widest label (px units: 1 unit a pixel of a 1280 px page's
    plot area), so that tokens stand whole (`widths`, from position s on)."""

    def __init__(self, s: int, widths: list[float] | None = None):
        self.s, self.widths = s, widths
        self.edges = None
        if widths:
            self.edges = [0.0]
            for w in widths:
                self.edges.append(self.edges[-1] + w)

    def __call__(self, pos: float) -> float:
        if not self.widths:
            return pos
        p = pos - self.s
        i = max(0, min(len(self.widths) - 1, int(p + 0.5) if p >= -0.5 else -1))
        return round(self.edges[i] + (p - i + 0.5) * self.widths[i], 2)

    def room(self, pos: int) -> float:
        """The px a label in the position's column may take, in char_px's measure (SET_WIDTH)."""
        return (self.width(pos) - COL_PAD_PX) / SET_WIDTH

    def width(self, pos: int) -> float:
        """A position's column width in px (uniform: None)."""
        if not self.widths:
            return None
        return self.widths[max(0, min(len(self.widths) - 1, pos - self.s))]


# The round figure's plot area on a 1024 px wide page: 960 px of figure less its margins. Labels are cut to fit it
# (by their width, app.tokentext.tok_fit); a wider page only spaces them more. The projector setting fits a 1280 px
# page's (1192 px of figure, measured in Chromium, less the margins of 150 + 10 px).
PLOT_PX = 840
PROJECTOR_PLOT_PX = 1032
PROJECTOR_LEFT_PX = 150  # the row names' margin (a phase on the trie alone, which names no rows: TRIE_LEFT_PX)
TRIE_LEFT_PX = 40
# Where marks sit in a grid row (row units from its middle; the axis runs downwards): above the label the sites and
# the native position, below it the accepted bar. A label of 14 px takes about +-0.22 of a 42 px row.
MARK_TOP, MARK_BOTTOM = -0.38, 0.38


def position_px(positions: int, width_px: int = PLOT_PX) -> float:
    """Pixels a label one position apart from the next may take (app.tokentext.tok_fit cuts it to them)."""
    return max(12.0, min(49.0, width_px / max(positions, 1)))


def fit_token(token_texts: dict, tok: int, px: float, style: Style) -> str:
    """tok_fit for the style's font (tok_fit measures 9 px text)."""
    return tok_fit(token_texts, tok, px * 9 / style.font)


def plain_figure(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts, skipping Plotly's per-property validation (the slow part)."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


MIN_COL_PX, COL_PAD_PX, TAG_PX, MAX_COL_PX = 18, 6, 64, 120
# char_px's widths are DejaVu Sans's widest; Chromium's system font at 14 px sets tokens ~8% narrower (" calculate"
# 72 px where char_px says 79)
SET_WIDTH = 0.93


def label_px(token_texts: dict, tok: int, style: Style) -> float:
    """A token label's width in px at the style's font (app.tokentext.char_px measures 9 px text)."""
    return records._label_px(token_texts, tok) * style.font / 14 * SET_WIDTH


def label_columns(s: int, wants: list[float], style: Style, tag_px: float = TAG_PX) -> Cols:
    """Column widths from the widest label each (`wants`, px; a column without one MIN_COL_PX): all whole where they
    fit the plot area less `tag_px` on the right; else the widest cut to one width (the fewest labels cut), the
    narrow ones whole."""
    natural = [max(MIN_COL_PX, w + COL_PAD_PX) if w else MIN_COL_PX for w in wants]
    room = style.plot_px - tag_px
    if sum(natural) <= room:  # spare room shared evenly (up to MAX_COL_PX a column), the rest on the right
        extra = (room - sum(natural)) / max(len(natural), 1)
        widths = [min(max(w, MAX_COL_PX), w + extra) for w in natural]
    else:
        lo, hi = float(MIN_COL_PX), float(max(natural))
        for _ in range(24):  # the widest width that fits: labels wider than it are cut to it
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(min(w, mid) for w in natural) <= room else (lo, mid)
        widths = [min(w, lo) for w in natural]
        if sum(widths) > room:
            widths = [w * room / sum(widths) for w in widths]
    return Cols(s, [round(w, 1) for w in widths] + [tag_px + max(0.0, room - sum(widths))])

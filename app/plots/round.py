"""The round figure: the alignment grid (app.plots.grid) above the merged trie (app.plots.trie) on one position
axis; a step-through phase draws its parts in full and fades the rest, and in the projector setting draws only
what the phase needs, within FIT_HEIGHT."""
from __future__ import annotations

import json
from dataclasses import replace

import plotly.graph_objects as go

from engine.analyses import baseline_accepted, path_nodes

from .. import records
from ..palette import EXT_FILL, FONT
from ..tokentext import plotly_text
from .geometry import TAG_PX, TRIE_LEFT_PX, Cols, Style, label_columns, label_px, plain_figure, position_px
from .grid import accepted_cells, alignment_rows, fold_trace, native_traces, row_trace, site_traces, strip_rows
from .trie import drawn_trie, fitted_trie, leaves, retained_path, trie_layout, trie_traces

DIM = 0.16           # opacity of the parts a step-through phase does not point at


def _round_layout(rec: dict, labels: list[str], n_slots: int, max_depth: int, title: str | None,
                  style: Style, X: Cols | None = None) -> dict:
    """Grid above trie, sharing the position axis; the extension band past the native block. No labels: no grid
    (a projector phase on the trie alone); n_slots 0: no trie (a phase on the grid alone)."""
    X = X or Cols(0)
    s, L = int(rec["anchor_pos"]), int(rec.get("block_size") or len(rec["baseline"]))
    a = int(rec.get("accepted", len(rec.get("accepted_nodes", [0])) - 1))
    n_rows = len(labels)
    grid_h = style.row_px * n_rows
    # above the first slot: 0.8 of one, at least the root's label over its marker (a label's size + 12 px: at a
    # bushy trie's 24 px slots, 0.8 of one cut the top of a 14 px label)
    top = max(0.8, (style.font + TRIE_HEAD_PAD) / style.slot_px)
    trie_h = style.slot_px * (n_slots + top) if n_slots else 0
    gap_px = 30 if grid_h and trie_h else 0
    total = max(grid_h + trie_h + gap_px, 1)
    shapes, annotations = [], []
    if max(int(d) for d in rec["trie"]["depths"]) >= L and max_depth >= L:  # the trie reaches past g(0)'s block
        shapes.append({"type": "rect", "xref": "x2", "yref": "paper", "x0": X(s + L - 0.5),
                       "x1": X(s + max_depth + 0.5),
                       "y0": 0, "y1": 1, "fillcolor": EXT_FILL, "line": {"width": 0}, "layer": "below"})
        annotations.append({"x": X(s + max_depth + 0.5) if X.widths else X(s + L - 0.4), "y": 1.0, "xref": "x2",
                            "yref": "paper", "text": "past g(0)'s block →",
                            "showarrow": False, "xanchor": "right" if X.widths else "left", "yanchor": "bottom",
                            "font": {"size": style.font if style.projector else style.font - 1, "color": "#a07800"}})
    nodes = len(rec["trie"]["parents"])
    drawn = f"{nodes} trie nodes"
    if rec.get("branches_all"):   # a projector phase's cut (fitted_trie)
        drawn = f"{rec['nodes_all']:,} trie nodes, {leaves(rec)} of {rec['branches_all']} branches drawn"
    elif "nodes_all" in rec:      # a huge round's (drawn_trie)
        drawn = f"{rec['nodes_all']:,} trie nodes, the first {nodes:,} drawn"
    head = title or (f"round {rec['round']} · anchor @ {s} · accepted {a}"
                     f" ({baseline_accepted(rec)} baseline-alone) · {drawn}")
    if X.widths:  # the columns' centres, named by position (every other one where columns are narrow)
        every = 2 if min(X.widths[:max_depth + 1]) < 30 else 1
        ticks = list(range(s, s + max_depth + 1, every))
        xaxis2 = {"tickvals": [X(p) for p in ticks], "ticktext": [str(p) for p in ticks],
                  "range": [X.edges[0], X.edges[-1]]}
    else:
        xaxis2 = {"dtick": 1 if max_depth < 24 else 2, "range": [s - 0.6, s + max_depth + 1.6]}
    position = {"anchor": "y2" if n_slots else "y", "title": {"text": "position"}, "tickfont": {"size": style.font},
                "showgrid": False, "zeroline": False, "ticklabeloverflow": "allow", **xaxis2}
    # "ticklabeloverflow": "allow": the labels lie inside the figure's margins, and Plotly's default ("hide past div")
    # measures every tick label's box, a forced layout of the page each (a fifth of a round's draw)
    return {
        "template": "none", "font": {**FONT, "size": style.font}, "height": int(70 + total),
        "margin": {"l": style.left_px, "r": 10, "t": 34, "b": 40},
        "title": {"text": plotly_text(head), "x": 0.01, "font": {"size": style.font + 2}},
        "showlegend": False,  # a Plotly legend costs ~45 ms per draw: the page shows FIGURE_LEGEND instead
        "hovermode": "closest", "hoverdistance": 12,  # a mark's hover only under the pointer, not a row's neighbour's
        "hoverlabel": {"font": {"family": "ui-monospace, 'DejaVu Sans Mono', monospace", "size": style.font}},
        "plot_bgcolor": "white", "paper_bgcolor": "white", "uirevision": "round",
        "meta": {"projector": style.projector},  # page.JS_PLOT: no modebar over a projector's labels
        "xaxis": {"anchor": "y", "matches": "x2", "showticklabels": False, "showgrid": False, "zeroline": False}
        if n_slots else position,  # no trie (a projector phase on the grid): Plotly draws no axis without a trace
        "xaxis2": position,
        "yaxis": {"domain": [1 - grid_h / total, 1] if grid_h else [0.999, 1], "range": [n_rows - 0.5, -0.5],
                  "tickvals": list(range(n_rows)), "visible": bool(grid_h),
                  "ticktext": [plotly_text(t) for t in labels], "showgrid": False, "zeroline": False,
                  "tickfont": {"size": style.font}, "ticklabeloverflow": "allow"},
        "yaxis2": {"domain": [0, trie_h / total] if trie_h else [0, 0.001], "range": [max(n_slots, 1) - 0.5, -top],
                   "showticklabels": False, "showgrid": False, "zeroline": False},
        "shapes": shapes, "annotations": annotations,
    }


# What each step-through phase points at (app.render.PHASES words them): the parts the figure draws in full; the
# rest fades (DIM).
PHASE_PARTS = {
    1: {"strip"},
    2: {"g0"},
    3: {"strip", "shifted", "native", "fold"},
    4: {"g0", "shifted", "sites", "fold"},
    5: {"shifted", "sites", "native", "fold", "discarded"},
    6: {"trie", "trie-g0", "shared"},
    7: {"trie", "trie-g0", "edges"},
    8: {"accepted", "path", "bonus", "trie-g0", "trie"},
    9: {"retained", "path", "bonus"},
}


def round_figure(rec: dict, token_texts: dict, title: str | None = None, depth_cap: int | None = None,
                 **view) -> go.Figure:
    """One round: (a) alignment grid of g(0) and every g(d) at its attachment site, (b) the merged trie.

    Both rows share the x axis: absolute position anchor_pos + depth. Token text travels in data
    arrays only (text / customdata), never inside a template string. `view`: round_figure_parts's.
    """
    return plain_figure(**round_figure_parts(rec, token_texts, title, depth_cap, **view))


def round_figure_json(rec: dict, token_texts: dict, title: str | None = None, depth_cap: int | None = None,
                      **view) -> str:
    """round_figure(...).to_json(), without Plotly's deep copies (half a round switch's time): the
    parts are plain JSON values already."""
    return json.dumps(round_figure_parts(rec, token_texts, title, depth_cap, **view), separators=(",", ":"))


# The lesson on one projector screen (1280x720): a step-through phase draws in at most FIT_HEIGHT px, under its
# sentence (app.render keeps the caption to the sentence in a projector phase); rows and trie slots squeeze down to
# FIT_ROW_PX / FIT_SLOT_PX (the trie alone: MIN_SLOT_PX, at most FIT_BRANCHES branches: a bushier trie, a tree
# mode's, is cut to them, its title saying so).
# Columns: each as wide as its widest label, at least MIN_COL_PX, and TAG_PX on the right for the names at the
# branches' ends and the bonus's label.
FIT_HEIGHT = 480
FIT_ROW_PX, FIT_SLOT_PX, MIN_SLOT_PX = 32, 28, 24
TRIE_HEAD_PAD = 12
FIT_BRANCHES = int((FIT_HEIGHT - 70 - 14 - TRIE_HEAD_PAD) / MIN_SLOT_PX)   # 16 (the room less the root label's)
HEAD_TOKENS = 3  # a shifted row's tokens written out in phases 3-5 (which are about its start and its site)


def _label_wants(rec: dict, token_texts: dict, rows: list[dict], n: int, style: Style,
                 trie: str = "all") -> list[float]:
    """The widest label each position shows: the labelled grid `rows`, the trie's labels (`trie` "all": the accepted
    path and each branch's first node, which has its row to itself on its right and so needs half its width;
    "accepted": the accepted path; "retained": and the retained suffix; "": none)."""
    wants = [0.0] * n
    for r in rows:
        if r["kind"] == "discarded":  # hover only
            continue
        for j, tok in enumerate(r["tokens"][:r.get("labelled")]):
            k = r["start"] + j
            if tok is not None and 0 <= k < n:
                wants[k] = max(wants[k], label_px(token_texts, tok, style))
    if not trie:
        return wants
    trie_y, _ = trie_layout(rec)
    t = rec["trie"]
    parents, depths = t["parents"], t["depths"]
    tokens, a = retained_path(rec)
    acc = {int(x) for x in rec.get("accepted_nodes", [0])}
    shown = acc | set(path_nodes(rec, tokens)) if trie == "retained" else acc
    heads = {i for i in range(1, len(parents)) if trie_y[i] != trie_y[parents[i]]} - acc if trie == "all" else set()
    for i in shown | heads:
        k = int(depths[i])
        if 0 <= k < n:
            wants[k] = max(wants[k], label_px(token_texts, t["tokens"][i], style) / (2 if i in heads else 1))
    return wants


DRAWN_ROWS = 48      # attached rows a round figure draws unfolded (the rest join the folded row; a click opens all)


def _fold_overflow(rec: dict, kept: list[dict], dropped: list[dict], rows: int, cell_px: float,
                   style: Style) -> tuple[list[dict], list[dict]]:
    """(kept, dropped) with at most `rows` rows drawn, the folded row included: g(0) stays, then the attached rows
    the target accepted drafts on, then by d; the rest join the folded row (its label counts them)."""
    s = int(rec["anchor_pos"])
    shifted = [r for r in kept if r["kind"] == "shifted"]
    room = max(1, rows - (len(kept) - len(shifted)) - 1)
    ranked = sorted(shifted, key=lambda r: (not accepted_cells(rec, [r], [0], cell_px, style, Cols(s)), r["d"]))
    overflow = {id(r) for r in ranked[room:]}
    return [r for r in kept if id(r) not in overflow], dropped + [r for r in kept if id(r) in overflow]


def round_figure_parts(rec: dict, token_texts: dict, title: str | None, depth_cap: int | None,
                       prev: dict | None = None, phase: int = 0, projector: bool = False,
                       unfold: bool = False) -> dict:
    """round_figure's data (a list of trace dicts) and layout, as plain dicts. `prev`: the previous round's record
    (its rejected suffix drawn above g(0)); `phase` 1-9: the step-through's part in full, the rest faded (0: all);
    `projector`: 14 px labels (Style), columns as wide as their tokens (Cols), and in a phase only what the phase
    needs, within FIT_HEIGHT (the rows it fades and the discarded blocks folded away, the grid or the trie alone,
    phase 8 the trie's accepted path alone, phase 9 with the retained suffix); `unfold`: every discarded block on a
    row of its own (else one row)."""
    style = Style(projector)
    rec = drawn_trie(rec)
    fit = projector and phase in PHASE_PARTS
    if fit and phase in (6, 7):   # the trie alone: the branches MIN_SLOT_PX rows hold
        rec = fitted_trie(rec, FIT_BRANCHES)
    s = int(rec["anchor_pos"])
    rows = alignment_rows(rec, depth_cap)
    strip = strip_rows(rec, prev)
    kept = [r for r in rows if r["kind"] != "discarded"]
    dropped = [r for r in rows if r["kind"] == "discarded"]
    a = int(rec.get("accepted", len(rec.get("accepted_nodes", [0])) - 1))
    shown = strip + kept + (dropped if unfold else [])  # folded, a discarded block takes its native index only
    max_depth = max([r["start"] + len(r["tokens"]) - 1 for r in shown] + [r["d"] for r in dropped]
                    + [int(d) for d in rec["trie"]["depths"]] + [a + 1])
    cell_px = position_px(max_depth + 3, style.plot_px) - 3  # cells are 3 px apart
    show_trie, path_only = True, ""
    if fit:  # what the phase needs (PHASE_PARTS), nothing else
        show_trie, path_only = phase >= 6, {8: "accepted", 9: "retained"}.get(phase, "")
        if phase == 1:  # the strip (g(0) where there is none: round 0, or nothing rejected)
            kept, dropped = [] if strip else kept[:1], []
        elif phase == 2:
            strip, kept, dropped = [], kept[:1], []
        elif phase == 3:  # the strip and the shifted rows; g(0), faded here, folded away
            kept = kept[1:] if strip or kept[1:] else kept
        elif phase == 8:  # g(0) and the rows the target accepted drafts on
            strip, dropped = [], []
            kept = [r for r in kept if r["kind"] == "baseline" or accepted_cells(rec, [r], [0], cell_px, style,
                                                                                  Cols(s))]
        elif phase in (4, 5):
            strip = []
        elif phase >= 6:
            strip, kept, dropped = [], [], []
        # the far-right columns folded: past g(0)'s block and the strip (phase 8: and the bonus), a grid phase shows
        # nothing a class needs (the tails of blocks attached late); the trie's phases keep every depth
        tokens, _ = retained_path(rec)
        far = max(len(rec["baseline"]) - 1, a + 1 if phase == 8 else 0,
                  max((len(r["tokens"]) - 1 for r in strip), default=0))
        trie_depth = max(int(d) for d in rec["trie"]["depths"])
        if phase == 9:
            trie_depth = max(int(rec["trie"]["depths"][n]) for n in path_nodes(rec, tokens))
        max_depth = trie_depth if phase in (6, 7) else max(trie_depth, a + 1) if phase == 9 else \
            min(max_depth, far)
        # more rows than FIT_HEIGHT holds at FIT_ROW_PX: the attached rows the target accepted drafts on first, then
        # by d; the rest join the folded row (a click opens every row)
        fits = int((FIT_HEIGHT - 70 - (30 + FIT_SLOT_PX * 2.3 if show_trie else 0)) // FIT_ROW_PX)
        if kept and not unfold and len(strip) + len(kept) + (1 if dropped else 0) > fits:
            kept, dropped = _fold_overflow(rec, kept, dropped, fits - len(strip), cell_px, style)
        if phase in (3, 4, 5):  # where each block starts and attaches: its first tokens written, the rest on hover
            kept = [{**r, "labelled": HEAD_TOKENS} if r["kind"] == "shifted" else r for r in kept]
    elif not unfold and len(kept) > DRAWN_ROWS:   # a trace may hold 127 attached rows of 128 cells: 16,000 cells
        kept, dropped = _fold_overflow(rec, kept, dropped, DRAWN_ROWS + 1, cell_px, style)
    xs = list(range(s, s + max_depth + 1))
    if projector:
        if fit and not (strip or kept):  # the trie alone: no row names on its left
            style = replace(style, left=TRIE_LEFT_PX)
        wants = _label_wants(rec, token_texts, strip + kept, len(xs), style,
                             "" if fit and not show_trie else path_only or "all")
        X = label_columns(s, wants, style, 12 if fit and not show_trie else TAG_PX)
    else:
        X = Cols(s)
    drawn = strip + kept + ([] if not dropped else [None]) + (dropped if unfold else [])
    ys = list(range(len(drawn)))
    labels, data = [], []
    for r, y in zip(drawn, ys):
        if r is None:
            gone = [f for f in dropped if f["fate"]["fate"] != "attached"]
            why = sorted({records.FATE_SHORT[f["fate"]["fate"]] for f in gone})
            more = len(dropped) - len(gone)  # attached rows a projector phase had no room for
            labels.append((f"✗ {len(gone)} {' / '.join(why)}" if gone else "")
                          + (f"{' · ' if gone else ''}+{more} attached" if more else "")
                          + f" {'▾' if unfold else '▸'}")
            data.append(fold_trace(dropped, y, xs, s, style, unfold, X))
            continue
        labels.append(r["label"])
        part = {"baseline": "g0", "shifted": "shifted", "discarded": "discarded"}.get(r["kind"], "strip")
        data.append(row_trace(r, y, xs, token_texts, cell_px, style, part, labelled=r["kind"] != "discarded",
                               cols=X))
    data.sort(key=lambda t: t["meta"] != "g0")  # g(0)'s row first
    on_grid = [(r, y) for r, y in zip(drawn, ys) if r is not None and r["kind"] in ("baseline", "shifted")]
    grid_rows, grid_ys = [r for r, _ in on_grid], [y for _, y in on_grid]
    data += accepted_cells(rec, grid_rows, grid_ys, cell_px, style, X) + site_traces(grid_rows, grid_ys, s, style, X)
    data += native_traces(grid_rows + (dropped if unfold else []),
                           grid_ys + [ys[-len(dropped) + k] for k in range(len(dropped))] if unfold else grid_ys,
                           s, style, X)
    n_slots = 0
    if show_trie:
        trie_data, n_slots = trie_traces(rec, token_texts, style, len(xs) + 2, X, path_only)
        data += trie_data
    if phase in PHASE_PARTS:
        on = PHASE_PARTS[phase]
        for t in data:
            if t.get("meta") not in on:
                t["opacity"] = DIM
    if fit:  # squeezed to FIT_HEIGHT: the figure under the phase's sentence on one screen
        room = FIT_HEIGHT - 70 - (30 if labels and n_slots else 0)
        trie_px = 40 * (n_slots + 0.8) if n_slots and not labels else FIT_SLOT_PX * (n_slots + 0.8) if n_slots else 0
        if n_slots and not labels:  # a bushy trie down to MIN_SLOT_PX a row (labels only on its heads and path)
            style = replace(style, slot=int(max(MIN_SLOT_PX, min(40, room / (n_slots + 0.8)))))
        elif n_slots:
            style = replace(style, slot=FIT_SLOT_PX + 8)
            trie_px = style.slot_px * (n_slots + 0.8)
        if labels:
            style = replace(style, row=int(max(FIT_ROW_PX, min(40, (room - trie_px) / len(labels)))))
    layout = _round_layout(rec, labels, n_slots, max_depth, title, style, X)
    layout["meta"]["phase"] = phase  # which view this is, for the page's tests
    return {"data": data, "layout": layout}

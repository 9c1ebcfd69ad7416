"""Pure Plotly figure builders: a figure is a function of round records (+ the token_texts map) only.

Every string placed in a figure, token text or label or title, goes through app.tokentext.plotly_text
(escaped once; token text also made visible): titles arrive as plain text, a newline breaks the line.
A figure's size follows the lists of the (validated) round it draws, never a number read from a file.
Figures carry no template (template "none") to keep the JSON small.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import networkx as nx
import plotly.graph_objects as go

from engine.analyses import baseline_accepted, children, path_nodes
from engine.trie import first_path_through

from . import records
from .tokentext import plotly_text, tok_cell, tok_fit, tok_full

BASE_COLOR = "#3b6fd4"
SHARED_COLOR = "#7b5fc7"
BONUS_COLOR = "#e0a100"
GREY = "#c9ccd1"
ACCEPT_COLOR = "#1a9e50"
# One colour per shifted offset d (cycled): distinct from the baseline blue.
D_COLORS = ["#e4572e", "#17a398", "#c44fa0", "#8a6d1d", "#f08c2b", "#4f9d2d", "#d1495b", "#2e86ab"]
EXT_FILL = "rgba(240,180,0,0.10)"
# The round in view, on the timeline: framed in the near-black that frames its tokens in the text view
# (render.CSS span.cur). VIEW_MARK names the frame (its legend entry; page.JS_TIMELINE moves it by name).
VIEW_COLOR = "#111"
VIEW_FILL = "rgba(17,17,17,0.10)"
VIEW_MARK = "round in view"
MAX_OTHER_SITES = 3   # matching sites drawn per row besides the attached ones
MAX_CELL_TEXTS = 160  # labelled grid cells per figure (discarded blocks: hover only)
FONT = dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif", size=11)


def d_color(d: int) -> str:
    return D_COLORS[(int(d) - 1) % len(D_COLORS)]


def category_color(cat: str) -> str:
    if cat == "baseline":
        return BASE_COLOR
    if cat == "shared":
        return SHARED_COLOR
    if cat == "bonus":
        return BONUS_COLOR
    if cat.startswith("d"):
        return d_color(int(cat[1:]))
    return GREY


def _r(v: float) -> float:
    return round(float(v), 2)


def _path_label(rec: dict, i: int) -> str:
    p = rec["paths"][i]
    src = int(p["source"])
    if src == 0:
        return "g(0)"
    return f"g({src})@{p['site']}" if p.get("site") is not None else f"g({src})"


# ---------------------------------------------------------------- round figure: alignment grid + trie

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
DIM = 0.16           # opacity of the parts a step-through phase does not point at
REJECT_COLOR = "#8d4b4b"
TARGET_COLOR = "#2f2f2f"
RETAIN_COLOR = "#d1495b"


def position_px(positions: int, width_px: int = PLOT_PX) -> float:
    """Pixels a label one position apart from the next may take (app.tokentext.tok_fit cuts it to them)."""
    return max(12.0, min(49.0, width_px / max(positions, 1)))


def _fit(token_texts: dict, tok: int, px: float, style: Style) -> str:
    """tok_fit for the style's font (tok_fit measures 9 px text)."""
    return tok_fit(token_texts, tok, px * 9 / style.font)


def _grid_rows(rec: dict, depth_cap: int | None = None) -> list[dict]:
    """Rows of the alignment grid: the baseline, then every shifted block at its placement (attached: at
    its site; discarded: at its native index), labelled by block and fate (records.block_fates). `backbone`:
    where a sequential head (Domino, DSpark) changed the backbone's token, {block index j: the backbone's token}."""
    own: dict[int, dict[int, int]] = {}
    for b in rec.get("backbone") or []:
        own.setdefault(b["d"], {})[b["j"]] = b["token"]
    rows = [{"label": "g(0)", "tokens": list(rec["baseline"]), "start": 0, "kind": "baseline", "d": 0,
             "sites": [], "chosen": None, "attached": [], "fate": None, "backbone": own.get(0, {})}]
    for s, f in zip(rec.get("shifted", []), records.block_fates(rec, depth_cap)):
        d, chosen, attached = f["d"], f["site"], f["attached"]
        if f["fate"] != "attached":
            label = f"g({d}) ✗ {records.FATE_SHORT[f['fate']]}"
        else:
            label = f"g({d}) at {chosen}" + (f"+{len(attached) - 1}" if len(attached) > 1 else "") + (" ✂" if f["cut"] else "")
        rows.append({"label": label, "tokens": list(s["tokens"]), "start": int(chosen) if f["fate"] == "attached" else d,
                     "kind": "shifted" if f["fate"] == "attached" else "discarded", "d": d,
                     "sites": f["sites"], "chosen": chosen, "attached": attached, "fate": f,
                     "backbone": own.get(d, {})})
    return rows


def retained_path(rec: dict) -> tuple[list[int], int]:
    """(tokens, accepted drafts) of P* (engine.trie.first_path_through over the record's paths; docs/algorithm.md,
    step 6): its tokens past the accepted ones are the rejected suffix whose states the next round keeps. A record
    whose chain lies on no path keeps nothing: the chain alone."""
    trie = rec["trie"]
    chain = [int(trie["tokens"][int(n)]) for n in rec.get("accepted_nodes", [0])]
    paths = [p["tokens"] for p in rec.get("paths", [])]
    i = first_path_through(paths, chain)
    return (list(paths[i]) if i is not None else chain), len(chain) - 1


def strip_rows(rec: dict, prev: dict | None) -> list[dict]:
    """The previous round's rejected suffix, drawn with this round (above g(0)): the drafts it rejected at
    positions s .. s+m-1 (retained: the drafter's context for the shifted blocks), and what the target computed
    after each: the anchor x[s] at s, a_d at s+d (each g(d)'s first token, at its native position)."""
    if prev is None or not rec.get("shifted"):
        return []
    s = int(rec["anchor_pos"])
    tokens, a = retained_path(prev)
    rejected = tokens[a + 1:]
    if int(prev["anchor_pos"]) + a + 1 != s or not rejected:
        return []
    said = {0: int(rec["anchor"])} | {int(b["d"]): int(b["tokens"][0]) for b in rec["shifted"]}
    top = max(said)
    return [{"label": "rejected (prev.)", "kind": "rejected", "start": 0, "tokens": rejected},
            {"label": "target said", "kind": "target", "start": 0,
             "tokens": [said.get(d) for d in range(top + 1)]}]


def _trie_layout(rec: dict) -> tuple[list[float], int]:
    """y slot of every trie node: depth-first, children ordered by their first path (baseline first),
    a parent sits on the row of its first child, so the baseline path is a straight line at y=0."""
    trie = rec["trie"]
    parents = trie["parents"]
    prov = trie["provenance"]
    g = nx.DiGraph()
    g.add_nodes_from(range(len(parents)))
    g.add_edges_from((p, i) for i, p in enumerate(parents) if p is not None and p >= 0)
    y = [0.0] * len(parents)
    slot = 0

    def first_path(n: int) -> int:
        return min(prov[n]) if prov[n] else 1 << 30

    roots = [n for n in g.nodes if g.in_degree(n) == 0]
    stack = [(n, False) for n in sorted(roots, key=first_path, reverse=True)]
    while stack:  # iterative post-order (tries can be deep)
        n, done = stack.pop()
        kids = sorted(g.successors(n), key=first_path)
        if done:
            y[n] = y[kids[0]] if kids else y[n]
            continue
        if not kids:
            y[n] = float(slot)
            slot += 1
            continue
        stack.append((n, True))
        stack.extend((k, False) for k in reversed(kids))
    return y, max(slot, 1)


def _fig(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts, skipping Plotly's per-property validation (the slow part)."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


ROW_COLORS = [BASE_COLOR, GREY] + D_COLORS + [REJECT_COLOR, TARGET_COLOR]


def _row_code(r: dict) -> int:
    kind = r["kind"]
    if kind == "baseline":
        return 0
    if kind == "discarded":
        return 1
    if kind == "rejected":
        return 2 + len(D_COLORS)
    if kind == "target":
        return 3 + len(D_COLORS)
    return 2 + (r["d"] - 1) % len(D_COLORS)


def _xs(xs: list[int], cols: Cols | None) -> dict:
    """A grid row's x: uniform cells from the first position, or the columns' edges (one more than the cells)."""
    if cols is not None and cols.widths:
        return {"x": cols.edges[:len(xs) + 1]}
    return {"x0": xs[0], "dx": 1}


def _row_trace(r: dict, y: int, xs: list[int], token_texts: dict, cell_px: float, style: Style, part: str,
               labelled: bool = True, cols: Cols | None = None) -> dict:
    """One grid row as a heatmap of one row: z = its colour code, text = each token cut to its cell, the hover
    names the row, the position and the token (in full when cut; the backbone's token where a head changed it)."""
    zr, tr, fr = [None] * len(xs), [""] * len(xs), [""] * len(xs)
    color = ROW_COLORS[_row_code(r)]
    for j, tok in enumerate(r["tokens"]):
        k = r["start"] + j
        if tok is None or not 0 <= k < len(xs):
            continue
        zr[k] = 1
        cell = _fit(token_texts, tok, cols.room(xs[k]) if cols is not None and cols.widths else cell_px, style)
        if labelled and j < r.get("labelled", len(r["tokens"])):
            tr[k] = cell
            if cell.endswith("…"):  # the hover shows the label, then the token in full (not both run together)
                fr[k] = f" (in full: {tok_full(token_texts, tok)})"
        else:
            fr[k] = tok_full(token_texts, tok)
        if j in r.get("backbone", {}):  # the head corrected this draft: show what the backbone drafted
            fr[k] += f" (head-corrected; the backbone drafted {tok_full(token_texts, r['backbone'][j])})"
    dark = r["kind"] == "discarded"
    hover = plotly_text(r["label"]) + " · pos %{x}: %{text}%{customdata}<extra></extra>"
    if cols is not None and cols.widths:  # x is in px units: the position goes in the hover's own text
        fr = [f"{x}: {t}{f}" if z else "" for x, t, f, z in zip(xs, tr, fr, zr)]
        hover = plotly_text(r["label"]) + " · pos %{customdata}<extra></extra>"
    return {"type": "heatmap", **_xs(xs, cols), "y": [y], "z": [zr], "text": [tr], "customdata": [fr],
            "meta": part, "texttemplate": "%{text}", "name": plotly_text(r["label"]),
            "hovertemplate": hover,
            "colorscale": [[0, color], [1, color]], "zmin": 0, "zmax": 1, "showscale": False, "xgap": 3,
            "ygap": style.row_px - style.cell_px,
            "textfont": {"size": style.font, "color": "#222" if dark else "white"}, "xaxis": "x", "yaxis": "y"}


def _fold_trace(rows: list[dict], y: int, xs: list[int], s: int, style: Style, unfold: bool,
                cols: Cols | None = None) -> dict:
    """The discarded blocks folded into one row: a grey cell at each one's native position, labelled d; a click
    opens (or closes) the rows (page.JS_PLOT sends it)."""
    zr, tr, fr = [None] * len(xs), [""] * len(xs), [""] * len(xs)
    for r in rows:
        k = r["d"]
        if 0 <= k < len(xs):
            zr[k] = 1
            tr[k] = str(r["d"])
            fr[k] = plotly_text(records.fate_text(r["fate"]))
    return {"type": "heatmap", **_xs(xs, cols), "y": [y], "z": [zr], "text": [tr], "customdata": [fr],
            "meta": "fold",
            "texttemplate": "%{text}", "name": "discarded blocks",
            "hovertemplate": "%{customdata}<br>(click: " + ("fold these rows" if unfold else "show each block") +
                             ")<extra></extra>",
            "colorscale": [[0, GREY], [1, GREY]], "zmin": 0, "zmax": 1, "showscale": False, "xgap": 3,
            "ygap": style.row_px - style.cell_px,
            "textfont": {"size": style.font, "color": "#222"}, "xaxis": "x", "yaxis": "y"}


def _site_traces(rows: list[dict], ys: list[int], s: int, style: Style, X: Cols) -> list[dict]:
    """Matching sites of the attached blocks, in the band above the row's labels: the chosen one a filled
    circle, rule all's further attachments diamonds, other matches open circles. Each names itself on hover."""
    sx, sy, ssym, shov = [], [], [], []
    for r, y in zip(rows, ys):
        if r["kind"] != "shifted":
            continue
        others = [t for t in r["sites"] if t not in r["attached"]][:MAX_OTHER_SITES]  # the rest: hover, caption
        for t in [t for t in r["sites"] if t in r["attached"] or t in others]:
            chosen = r["chosen"] is not None and t == int(r["chosen"])
            attached = t in r["attached"]
            sx.append(X(s + t + 0.22))
            sy.append(y + MARK_TOP)
            ssym.append("circle" if chosen else "diamond-open" if attached else "circle-open")
            note = " · the chosen site" if chosen else " · also attached (rule all)" if attached else " · not chosen"
            shov.append(plotly_text(f"matching site of g({r['d']}): g({r['d']})[0] = g(0)[{t}] (position {s + t})"
                                    f"{note}"))
    if not sx:
        return []
    size = 10 if style.projector else 8
    return [{"type": "scatter", "x": sx, "y": sy, "mode": "markers", "hovertext": shov, "meta": "sites",
             "hoverinfo": "text", "name": "matching site", "xaxis": "x", "yaxis": "y",
             "marker": {"symbol": ssym, "size": size, "color": "#111", "line": {"width": 2, "color": "#111"}}}]


def _native_traces(rows: list[dict], ys: list[int], s: int, style: Style, X: Cols) -> list[dict]:
    """A small downward triangle above the cell of every shifted block's native position s + d (where it was
    drafted), left of a site mark in the same cell; its hover tells the block's fate in words."""
    pts = [(r, y) for r, y in zip(rows, ys) if r.get("fate")]
    if not pts:
        return []
    return [{"type": "scatter", "x": [X(s + r["d"] - 0.22) for r, _ in pts], "y": [y + MARK_TOP for _, y in pts],
             "mode": "markers", "hoverinfo": "text", "name": "native position", "meta": "native",
             "xaxis": "x", "yaxis": "y",
             "hovertext": [plotly_text(records.fate_text(r["fate"])) for r, _ in pts],
             "marker": {"symbol": "triangle-down", "size": 10 if style.projector else 8, "color": "#111"}}]


def _row_path(rec: dict, r: dict) -> list[int]:
    """The tokens of the path a grid row draws, from the anchor: g(0)'s prefix up to the row's start, then the row.
    (In a tree mode a block's recorded paths are its ranked branches; the row is its top-1 draft.)"""
    return list(rec["baseline"][:r["start"]]) + list(r["tokens"])


def _accepted_cells(rec: dict, rows: list[dict], ys: list[int], cell_px: float, style: Style,
                    X: Cols) -> list[dict]:
    """A green bar under the label of each grid cell the target accepted: walking the row's own path from the
    anchor, the node at the cell's depth is on the accepted chain (in a tree, a token equal to an accepted one on
    another branch is not accepted: its prefix was not)."""
    acc = {int(n) for n in rec.get("accepted_nodes", [0])[1:]}
    kids = children(rec)
    s, x, y, hov, size = int(rec["anchor_pos"]), [], [], [], []
    for r, row_y in zip(rows, ys):
        if r["kind"] not in ("baseline", "shifted"):
            continue
        nodes = path_nodes(rec, _row_path(rec, r), kids)
        for k in range(1, len(r["tokens"])):
            depth = r["start"] + k
            if depth < len(nodes) and nodes[depth] in acc:
                x.append(X(s + depth))
                y.append(row_y + MARK_BOTTOM)
                size.append(max(8, int((X.width(s + depth) or cell_px) * 0.8)))
                hov.append(plotly_text(f"{r['label']} · pos {s + depth}: accepted by the target"))
    if not x:
        return []
    return [{"type": "scatter", "x": x, "y": y, "mode": "markers", "hoverinfo": "text", "hovertext": hov,
             "name": "accepted", "meta": "accepted", "xaxis": "x", "yaxis": "y",
             "marker": {"symbol": "line-ew", "size": size if X.widths else max(8, int(cell_px * 0.8)),
                        "color": ACCEPT_COLOR,
                        "line": {"width": 5 if style.projector else 4, "color": ACCEPT_COLOR}}}]


def _drafter_note(trie: dict, i: int) -> str:
    """The drafter's own view of node i, when the trace keeps it: its block, rank and probability there."""
    rank, prob, block = (trie.get(k) for k in ("rank", "prob", "block"))
    if i == 0 or not (isinstance(rank, list) and isinstance(prob, list) and i < min(len(rank), len(prob))):
        return ""
    try:  # optional facts, not validated: a loaded trace's odd values show nothing
        src = "g(0)" if not block or i >= len(block) or not block[i] else f"g({int(block[i])})"
        return f"<br>drafter: rank {int(rank[i]) + 1} in {src}, p = {float(prob[i]):.3f}"
    except (TypeError, ValueError, OverflowError):
        return ""


def _leaf_tags(rec: dict, trie_y: list[float], style: Style, X: Cols, only: set[int] | None = None) -> list[dict]:
    """Each branch's block named at its end (right of its leaf): blocks told apart by label, not colour alone.
    `only`: the nodes drawn (a path): its last node is its end."""
    trie, s = rec["trie"], int(rec["anchor_pos"])
    has_kids = {int(p) for p in trie["parents"][1:]}
    if only is not None:
        leaves = [max(only, key=lambda i: int(trie["depths"][i]))] if len(only) > 1 else []
    else:
        leaves = [i for i in range(1, len(trie["parents"])) if i not in has_kids and trie["provenance"][i]]
    if not leaves:
        return []
    srcs = records.path_sources(rec)
    tags = []
    for i in leaves:
        own = sorted({srcs[p] for p in trie["provenance"][i] if 0 <= p < len(srcs)})
        tags.append(f"g({own[0]})" + (f"+{len(own) - 1}" if len(own) > 1 else "") if own else "")
    return [{"type": "scatter", "x": [X(s + int(trie["depths"][i]) + 0.3) for i in leaves],
             "y": [trie_y[i] for i in leaves],
             "mode": "text", "text": [plotly_text(t) for t in tags], "textposition": "middle right", "meta": "trie",
             "textfont": {"size": style.font, "color": "#333"}, "hoverinfo": "skip", "showlegend": False,
             "xaxis": "x2", "yaxis": "y2"}]


def _trie_node_traces(rec: dict, token_texts: dict, trie_y: list[float], acc_set: set[int], style: Style,
                      positions: int | None = None, X: Cols | None = None,
                      only: set[int] | None = None) -> list[dict]:
    """The trie's nodes, one trace per provenance category (baseline, shared, g(d) only); under a node that several
    blocks proposed, a dot in each one's colour (every block that proposed it). `only`: the nodes drawn (a path,
    every one of them labelled)."""
    X = X or Cols(0)
    s, trie = int(rec["anchor_pos"]), rec["trie"]
    depths, parents = trie["depths"], trie["parents"]
    srcs = records.node_sources(rec)
    top1 = rec.get("target_top1") or []
    # labels never overlap: only the accepted path and each branch's first node (in a row, labels are cut to the
    # width of a position), the rest on hover
    heads = [i > 0 and trie_y[i] != trie_y[parents[i]] for i in range(len(parents))]
    label_px = position_px(positions or max(int(x) for x in depths) + 3, style.plot_px) - 2
    groups: dict[str, list[int]] = {}
    for i in range(len(parents)):
        if only is None or i in only:
            groups.setdefault(records.node_category(srcs[i]), []).append(i)
    order = sorted(groups, key=lambda c: (c != "baseline", c != "shared", int(c[1:]) if c[0] == "d" else 0))
    out = []

    def label(i: int) -> str:
        if not (only is not None or i in acc_set or heads[i]):
            return ""
        pos = s + int(depths[i])
        px = X.room(pos) if X.widths else label_px
        if X.widths and only is None and i not in acc_set:  # a branch's first node: its row is empty on either side
            px += 2 * min(X.width(pos - 1), X.width(pos + 1)) / SET_WIDTH
        return _fit(token_texts, trie["tokens"][i], px, style)

    for cat in order:
        nodes = groups[cat]
        cd = []
        for i in nodes:
            prov = trie["provenance"][i]
            paths = ", ".join(_path_label(rec, p) for p in prov[:6]) + (f" +{len(prov) - 6}" if len(prov) > 6 else "")
            blocks = ", ".join(f"g({d})" for d in srcs[i]) or "g(0)"
            cd.append([i, tok_full(token_texts, trie["tokens"][i]),
                       tok_full(token_texts, top1[i]) if i < len(top1) else "?", plotly_text(paths),
                       " · accepted" if i in acc_set else "", _drafter_note(trie, i), plotly_text(blocks)])
        out.append({
            "type": "scatter", "x": [X(s + int(depths[i])) for i in nodes], "y": [trie_y[i] for i in nodes],
            "mode": "markers+text", "name": plotly_text(cat),
            # the path alone (projector phases 8-9): its nodes are the path a phase points at
            "meta": "path" if only is not None else "trie-g0" if cat == "baseline" else "trie",
            "xaxis": "x2", "yaxis": "y2", "customdata": cd,
            "text": [label(i) for i in nodes],
            "textposition": "top center", "textfont": {"size": style.font},
            "hovertemplate": "trie node %{customdata[0]} · pos %{x}: %{customdata[1]}%{customdata[4]}"
                             "<br>proposed by %{customdata[6]}<br>target top-1 after it: %{customdata[2]}"
                             "<br>paths: %{customdata[3]}%{customdata[5]}<extra></extra>",
            "marker": {"size": [15 if i in acc_set else 11 for i in nodes], "color": category_color(cat),
                       "line": {"width": [3 if i in acc_set else 0 for i in nodes], "color": ACCEPT_COLOR}}})
        if X.widths:  # x is in px units: the hover names the position
            out[-1]["hovertemplate"] = out[-1]["hovertemplate"].replace("pos %{x}", "pos %{customdata[7]}")
            for i, row in zip(nodes, cd):
                row.append(s + int(depths[i]))
    # at most DOTS_A_NODE dots (a node of a round drafting 127 blocks had 127: 16,000 markers a round); hover names all
    multi = [(i, d) for i in range(1, len(parents)) if len(srcs[i]) > 1 and only is None
             for d in sorted(srcs[i])[:DOTS_A_NODE]]
    if multi:
        seen: dict[int, int] = {}
        x, y, col = [], [], []
        for i, d in multi:
            k = seen.get(i, 0)
            seen[i] = k + 1
            x.append(X(round(s + int(depths[i]) - 0.3 + 0.16 * k, 2)))
            y.append(trie_y[i] + 0.25)
            col.append(BASE_COLOR if d == 0 else d_color(d))
        # no hover of their own: the node's names every block ("proposed by")
        out.append({"type": "scatter", "x": x, "y": y, "mode": "markers", "name": "proposed by", "meta": "shared",
                    "hoverinfo": "skip", "xaxis": "x2", "yaxis": "y2",
                    "marker": {"size": 7, "color": col, "symbol": "square"}})
    return out


def _trie_traces(rec: dict, token_texts: dict, style: Style, positions: int | None = None, X: Cols | None = None,
                 path_only: str = "") -> tuple[list[dict], float]:
    """(b) the trie: edges, the accepted path, nodes by provenance, the bonus, the retained suffix; its rows.
    `path_only` "accepted": the accepted path alone, on one row, every token written out; "retained": and the
    retained suffix."""
    X = X or Cols(0)
    s, trie = int(rec["anchor_pos"]), rec["trie"]
    depths, parents = [int(d) for d in trie["depths"]], trie["parents"]
    acc_nodes = [int(n) for n in rec.get("accepted_nodes", [0])]
    a = int(rec.get("accepted", len(acc_nodes) - 1))
    bonus = rec.get("bonus")
    show_bonus = bonus is not None and len(rec.get("new_tokens", [])) > a  # not cut by a stop / max tokens
    tokens, _ = retained_path(rec)
    kept = path_nodes(rec, tokens)[a + 1:]  # as far as the trie holds P* (a node cap may cut it)
    only = None
    if path_only:
        kept = kept if path_only == "retained" else []
        only = set(acc_nodes) | set(kept)
        trie_y, n_slots = [0.0] * len(parents), 1.5  # one row, and half a row under it for the bonus
    else:
        trie_y, n_slots = _trie_layout(rec)
    ex, ey = [], []
    for i, p in enumerate(parents):
        if p is not None and p >= 0 and (only is None or (i in only and p in only)):
            ex += [X(s + depths[p]), X(s + depths[i]), None]
            ey += [trie_y[p], trie_y[i], None]
    data = [{"type": "scatter", "x": ex, "y": ey, "mode": "lines", "line": {"color": "#99a", "width": 1.5},
             "hoverinfo": "skip", "showlegend": False, "xaxis": "x2", "yaxis": "y2", "meta": "edges",
             "name": "edges"}]
    # the bonus above the rejected node it replaces; on the path alone, whose nodes are all labelled above, under it
    bonus_y = trie_y[acc_nodes[-1]] + (0.55 if path_only else -0.45)
    ax = [X(s + depths[n]) for n in acc_nodes] + ([X(s + a + 1)] if show_bonus else [])
    ay = [trie_y[n] for n in acc_nodes] + ([bonus_y] if show_bonus else [])
    data.append({"type": "scatter", "x": ax, "y": ay, "mode": "lines", "name": "accepted path", "opacity": 0.55,
                 "line": {"color": ACCEPT_COLOR, "width": 5}, "hoverinfo": "skip", "xaxis": "x2", "yaxis": "y2",
                 "meta": "path"})
    data += _trie_node_traces(rec, token_texts, trie_y, set(acc_nodes), style, positions, X, only)
    data += _leaf_tags(rec, trie_y, style, X, only)
    if kept:
        data.append({"type": "scatter", "x": [X(s + depths[n]) for n in kept], "y": [trie_y[n] for n in kept],
                     "mode": "markers", "name": "retained", "meta": "retained", "hoverinfo": "text",
                     "hovertext": [f"retained for the next round: the state at pos {s + depths[n]} "  # tok_full: escaped
                                   f"(rejected draft {tok_full(token_texts, trie['tokens'][n])})"
                                   for n in kept],
                     "xaxis": "x2", "yaxis": "y2",
                     "marker": {"symbol": "circle-open", "size": 22, "color": RETAIN_COLOR,
                                "line": {"width": 2, "color": RETAIN_COLOR}}})
    if show_bonus:  # above the rejected node it replaces (on it, the hover named that draft)
        bx = X(s + a + 1)
        data.append({"type": "scatter", "x": [bx], "y": [bonus_y], "meta": "bonus",
                     "mode": "markers+text", "name": "bonus",
                     "text": [tok_cell(token_texts, bonus, 16 if style.projector else 6)],  # projector: whole
                     "textposition": "middle right", "textfont": {"size": style.font},
                     "customdata": [[tok_full(token_texts, bonus), s + a + 1]],
                     "hovertemplate": "bonus: the target's own token at pos %{customdata[1]}: %{customdata[0]} (the "
                                      "next round's anchor)<extra></extra>",
                     "xaxis": "x2", "yaxis": "y2",
                     "marker": {"symbol": "star", "size": 17, "color": BONUS_COLOR,
                                "line": {"width": 1, "color": "#333"}}})
    return data, n_slots


def _round_layout(rec: dict, labels: list[str], n_slots: int, max_depth: int, title: str | None,
                  style: Style, X: Cols | None = None) -> dict:
    """Grid above trie, sharing the position axis; the extension band past the native block. No labels: no grid
    (a projector phase on the trie alone); n_slots 0: no trie (a phase on the grid alone)."""
    X = X or Cols(0)
    s, L = int(rec["anchor_pos"]), int(rec.get("block_size") or len(rec["baseline"]))
    a = int(rec.get("accepted", len(rec.get("accepted_nodes", [0])) - 1))
    n_rows = len(labels)
    grid_h = style.row_px * n_rows
    trie_h = style.slot_px * (n_slots + 0.8) if n_slots else 0
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
    drawn = f"{nodes} trie nodes" if "nodes_all" not in rec else \
        f"{rec['nodes_all']:,} trie nodes, the first {nodes:,} drawn"
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
        "yaxis2": {"domain": [0, trie_h / total] if trie_h else [0, 0.001], "range": [max(n_slots, 1) - 0.5, -0.8],
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
    return _fig(**round_figure_parts(rec, token_texts, title, depth_cap, **view))


def round_figure_json(rec: dict, token_texts: dict, title: str | None = None, depth_cap: int | None = None,
                      **view) -> str:
    """round_figure(...).to_json(), without Plotly's deep copies (half a round switch's time): the
    parts are plain JSON values already."""
    return json.dumps(round_figure_parts(rec, token_texts, title, depth_cap, **view), separators=(",", ":"))


# The lesson on one projector screen (1280x720): a step-through phase draws in at most FIT_HEIGHT px, under its
# sentence (app.render keeps the caption to the sentence in a projector phase); rows and trie slots squeeze down to
# FIT_ROW_PX / FIT_SLOT_PX (the trie alone: MIN_SLOT_PX; past that, 17 branches and more, a phase overflows).
# Columns: each as wide as its widest label, at least MIN_COL_PX, and TAG_PX on the right for the names at the
# branches' ends and the bonus's label.
FIT_HEIGHT = 480
FIT_ROW_PX, FIT_SLOT_PX, MIN_SLOT_PX = 32, 28, 24
HEAD_TOKENS = 3  # a shifted row's tokens written out in phases 3-5 (which are about its start and its site)
MIN_COL_PX, COL_PAD_PX, TAG_PX, MAX_COL_PX = 18, 6, 64, 120
# char_px's widths are DejaVu Sans's widest; Chromium's system font at 14 px sets tokens ~8% narrower (" calculate"
# 72 px where char_px says 79)
SET_WIDTH = 0.93


def label_px(token_texts: dict, tok: int, style: Style) -> float:
    """A token label's width in px at the style's font (app.tokentext.char_px measures 9 px text)."""
    return records._label_px(token_texts, tok) * style.font / 14 * SET_WIDTH


def _columns(s: int, wants: list[float], style: Style, tag_px: float = TAG_PX) -> Cols:
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


def _label_wants(rec: dict, token_texts: dict, rows: list[dict], n: int, style: Style,
                 trie: str = "all") -> list[float]:
    """The widest label each position shows: the labelled grid `rows`, the trie's labels (`trie` "all": the accepted
    path and each branch's first node, which has its row to itself on its right and so needs half its width;
    "accepted": the accepted path; "retained": and the retained suffix; "": none)."""
    s = int(rec["anchor_pos"])
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
    trie_y, _ = _trie_layout(rec)
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


DOTS_A_NODE = 4      # proposer dots under a trie node (its hover names every block)
DRAWN_ROWS = 48      # attached rows a round figure draws unfolded (the rest join the folded row; a click opens all)


def _fold_overflow(rec: dict, kept: list[dict], dropped: list[dict], rows: int, cell_px: float,
                   style: Style) -> tuple[list[dict], list[dict]]:
    """(kept, dropped) with at most `rows` rows drawn, the folded row included: g(0) stays, then the attached rows
    the target accepted drafts on, then by d; the rest join the folded row (its label counts them)."""
    s = int(rec["anchor_pos"])
    shifted = [r for r in kept if r["kind"] == "shifted"]
    room = max(1, rows - (len(kept) - len(shifted)) - 1)
    ranked = sorted(shifted, key=lambda r: (not _accepted_cells(rec, [r], [0], cell_px, style, Cols(s)), r["d"]))
    overflow = {id(r) for r in ranked[room:]}
    return [r for r in kept if id(r) not in overflow], dropped + [r for r in kept if id(r) in overflow]
DRAWN_NODES = 1024   # trie nodes a round figure draws (the engine's own bound): a trace's 8,192 froze the tab 4-9 s


def drawn_trie(rec: dict, limit: int = DRAWN_NODES) -> dict:
    """`rec` with its trie cut to what a figure draws: the first `limit` nodes (parents come before children, so
    they are a trie from the anchor), the accepted chain and the retained path always among them, renumbered;
    "nodes_all" says how many it had. A round within the limit is returned as it is."""
    trie = rec["trie"]
    n = len(trie["parents"])
    if n <= limit:
        return rec
    keep = set(range(limit)) | {int(i) for i in rec.get("accepted_nodes", [0])}
    keep |= set(path_nodes(rec, retained_path(rec)[0]))
    for i in list(keep):   # every kept node's ancestors (the cut keeps a trie)
        while i > 0 and trie["parents"][i] not in keep:
            i = trie["parents"][i]
            keep.add(i)
    order = sorted(keep)
    new = {old: k for k, old in enumerate(order)}
    cut = {key: [v[i] for i in order] for key, v in trie.items() if isinstance(v, list) and len(v) == n}
    cut["parents"] = [new.get(trie["parents"][i], -1) for i in order]
    return {**rec, "trie": cut, "accepted_nodes": [new[int(i)] for i in rec.get("accepted_nodes", [0])],
            "target_top1": [rec["target_top1"][i] for i in order] if len(rec.get("target_top1") or []) == n
            else rec.get("target_top1"), "nodes_all": n}


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
    s = int(rec["anchor_pos"])
    rows = _grid_rows(rec, depth_cap)
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
            kept = [r for r in kept if r["kind"] == "baseline" or _accepted_cells(rec, [r], [0], cell_px, style,
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
        X = _columns(s, wants, style, 12 if fit and not show_trie else TAG_PX)
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
            data.append(_fold_trace(dropped, y, xs, s, style, unfold, X))
            continue
        labels.append(r["label"])
        part = {"baseline": "g0", "shifted": "shifted", "discarded": "discarded"}.get(r["kind"], "strip")
        data.append(_row_trace(r, y, xs, token_texts, cell_px, style, part, labelled=r["kind"] != "discarded",
                               cols=X))
    data.sort(key=lambda t: t["meta"] != "g0")  # g(0)'s row first
    on_grid = [(r, y) for r, y in zip(drawn, ys) if r is not None and r["kind"] in ("baseline", "shifted")]
    grid_rows, grid_ys = [r for r, _ in on_grid], [y for _, y in on_grid]
    data += _accepted_cells(rec, grid_rows, grid_ys, cell_px, style, X) + _site_traces(grid_rows, grid_ys, s, style, X)
    data += _native_traces(grid_rows + (dropped if unfold else []),
                           grid_ys + [ys[-len(dropped) + k] for k in range(len(dropped))] if unfold else grid_ys,
                           s, style, X)
    n_slots = 0
    if show_trie:
        trie_data, n_slots = _trie_traces(rec, token_texts, style, len(xs) + 2, X, path_only)
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


# ---------------------------------------------------------------- run-level figures

def top_title(text: str, size: int) -> dict:
    """A title (plain text) pinned to the top of the figure, so that a legend in the top margin goes under it, not
    over it (in a half-width Compare panel the two shared one line and overlapped). Plotly lifts a title of n
    lines by about half a line per line past the first: the pad gives that back, or its top is cut off."""
    lines = text.count("\n") + 1
    return dict(text=plotly_text(text), font=dict(size=size), x=0.01, xanchor="left", yref="container", y=1,
                yanchor="top", pad=dict(t=8 + 9 * (lines - 1)))


def view_frame(i: int) -> list[dict]:
    """The round in view (i) on the timeline: a frame around its bar, full height, over the bars, and a grey band
    under them (the bar keeps its colours). Both named VIEW_MARK; the frame is the legend's entry."""
    at = dict(type="rect", name=VIEW_MARK, xref="x", yref="paper", x0=i - 0.5, x1=i + 0.5, y0=0, y1=1)
    return [{**at, "fillcolor": VIEW_FILL, "line": {"width": 0}, "layer": "below", "showlegend": False},
            {**at, "line": {"color": VIEW_COLOR, "width": 2.5}, "layer": "above", "showlegend": True}]


TIMELINE_BARS = 1000  # bars a part at most: 50,000 bars froze Chromium for 104 s (405,000 page elements)


def _timeline_bins(n: int) -> tuple[int, list[float], list[int]]:
    """(rounds a bar, bar centres, rounds in each bar): one round a bar up to TIMELINE_BARS rounds, else runs of
    w rounds (the last may be shorter), centred on their rounds so that x stays a round number."""
    w = max(1, -(-n // TIMELINE_BARS))
    starts = range(0, n, w)
    sizes = [min(w, n - a) for a in starts]
    return w, [a + (k - 1) / 2 for a, k in zip(starts, sizes)], sizes


def timeline_figure(rounds: list[dict], title: str = "accepted length per round", narrow: bool = False,
                    view: int | None = None) -> go.Figure:
    """Stacked bars per round: baseline-alone drafts, shifted gain, bonus; `view`, the round in view, framed
    (view_frame). `narrow` (the Compare panel's half width): the legend on a line of its own, under the title.
    Past TIMELINE_BARS rounds, a bar is the mean over a run of rounds (its width), so the page stays responsive."""
    parts = [records.round_lengths(r) for r in rounds]
    w, x, sizes = _timeline_bins(len(rounds))
    fig = go.Figure()
    for key, name, color in (("baseline", "baseline alone", BASE_COLOR), ("branches", "tree branches", SHARED_COLOR),
                             ("shifted", "shifted gain", D_COLORS[0]), ("bonus", "bonus", BONUS_COLOR)):
        ys = [p[key] for p in parts]
        if w == 1:
            fig.add_trace(go.Bar(x=x, y=ys, name=name, marker_color=color,
                                 hovertemplate=f"round %{{x}}: %{{y}} {name}<extra></extra>"))
            continue
        means = [sum(ys[a:a + k]) / k for a, k in zip(range(0, len(ys), w), sizes)]
        fig.add_trace(go.Bar(x=x, y=means, width=sizes, name=name, marker_color=color, marker_line_width=0,
                             customdata=[[a, a + k - 1] for a, k in zip(range(0, len(ys), w), sizes)],
                             hovertemplate=f"rounds %{{customdata[0]}}–%{{customdata[1]}}: %{{y:.2f}} {name} "
                                           "a round (mean)<extra></extra>"))
    if w > 1:
        title = f"{title} (mean of every {w} rounds)"
    top = 78 if narrow else 36  # narrow: the title, then room for a legend of two rows (at 1024 px it wraps)
    # the inspector's timeline in 14 px (the lesson's screen), the Compare panel's half-width ones in 11 px
    fig.update_layout(template="none", font=FONT if narrow else {**FONT, "size": 14}, barmode="stack",
                      height=194 + top + (0 if narrow else 8), margin=dict(l=40 if narrow else 48, r=10, t=top,
                                                                            b=36 if narrow else 44),
                      title=top_title(title, 13) if narrow else dict(text=plotly_text(title), x=0.01,
                                                                      font=dict(size=15)),
                      xaxis=dict(title_text="round"), yaxis=dict(title_text="tokens"),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"),
                      plot_bgcolor="white", paper_bgcolor="white", bargap=0.1 if w == 1 else 0,
                      shapes=view_frame(view) if view is not None and 0 <= view < len(rounds) else [])
    return fig


def share_axes(figs: list[go.Figure]) -> None:
    """Give figures drawn side by side the same x (rounds) and y ranges: the widest of them."""
    xs, ys = [], []
    for f in figs:
        if getattr(f, "data", None) and f.layout.barmode == "stack":
            for i in range(len(f.data[0].x or [])):
                ys.append(sum((t.y[i] or 0) for t in f.data if t.type == "bar" and t.y is not None and i < len(t.y)))
        for t in getattr(f, "data", ()):
            xs += [v for v in (t.x or []) if isinstance(v, (int, float))]
            if f.layout.barmode != "stack":
                ys += [v for v in (t.y or []) if isinstance(v, (int, float))]
    if not xs:
        return
    for f in figs:
        if getattr(f, "data", None):
            f.update_layout(xaxis_range=[min(xs) - 0.5, max(xs) + 0.5], yaxis_range=[0, max(ys + [1]) + 0.5])


def counterfactual_figure(rows: list[dict], title: str) -> go.Figure:
    """Per round: the drafts the run accepted (bars) and what another assembly would have accepted
    from the same state and drafts (markers: green more, red fewer, grey the same)."""
    x = [r["round"] for r in rows]
    diff = [r["counterfactual"] - r["actual"] for r in rows]
    colors = [ACCEPT_COLOR if d > 0 else "#d1495b" if d < 0 else "#888" for d in diff]
    fig = go.Figure([
        go.Bar(x=x, y=[r["actual"] for r in rows], name="accepted (this run)", marker_color=BASE_COLOR,
               opacity=0.55, hovertemplate="round %{x}: accepted %{y}<extra></extra>"),
        go.Scatter(x=x, y=[r["counterfactual"] for r in rows], mode="markers",
                   name="◆ the other assembly (green more, red fewer, grey same)",
                   marker=dict(symbol="diamond", size=8, color=colors, line=dict(width=1, color="#333")),
                   customdata=[[d, " (end of run: at least)" if r["cut"] else ""] for d, r in zip(diff, rows)],
                   hovertemplate="round %{x}: would accept %{y} (%{customdata[0]:+d})%{customdata[1]}<extra></extra>"),
    ])
    fig.update_layout(template="none", font=FONT, height=290, bargap=0.15, margin=dict(l=40, r=10, t=92, b=36),
                      title=top_title(title, 12), xaxis=dict(title_text="round"),
                      yaxis=dict(title_text="accepted drafts"), plot_bgcolor="white", paper_bgcolor="white",
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.0, yanchor="bottom", font=dict(size=10)))
    return fig


def bar_figure(xs: list, ys: list, title: str, xtitle: str, ytitle: str, color: str = BASE_COLOR) -> go.Figure:
    """Bars; `title` may break into lines ("\n"), the top margin growing with them."""
    lines = title.count("\n")
    fig = go.Figure(go.Bar(x=[plotly_text(x) for x in xs], y=list(ys), marker_color=color))
    fig.update_layout(template="none", font=FONT, height=240 + 17 * lines, margin=dict(l=45, r=10, t=36 + 17 * lines, b=40),
                      title=dict(text=plotly_text(title), x=0.01, font=dict(size=13)),
                      xaxis=dict(title_text=plotly_text(xtitle)), yaxis=dict(title_text=plotly_text(ytitle)), plot_bgcolor="white", paper_bgcolor="white")
    return fig


def empty_figure(message: str = "no round yet", height: int = 220) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template="none", font=FONT, height=height, margin=dict(l=10, r=10, t=10, b=10),
                      xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=plotly_text(message), showarrow=False, x=0.5, y=0.5, xref="paper",
                                        yref="paper", font=dict(size=13, color="#888"))])
    return fig


def budget_curve_figure(points: list[dict]) -> go.Figure:
    """tau and tokens/s against the node budget N, one line per tree mode; dflash's chain as a dashed line."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["τ against N", "tokens/s against N"])
    for mode in dict.fromkeys(p["mode"] for p in points):
        pts = [p for p in points if p["mode"] == mode]
        for col, key in ((1, "tau"), (2, "tokens_per_s")):
            if pts[0]["nodes"] is None:   # the chain: a reference level
                fig.add_hline(y=pts[0][key], line_dash="dash", line_color="#888", row=1, col=col,
                              annotation_text=mode if col == 1 else None)
            else:
                fig.add_trace(go.Scatter(x=[p["nodes"] for p in pts], y=[p[key] for p in pts], name=mode,
                                         legendgroup=mode, showlegend=col == 1, mode="lines+markers"), row=1, col=col)
    fig.update_xaxes(title_text="node budget N (anchor included)", type="log")
    fig.update_layout(template="none", font=FONT, height=300, margin=dict(l=45, r=10, t=40, b=45),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.12), plot_bgcolor="white",
                      paper_bgcolor="white")
    return fig

"""The round figure's upper half, the alignment grid: a row for g(0), one for each shifted block at its placement
(the discarded ones folded into one row), the previous round's rejected suffix above them, and the marks on the
rows: matching sites, native positions, the cells the target accepted."""
from __future__ import annotations

from engine.analyses import children, path_nodes

from .. import records
from ..palette import ACCEPT_COLOR, BASE_COLOR, D_COLORS, GREY, REJECT_COLOR, TARGET_COLOR
from ..tokentext import plotly_text, tok_full
from .geometry import MARK_BOTTOM, MARK_TOP, Cols, Style, fit_token
from .trie import retained_path

MAX_OTHER_SITES = 3   # matching sites drawn per row besides the attached ones


def alignment_rows(rec: dict, depth_cap: int | None = None) -> list[dict]:
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


def row_trace(r: dict, y: int, xs: list[int], token_texts: dict, cell_px: float, style: Style, part: str,
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
        cell = fit_token(token_texts, tok, cols.room(xs[k]) if cols is not None and cols.widths else cell_px, style)
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


def fold_trace(rows: list[dict], y: int, xs: list[int], s: int, style: Style, unfold: bool,
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


def site_traces(rows: list[dict], ys: list[int], s: int, style: Style, X: Cols) -> list[dict]:
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


def native_traces(rows: list[dict], ys: list[int], s: int, style: Style, X: Cols) -> list[dict]:
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


def accepted_cells(rec: dict, rows: list[dict], ys: list[int], cell_px: float, style: Style,
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

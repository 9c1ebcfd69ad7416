"""The round figure's lower half, the merged trie: its layout (a parent on its first child's row, the baseline a
straight line), its nodes by provenance, the accepted path, the bonus and the retained suffix; drawn_trie cuts a
big trie to what a figure draws."""
from __future__ import annotations

import networkx as nx

from engine.analyses import path_nodes
from engine.trie import first_path_through

from .. import records
from ..palette import ACCEPT_COLOR, BASE_COLOR, BONUS_COLOR, RETAIN_COLOR, category_color, d_color
from ..tokentext import plotly_text, tok_cell, tok_full
from .geometry import SET_WIDTH, Cols, Style, fit_token, path_label, position_px

def retained_path(rec: dict) -> tuple[list[int], int]:
    """(tokens, accepted drafts) of P* (engine.trie.first_path_through over the record's paths; docs/algorithm.md,
    step 6): its tokens past the accepted ones are the rejected suffix whose states the next round keeps. A record
    whose chain lies on no path keeps nothing: the chain alone."""
    trie = rec["trie"]
    chain = [int(trie["tokens"][int(n)]) for n in rec.get("accepted_nodes", [0])]
    paths = [p["tokens"] for p in rec.get("paths", [])]
    i = first_path_through(paths, chain)
    return (list(paths[i]) if i is not None else chain), len(chain) - 1


def trie_layout(rec: dict) -> tuple[list[float], int]:
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
        return fit_token(token_texts, trie["tokens"][i], px, style)

    for cat in order:
        nodes = groups[cat]
        cd = []
        for i in nodes:
            prov = trie["provenance"][i]
            paths = ", ".join(path_label(rec, p) for p in prov[:6]) + (f" +{len(prov) - 6}" if len(prov) > 6 else "")
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


def trie_traces(rec: dict, token_texts: dict, style: Style, positions: int | None = None, X: Cols | None = None,
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
        trie_y, n_slots = trie_layout(rec)
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


DOTS_A_NODE = 4      # proposer dots under a trie node (its hover names every block)
DRAWN_NODES = 1024   # trie nodes a round figure draws (the engine's own bound): a trace's 8,192 froze the tab 4-9 s


def drawn_trie(rec: dict, limit: int = DRAWN_NODES) -> dict:
    """`rec` with its trie cut to what a figure draws: the first `limit` nodes (parents come before children, so
    they are a trie from the anchor), the accepted chain and the retained path always among them, renumbered;
    "nodes_all" says how many it had. A round within the limit is returned as it is."""
    n = len(rec["trie"]["parents"])
    if n <= limit:
        return rec
    return {**_cut_trie(rec, set(range(limit)) | _path_nodes_kept(rec)), "nodes_all": n}


def fitted_trie(rec: dict, leaves: int) -> dict:
    """`rec` with its trie cut to `leaves` branches (a trie's rows are its leaves), what a projector phase has room
    for: the branches through the accepted chain and the retained path first, then by first path (the baseline's,
    then the blocks' in order, as the rows go down); "branches_all" and "nodes_all" say what it had. A round that
    fits is returned as it is."""
    parents, prov = rec["trie"]["parents"], rec["trie"]["provenance"]
    ends = leaf_nodes(parents)
    if len(ends) <= leaves:
        return rec
    must = _path_nodes_kept(rec) - {0}
    ranked = sorted(ends, key=lambda i: (not ({i} | _ancestors(parents, i)) & must, min(prov[i], default=1 << 30)))
    return {**_cut_trie(rec, set(ranked[:leaves]) | must), "branches_all": len(ends),
            "nodes_all": rec.get("nodes_all", len(parents))}


def leaf_nodes(parents: list) -> list[int]:
    """The trie's leaves: the ends of its branches, one row each in its drawing."""
    inner = {p for p in parents if p is not None and p >= 0}
    return [i for i in range(len(parents)) if i not in inner]


def leaves(rec: dict) -> int:
    """How many branches a round's trie has."""
    return len(leaf_nodes(rec["trie"]["parents"]))


def _ancestors(parents: list, i: int) -> set[int]:
    out = set()
    while i > 0:
        i = parents[i]
        out.add(i)
    return out


def _path_nodes_kept(rec: dict) -> set[int]:
    """The nodes a cut trie keeps whatever its size: the accepted chain and the retained path."""
    return {int(i) for i in rec.get("accepted_nodes", [0])} | set(path_nodes(rec, retained_path(rec)[0]))


def _cut_trie(rec: dict, keep: set[int]) -> dict:
    """`rec` with its trie cut to `keep` and every kept node's ancestors (the cut keeps a trie), renumbered."""
    trie = rec["trie"]
    n = len(trie["parents"])
    for i in list(keep):
        keep |= _ancestors(trie["parents"], i)
    order = sorted(keep)
    new = {old: k for k, old in enumerate(order)}
    cut = {key: [v[i] for i in order] for key, v in trie.items() if isinstance(v, list) and len(v) == n}
    cut["parents"] = [new.get(trie["parents"][i], -1) for i in order]
    return {**rec, "trie": cut, "accepted_nodes": [new[int(i)] for i in rec.get("accepted_nodes", [0])],
            "target_top1": [rec["target_top1"][i] for i in order] if len(rec.get("target_top1") or []) == n
            else rec.get("target_top1")}

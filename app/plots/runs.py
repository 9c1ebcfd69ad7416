"""The run-level figures: the timeline of accepted lengths (the round in view framed), the counterfactual, bars,
the budget curve, and an empty figure that says what is missing."""
from __future__ import annotations

import plotly.graph_objects as go

from .. import records
from ..palette import ACCEPT_COLOR, BASE_COLOR, BONUS_COLOR, D_COLORS, FONT, SHARED_COLOR, VIEW_COLOR, VIEW_FILL
from ..tokentext import plotly_text

# The round in view's frame on the timeline is named VIEW_MARK (its legend entry; page.JS_TIMELINE moves it by name).
VIEW_MARK = "round in view"


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

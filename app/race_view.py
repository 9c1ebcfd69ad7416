"""What the Race view shows, as pure functions of the lanes' traces: the payload the browser renders (each
lane's text pieces coloured by provenance, its marks on both clocks, counters and verdicts), the race figure
(tokens against each clock) and the self-contained HTML export. One renderer (RACE_JS) draws the payload in
the app and in an exported file, so the file replays exactly what the page did."""
from __future__ import annotations

import json

import plotly.graph_objects as go

from engine.analyses import displaced
from engine.trace import token_sources

from . import assets
from .palette import BASE_COLOR, D_COLORS, FONT
from .render import PALETTE_CSS, source_style
from .tokentext import plotly_text, trace_pieces

LANE_COLORS = ["#555b66", BASE_COLOR, D_COLORS[1], D_COLORS[2]]   # plain decoding grey, then one per lane
SLIDE_PX = (1920, 1080)   # a figure's PNG (the modebar's camera): slide resolution, drawn at scale 2


def lane_marks(trace: dict, own_s: float | None = None) -> list[list[float]]:
    """[measured ms, target forward passes, tokens committed] after the prefill, then after every round. The
    prefill's share of the run's time is what the rounds' own times leave of the lane's own clock `own_s` (the
    seconds spent stepping this lane: lanes run interleaved, so the engine's wall time would count the others'
    rounds too) or, without it, of the engine's measured wall time or the time elapsed."""
    rounds = trace.get("rounds") or []
    stats = trace.get("stats") or {}
    wall_ms = 1000.0 * (own_s if own_s is not None else stats.get("wall_s") or trace.get("elapsed_s") or 0.0)
    rounds_ms = sum(r.get("round_ms", 0.0) for r in rounds)
    t = max(0.0, wall_ms - rounds_ms) if rounds else wall_ms
    marks, n = [[round(t, 1), 1, 1 if rounds else 0]], 1
    for i, r in enumerate(rounds):
        t += r.get("round_ms", 0.0)
        n += len(r["new_tokens"])
        marks.append([round(t, 1), i + 2, n])
    return marks


def lane_sources(trace: dict) -> list[str]:
    """The text view's CSS class of every generated token: the prefill's token and each bonus are the target's."""
    out = [source_style("bonus")[0]] if trace.get("rounds") else []
    for r in trace.get("rounds") or []:
        out += [source_style(s)[0] for s in token_sources(r)]
    return out


def output_ids(trace: dict) -> list[int]:
    if trace.get("output_ids"):
        return list(trace["output_ids"])
    rounds = trace.get("rounds") or []
    return ([rounds[0]["anchor"]] if rounds else []) + [t for r in rounds for t in r["new_tokens"]]


def first_difference(ref: list[int], other: list[int]) -> int | None:
    """The first generated token where `other` differs from `ref` (None: the same text, over the shorter run
    when one stopped early; a run that ends early or runs on differs where the other has a token it lacks)."""
    for k, (a, b) in enumerate(zip(ref, other)):
        if a != b:
            return k
    return None if len(ref) == len(other) else min(len(ref), len(other))


CUT = "cut by the time limit"   # a lane's status when the per-run time limit (--run-seconds) ended it


def speedup(lane_tps: float | None, ref_tps: float | None) -> float | None:
    """A lane's measured tokens/s over plain decoding's, as the page prints it (2 decimals)."""
    return round(lane_tps / ref_tps, 2) if lane_tps and ref_tps else None


def shifted_gain(trace: dict) -> tuple[int, int]:
    """(K, rounds): over the rounds that recorded the tree g(0) alone would have grown (trie.ddtree: reanchor-tree
    rounds where shifted blocks took part, T=0), the tokens the run committed minus the tokens that tree would have
    committed on the same state (its longest path along the run's own greedy continuation, plus the bonus):
    engine.analyses.displaced's tau minus its ddtree_tau, times its rounds. A round where the shifted blocks
    displaced a node that would have been accepted counts against K."""
    d = displaced(trace)
    return (round(d["rounds"] * (d["tau"] - d["ddtree_tau"])) if d["rounds"] else 0), d["rounds"]


def shifted_tokens(src: list[str]) -> int:
    """Tokens whose accepted path came from a shifted block (a g(k), k >= 1: the text's shifted colours)."""
    return sum(c.startswith("rx-s") for c in src)


def lane_payload(label: str, about: str, status: str, trace: dict | None, own_s: float | None = None) -> dict:
    """One lane: its text pieces and their classes, marks on both clocks, counters (an empty lane before it runs).
    `own_s`: the lane's own clock (lane_marks); its tokens/s is tokens over it."""
    if not trace:
        return {"label": label, "about": about, "status": status, "pieces": [], "src": [], "marks": [],
                "tokens": 0, "passes": 0, "tps": None, "wall_s": 0.0, "tau": None, "max_nodes": 0, "max_round_ms": 0.0,
                "shifted": 0, "gain": None, "gain_rounds": 0, "drafted": 0}
    rounds = trace.get("rounds") or []
    _, pieces = trace_pieces(trace)
    marks = lane_marks(trace, own_s)
    wall_s = marks[-1][0] / 1000.0
    tokens = marks[-1][2]
    stats = trace.get("stats") or {}
    done = status in ("done", "stopped", CUT) and stats.get("tokens_per_s") is not None
    tps = stats["tokens_per_s"] if done and own_s is None else (tokens / wall_s if wall_s > 0 else None)
    src = lane_sources(trace)[:tokens]
    gain, gain_rounds = shifted_gain(trace) if done else (None, 0)
    return {"label": label, "about": about, "status": status, "pieces": pieces[:tokens],
            "src": src, "shifted": shifted_tokens(src), "gain": gain if gain_rounds else None, "gain_rounds": gain_rounds,
            # shifted blocks drafted in all: none at all (the auto budget found none worth its cost) is said so
            "drafted": sum(len(r.get("shifted") or []) for r in rounds),
            "marks": marks, "tokens": tokens, "passes": len(rounds) + 1 if rounds else 0,
            "tps": round(tps, 2) if tps else None, "wall_s": round(wall_s, 3),
            "tau": round(tokens / len(rounds), 2) if rounds else None,
            "max_nodes": max((len(r["trie"]["tokens"]) for r in rounds), default=0),
            "max_round_ms": round(max((r.get("round_ms", 0.0) for r in rounds), default=0.0), 1),
            "ids": output_ids(trace)[:tokens]}


def verdicts(lanes: list[dict], ref: int | None) -> None:
    """Each finished lane against plain decoding's (lane `ref`): "x N" of measured tokens/s and the first token
    where the texts differ (in place; at T=0 in fp32 any difference is a bug, shown). A lane cut by the per-run
    time limit (status CUT, either side) is judged on the tokens both made: a shorter text is not a different one
    (`cut` says so on the badge)."""
    base = lanes[ref] if ref is not None else None
    for i, lane in enumerate(lanes):
        lane["speedup"], lane["same"], lane["diff"], lane["cut"] = None, None, None, False
        if base is None or i == ref or lane["status"] not in ("done", CUT) or base["status"] not in ("done", CUT):
            continue
        n = min(len(base.get("ids", [])), len(lane.get("ids", []))) if CUT in (lane["status"], base["status"]) \
            else None
        if n == 0:   # cut before its first token: nothing to judge
            continue
        lane["speedup"] = speedup(lane["tps"], base["tps"])
        lane["cut"] = n is not None
        k = first_difference(base["ids"][:n], lane["ids"][:n])
        lane["same"] = k is None
        if k is not None:
            lane["diff"] = {"at": k, "ref": base["pieces"][k] if k < len(base["pieces"]) else "(end)",
                            "lane": lane["pieces"][k] if k < len(lane["pieces"]) else "(end)"}


def race_figure(lanes: list[dict], clock: str) -> dict:
    """Tokens committed against the clock ("time": measured seconds, "passes": target forward passes), a step
    line per lane, and the replay's cursor (shape 0, moved by the browser)."""
    fig = go.Figure()
    for i, lane in enumerate(lanes):
        if not lane["marks"]:
            continue
        xs = [m[0] / 1000.0 if clock == "time" else m[1] for m in lane["marks"]]
        fig.add_trace(go.Scatter(x=[0.0] + xs, y=[0] + [m[2] for m in lane["marks"]], mode="lines+markers",
                                 line=dict(shape="hv", color=LANE_COLORS[i % len(LANE_COLORS)], width=2.5),
                                 marker=dict(size=4), name=plotly_text(lane["label"]),
                                 hovertemplate="%{x}: %{y} tokens<extra>" + plotly_text(lane["label"]) + "</extra>"))
    xtitle = "measured time (s; each lane's own rounds, run interleaved)" if clock == "time" \
        else "target forward passes (hardware-free)"
    # 12 px on the page, 24 px in the slide PNG (RACE_JS draws that at scale 2 of half the slide's size)
    fig.update_layout(template="none", font={**FONT, "size": 12}, height=300, margin=dict(l=50, r=10, t=36, b=44),
                      title=dict(text=plotly_text("tokens committed against " + ("time" if clock == "time"
                                                                                  else "target forward passes")),
                                 x=0.01, font=dict(size=14)),
                      xaxis=dict(title_text=plotly_text(xtitle), rangemode="tozero"),
                      yaxis=dict(title_text="tokens", rangemode="tozero"),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"),
                      plot_bgcolor="white", paper_bgcolor="white",
                      shapes=[dict(type="line", xref="x", yref="paper", x0=0, x1=0, y0=0, y1=1, name="clock",
                                   line=dict(color="#111", width=1.5, dash="dot"))])
    return json.loads(fig.to_json())


def payload(lanes: list[dict], ref: int | None, phase: str, note: str, badge: str,
            versus: str = "plain decoding") -> dict:
    """What the renderer draws: lanes (lane_payload), plain decoding's lane index, the phase ("live" while lanes
    run, "done" or "stopped" after), the page's note on how lanes ran and the badge's wording of what the texts
    are compared with, and `versus`, what ×N is measured against; finished races carry both clocks' figures."""
    verdicts(lanes, ref)
    out = {"phase": phase, "ref": ref, "note": note, "badge": badge, "versus": versus, "lanes": lanes,
           "slide": list(SLIDE_PX)}
    if phase != "live":
        out["figs"] = {c: race_figure(lanes, c) for c in ("time", "passes")}
    return out


def payload_json(p: dict) -> str:
    return json.dumps(p, ensure_ascii=False, separators=(",", ":"))


CSS = assets.read("race.css")  # its token colours: render.PALETTE_CSS

# The renderer (race.js): rxRaceMount(root, payload, {inspect}) draws the lanes; a finished race gets its replay
# (both clocks, a speed, a scrubber) and plays it once. Text is set as text nodes, never as HTML.
RACE_JS = assets.read("race.js")

# In the app (race_app.js): the payload is the gr.HTML's value; a lane's "open in round inspector" sends its index.
JS_RACE = RACE_JS + assets.read("race_app.js")
RACE_TEMPLATE = "<div class='rx-race-root' style='width:100%;min-height:60px'></div>"


def export_html(p: dict, title: str, plotly_js: str) -> str:
    """The race as one HTML file that replays offline: the payload, the renderer and `plotly_js` (the installed
    plotly package's, app.page.PLOTLY_JS) inlined: no CDN, no request of any kind."""
    def script(js: str) -> str:
        return js.replace("</script", "<\\/script")

    # "<" as \u003c: no "</script>" or "<!--" inside the data block, whatever the texts hold
    data = payload_json({**p, "lanes": [{k: v for k, v in lane.items() if k != "ids"} for lane in p["lanes"]]}
                        ).replace("<", "\\u003c")
    esc = (title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>{esc}</title>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline' "
            "'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:\">"
            f"<style>{PALETTE_CSS}{CSS}{assets.read('race_export.css')}</style>"
            f"<script>{script(plotly_js)}</script></head><body>"
            f"<h1>{esc}</h1><div id='race'></div>"
            f"<script type='application/json' id='race-data'>{data}</script>"
            f"<script>{script(RACE_JS)}\n{assets.read('race_export.js')}</script></body></html>")

"""What the Race view shows, as pure functions of the lanes' traces: the payload the browser renders (each
lane's text pieces coloured by provenance, its marks on both clocks, counters and verdicts), the race figure
(tokens against each clock) and the self-contained HTML export. One renderer (RACE_JS) draws the payload in
the app and in an exported file, so the file replays exactly what the page did."""
from __future__ import annotations

import json

import plotly.graph_objects as go

from engine.analyses import displaced
from engine.trace import token_sources

from .plots import BASE_COLOR, BONUS_COLOR, D_COLORS, FONT
from .render import source_style
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
                "shifted": 0, "gain": None, "gain_rounds": 0}
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


CSS = f"""
.rx-race{{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#222}}
.rx-race .rx-rnote{{font-size:13px;color:#555;margin:2px 0 6px}}
.rx-race .rx-rctl{{display:flex;flex-wrap:wrap;gap:10px;align-items:center;font-size:14px;margin:4px 0 8px}}
.rx-race .rx-rctl button{{font-size:14px;padding:3px 12px;border:1px solid #888;border-radius:6px;background:#f4f4f6;cursor:pointer}}
.rx-race .rx-rctl input[type=range]{{flex:1;min-width:160px}}
.rx-race .rx-rclock{{font-variant-numeric:tabular-nums;min-width:170px}}
.rx-race .rx-lanes{{display:grid;gap:8px}}
.rx-race .rx-lane{{border:1px solid #ccd;border-radius:8px;padding:6px 8px;background:#fff;min-width:0}}
.rx-race .rx-lhead{{display:flex;justify-content:space-between;gap:6px;align-items:baseline}}
.rx-race .rx-lname{{font-weight:700;font-size:16px}}
.rx-race .rx-labout{{font-size:12px;color:#666}}
.rx-race .rx-lstat{{font-size:12px;color:#555}}.rx-race .rx-lcap{{font-size:12px;color:#666}}
.rx-race .rx-lcount{{font-size:14px;font-variant-numeric:tabular-nums;margin:3px 0}}
.rx-race .rx-lcount b{{font-size:16px}}
.rx-race .rx-ltext{{white-space:pre-wrap;font-family:ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace;
  font-size:13px;line-height:1.5;height:190px;overflow-y:auto;border:1px solid #eee;border-radius:4px;padding:4px;
  background:#fcfcfd;overflow-wrap:anywhere}}
.rx-race .rx-lbadge{{font-size:14px;margin-top:4px;min-height:1.4em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}}
.rx-race .rx-lshift{{font-size:14px;margin:2px 0;font-variant-numeric:tabular-nums}}
.rx-race .rx-lgain{{font-weight:700}}
.rx-race .rx-lbadge .rx-x-n{{font-weight:700;font-size:17px}}
.rx-race .rx-same{{color:#137a3c;font-weight:600}}.rx-race .rx-differs{{color:#b3261e;font-weight:700}}
.rx-race .rx-linspect{{font-size:12px;padding:1px 8px;border:1px solid #888;border-radius:5px;background:#f4f4f6;cursor:pointer}}
.rx-race .rx-b{{background:{BASE_COLOR}22}}.rx-race .rx-x{{background:{BONUS_COLOR}55}}
""" + "".join(f".rx-race .rx-s{i}{{background:{c}66;box-shadow:inset 0 -2px 0 {c}}}" for i, c in enumerate(D_COLORS))

# The renderer: rxRaceMount(root, payload, {inspect}) draws the lanes; a finished race gets its replay (both
# clocks, a speed, a scrubber) and plays it once. Text is set as text nodes, never as HTML.
RACE_JS = r"""
window.rxRaceMount = function (root, P, opts) {
  opts = opts || {};
  if (root.__rxTimer) { cancelAnimationFrame(root.__rxTimer); root.__rxTimer = null; }
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e; };
  const show = (s) => s.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
  const fmt = (v, d) => (v === null || v === undefined) ? '–' : Number(v).toFixed(d);
  root.innerHTML = '';
  root.classList.add('rx-race');
  root.dataset.phase = P.phase;
  const done = P.phase !== 'live';
  root.appendChild(el('div', 'rx-rnote', P.note));
  const ctl = el('div', 'rx-rctl');
  const play = el('button', 'rx-rplay', '▶ replay'), clockSel = el('select', 'rx-rclocksel');
  [['time', 'clock: measured time'], ['passes', 'clock: target forward passes']].forEach(([v, t]) => {
    const o = el('option', null, t); o.value = v; clockSel.appendChild(o); });
  const speed = el('select', 'rx-rspeed');
  ['0.25', '0.5', '1', '2', '4'].forEach((v) => { const o = el('option', null, 'speed ×' + v); o.value = v;
    if (v === '1') o.selected = true; speed.appendChild(o); });
  const scrub = el('input', 'rx-rscrub'); scrub.type = 'range'; scrub.min = 0; scrub.max = 1000; scrub.value = 0;
  const readout = el('span', 'rx-rclock');
  [play, clockSel, speed, scrub, readout].forEach((e) => ctl.appendChild(e));
  if (done) root.appendChild(ctl);
  const grid = el('div', 'rx-lanes');
  grid.style.gridTemplateColumns = 'repeat(' + Math.max(1, P.lanes.length) + ', minmax(0, 1fr))';
  root.appendChild(grid);
  const boxes = P.lanes.map((L, i) => {
    const lane = el('div', 'rx-lane'); lane.dataset.lane = L.label;
    const head = el('div', 'rx-lhead');
    const name = el('div'); name.appendChild(el('span', 'rx-lname', L.label)); name.appendChild(el('span', 'rx-labout', ' ' + L.about));
    head.appendChild(name);
    const stat = el('span', 'rx-lstat', L.status);
    head.appendChild(stat);
    if (opts.inspect && done && L.marks.length) {
      const b = el('button', 'rx-linspect', 'open in round inspector');
      b.title = 'show this lane\'s rounds in the Explore tab';
      b.addEventListener('click', () => opts.inspect(i));
      head.appendChild(b);
    }
    lane.appendChild(head);
    const count = el('div', 'rx-lcount'); lane.appendChild(count);
    // a lane with shifted blocks counts the tokens they gave (the text's shifted colours)
    const shift = L.label.startsWith('reanchor') ? el('div', 'rx-lshift') : null;
    if (shift) lane.appendChild(shift);
    const text = el('div', 'rx-ltext'); lane.appendChild(text);
    const badge = el('div', 'rx-lbadge'); lane.appendChild(badge);
    if (L.passes > 1) lane.appendChild(el('div', 'rx-lcap', 'largest round ' + L.max_nodes + ' nodes · longest ' +
      (L.max_round_ms / 1000).toFixed(2) + ' s (Stop acts at the next round)'));
    grid.appendChild(lane);
    return {L, lane, stat, count, shift, text, badge, shown: -1};
  });
  const counters = (b, n, passes, tps, fin) => {
    b.count.innerHTML = '';
    [['tokens ', n], [' · passes ', passes], [' · tokens/s ', fmt(tps, 2)]].forEach(([k, v]) => {
      b.count.appendChild(document.createTextNode(k)); b.count.appendChild(el('b', null, String(v))); });
    if (!b.shift) return;
    let k = 0; for (let j = 0; j < n; j++) if ((b.L.src[j] || '').startsWith('rx-s')) k++;
    b.shift.innerHTML = ''; b.shift.dataset.shifted = k;
    b.shift.appendChild(document.createTextNode('tokens from shifted blocks: '));
    b.shift.appendChild(el('b', null, String(k)));
    if (fin && b.L.gain !== null && b.L.gain !== undefined) {
      const g = b.L.gain;
      b.shift.appendChild(document.createTextNode(' · '));
      const w = el('span', 'rx-lgain', g >= 0 ? 'ReAnchor added ' + g + ' token' + (g === 1 ? '' : 's') +
        ' over the tree alone' : 'ReAnchor: ' + (-g) + ' token' + (g === -1 ? '' : 's') + ' fewer than the tree alone');
      w.title = 'over the ' + b.L.gain_rounds + ' rounds that recorded the tree g(0) alone would have grown: the ' +
        'tokens committed minus what that tree would have committed on the same state';
      b.shift.dataset.gain = g; b.shift.appendChild(w);
    }
  };
  const setText = (b, n) => {
    if (b.shown === n) return;
    if (n < b.shown) { b.text.innerHTML = ''; b.shown = 0; }
    for (let k = Math.max(0, b.shown); k < n; k++) {
      const s = el('span', b.L.src[k] || '', show(b.L.pieces[k] || ''));
      s.title = '#' + k; b.text.appendChild(s);
    }
    b.shown = n; b.lane.dataset.tokens = n;
    b.text.scrollTop = b.text.scrollHeight;
  };
  const badges = () => boxes.forEach((b, i) => {
    const L = b.L; b.badge.innerHTML = '';
    if (i === P.ref) { b.badge.appendChild(el('span', null, 'the reference: ' + P.badge)); return; }
    if (L.speedup !== null && L.speedup !== undefined) {
      const x = el('span', 'rx-x-n', '×' + L.speedup.toFixed(2));
      x.title = 'tokens/s against ' + (P.versus || 'plain decoding');
      b.badge.appendChild(x); b.badge.appendChild(document.createTextNode(' · '));
    }
    if (L.same === true) b.badge.appendChild(el('span', 'rx-same', (L.cut ? 'cut by the run time limit: the ' +
      'tokens both lanes made are the same text as ' : 'same text as ') + P.badge + ' ✓'));
    else if (L.same === false) b.badge.appendChild(el('span', 'rx-differs', 'differs from ' + P.badge +
      ' at token #' + L.diff.at + ': ' + JSON.stringify(show(L.diff.ref)) + ' there, ' + JSON.stringify(show(L.diff.lane)) + ' here'));
  });
  if (!done) {
    boxes.forEach((b) => { setText(b, b.L.tokens); counters(b, b.L.tokens, b.L.passes, b.L.tps, false); });
    return;
  }
  badges();
  // -- the replay: every lane on one clock, from its recorded marks
  const ref = P.lanes[P.ref !== null ? P.ref : 0];
  const refEnd = ref && ref.marks.length ? ref.marks[ref.marks.length - 1] : [1000, 1, 1];
  const end = {time: Math.max(...P.lanes.map((L) => L.marks.length ? L.marks[L.marks.length - 1][0] : 0)) / 1000,
               passes: Math.max(...P.lanes.map((L) => L.marks.length ? L.marks[L.marks.length - 1][1] : 0))};
  // ×1: measured time runs at real time; passes at plain decoding's measured passes per second
  const rate = {time: 1, passes: refEnd[1] / Math.max(refEnd[0] / 1000, 1e-3)};
  let clock = 'time', t = 0, last = null, playing = false, figDrawn = null, cursorAt = -1;
  const fig = el('div', 'rx-rfig'); fig.style.width = '100%'; root.appendChild(fig);
  const plotConfig = {responsive: true, displaylogo: false,
    toImageButtonOptions: {format: 'png', filename: 'race-' + clock, width: P.slide[0] / 2, height: P.slide[1] / 2,
                          scale: 2}};
  const drawFig = () => {
    if (!window.Plotly || !P.figs) return;
    const f = P.figs[clock];
    plotConfig.toImageButtonOptions.filename = 'race-' + clock;
    window.Plotly.newPlot(fig, f.data, f.layout, plotConfig); figDrawn = clock; cursorAt = -1;
  };
  const at = (L, x) => {  // tokens and passes of lane L at clock value x
    // x * 1000 can fall a rounding error short of the mark it came from (end = last mark / 1000): the slack
    // keeps a lane's last mark, and its final count, at the replay's end
    const k = clock === 'time' ? 0 : 1, xs = (clock === 'time' ? x * 1000 : x) + 1e-6;
    let j = -1; for (let m = 0; m < L.marks.length && L.marks[m][k] <= xs; m++) j = m;
    return j < 0 ? [0, 0, false] : [L.marks[j][2], L.marks[j][1], j === L.marks.length - 1];
  };
  const frame = () => {
    boxes.forEach((b) => {
      const [n, passes, fin] = at(b.L, t);
      setText(b, n);
      const tps = fin ? b.L.tps : (clock === 'time' && t > 0 && n ? n / t : null);
      counters(b, n, passes, tps, fin);
      b.stat.textContent = fin ? (b.L.status === 'done' ? 'finished' : b.L.status) : (n ? 'decoding…' : 'waiting');
      b.badge.style.visibility = fin ? 'visible' : 'hidden';   // a lane's verdict once it has finished
    });
    readout.textContent = clock === 'time' ? 't = ' + t.toFixed(2) + ' s of ' + end.time.toFixed(2) + ' s'
      : 'pass ' + Math.floor(t) + ' of ' + end.passes;
    scrub.value = Math.round(1000 * t / Math.max(end[clock], 1e-9));
    if (window.Plotly && figDrawn !== clock) drawFig();
    if (figDrawn && Math.abs(cursorAt - t) > end[clock] / 200) {
      cursorAt = t; window.Plotly.relayout(fig, {'shapes[0].x0': t, 'shapes[0].x1': t});
    }
    root.dataset.replay = playing ? 'playing' : (t >= end[clock] ? 'ended' : 'paused');
  };
  const tick = (now) => {
    if (!playing) return;
    if (last !== null) t = Math.min(end[clock], t + (now - last) / 1000 * rate[clock] * parseFloat(speed.value));
    last = now;
    frame();
    if (t >= end[clock]) { playing = false; play.textContent = '▶ replay'; root.dataset.replay = 'ended'; return; }
    root.__rxTimer = requestAnimationFrame(tick);
  };
  const start = () => { if (t >= end[clock]) t = 0; playing = true; last = null; play.textContent = 'pause';
    root.__rxTimer = requestAnimationFrame(tick); };
  play.addEventListener('click', () => { if (playing) { playing = false; play.textContent = '▶ replay'; frame(); } else start(); });
  clockSel.addEventListener('change', () => { const f = t / Math.max(end[clock], 1e-9); clock = clockSel.value;
    t = f * end[clock]; frame(); });
  scrub.addEventListener('input', () => { t = end[clock] * scrub.value / 1000; frame(); });
  root.__rxReplay = {start, frame, set: (x) => { t = x; frame(); }};
  const begin = () => { if (!window.Plotly) { setTimeout(begin, 100); return; } drawFig(); t = 0; start(); };
  if (opts.autoplay === false) frame(); else begin();
};
"""

# In the app: the payload is the gr.HTML's value; a lane's "open in round inspector" sends its index.
JS_RACE = RACE_JS + """
let shownPhase = null;
const mount = () => {
  const root = element.querySelector('.rx-race-root');
  if (!root || !props.value) return;
  const P = JSON.parse(props.value);
  window.rxRaceMount(root, P, {inspect: (i) => trigger('click', {lane: i})});
  // a race starting: its lanes in view (the controls above them are a screen high at 1280x720)
  if (P.phase === 'live' && shownPhase !== 'live') {
    (document.querySelector('#rx-race-status') || root).scrollIntoView({block: 'start'});
  }
  shownPhase = P.phase;
};
watch('value', mount);
mount();
"""
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
            f"<style>body{{margin:16px;background:#fff}}h1{{font:600 20px system-ui,sans-serif}}{CSS}</style>"
            f"<script>{script(plotly_js)}</script></head><body>"
            f"<h1>{esc}</h1><div id='race'></div>"
            f"<script type='application/json' id='race-data'>{data}</script>"
            f"<script>{script(RACE_JS)}\nwindow.rxRaceMount(document.getElementById('race'), "
            "JSON.parse(document.getElementById('race-data').textContent), {});</script></body></html>")

window.rxRaceMount = function (root, P, opts) {
  opts = opts || {};
  if (root.__rxTimer) { cancelAnimationFrame(root.__rxTimer); root.__rxTimer = null; }
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e; };
  // eslint-disable-next-line no-control-regex -- the control characters are what it makes visible
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
    } else if (fin && b.L.drafted === 0) {
      // the cost budget drafted none: the lane is the tree alone, and says why
      b.shift.appendChild(document.createTextNode(' · '));
      const w = el('span', 'rx-lgain', 'no shifted block drafted: the budget found none worth its cost here');
      w.title = 'the auto budget drafts a shifted block only where its expected accepted tokens pay for its drafting ' +
        'and verifying time on this machine; this lane ran as the tree g(0) alone';
      b.shift.appendChild(w);
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

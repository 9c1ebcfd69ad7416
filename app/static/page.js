const CONFIG = {responsive: true, displaylogo: false};
const ON = 'width:100%;min-height:120px', OFF = 'position:absolute;left:-10000px;top:0;width:';
const cache = new Map();  // round -> {caption, fig, text (a fetched figure's JSON)}, of the trace cacheKey
const WINDOW = RX.PREFETCH_ROUNDS, PER_FETCH = RX.ROUNDS_PER_FETCH, READY = RX.DRAWN_AHEAD;
const {wanted, nextFrom, hold, trim, farthest, nextToDraw} = window.rxRounds;  // rounds.js
const idle = window.requestIdleCallback || ((f) => setTimeout(f, 50));
const ready = new Map();  // round -> an offscreen div with that round drawn
let cacheKey = null;
const div = () => element.querySelector('.rx-plot[data-shown]');
// purge + newPlot: a third faster than Plotly.react when every trace changes (a new round always does)
// the projector setting: no toolbar over the figure's labels (its zoom and download stay off the lesson)
const config = (fig) => ((fig.layout && fig.layout.meta && fig.layout.meta.projector)
  ? Object.assign({}, CONFIG, {displayModeBar: false}) : CONFIG);
const plot = (d, fig) => {
  window.Plotly.purge(d);
  d.__plotting = window.Plotly.newPlot(d, fig.data, fig.layout, config(fig));
  // a click on the folded row of discarded blocks opens it (or closes it): the server redraws with them
  if (d.on) d.on('plotly_click', (ev) => {
    const p = ev && ev.points && ev.points[0];
    if (p && p.data && p.data.meta === 'fold') trigger('click', {fold: true});
  });
};
// purged once its draw has settled: a div dropped while Plotly.newPlot's promise was still under way (a round drawn
// ahead and parked past READY at once) had its layout deleted under the draw ("reading
// '_redrawFromAutoMarginCount'" in the console)
const drop = (d) => {
  d.remove();
  Promise.resolve(d.__plotting).catch(() => {}).then(() => window.Plotly.purge(d));
};
const afterPaint = (f) => requestAnimationFrame(() => setTimeout(f, 0));  // a timeout set in rAF: after the paint
// keep a drawn round offscreen, at most READY: those farthest from the shown one go. Its content skipped by the
// page's style and layout passes (content-visibility): 24 drawn rounds in them made a swap's frame 50-190 ms late.
// Parked where it was drawn, beside the shown figure, and never moved: a div moved in the page loses its computed
// style and layout, and showing it again restyled and laid out its ~850 elements (10-35 ms a swap here); a hidden
// one keeps them, and only its few changed elements are restyled when it is shown
const park = (d, width) => {
  d.removeAttribute('data-shown');
  d.style.cssText = OFF + width + 'px;content-visibility:hidden';
  if (ready.has(d.__round) && ready.get(d.__round) !== d) drop(ready.get(d.__round));
  ready.set(d.__round, d);
  const at = window.__rxRound || 0;
  while (ready.size > READY) {
    const far = farthest(ready.keys(), at);
    drop(ready.get(far)); ready.delete(far);
  }
};
const caption = (html) => {
  const cap = document.querySelector('#rx-caption .prose') || document.querySelector('#rx-caption');
  if (!cap || !html) return;
  cap.innerHTML = html;
  window.__rxAtt && window.__rxAtt();
};
// the attachment table (a <details> in the caption) stays open across rounds, whoever replaces the caption: this
// page's cache or the server's answer
window.__rxAtt = () => {
  const att = document.querySelector('#rx-caption #rx-att');
  if (att && window.__rxAttOpen && !att.open) att.open = true;
};
if (!window.__rxAttBound) {
  window.__rxAttBound = true;
  document.addEventListener('toggle', (e) => {
    if (e.target && e.target.id === 'rx-att') window.__rxAttOpen = e.target.open;
  }, true);
  const watchCaption = () => {
    const cap = document.querySelector('#rx-caption');
    if (!cap) { setTimeout(watchCaption, 200); return; }
    new MutationObserver(() => window.__rxAtt()).observe(cap, {childList: true, subtree: true});
  };
  watchCaption();
}
// the shown round's tokens highlighted in the text view
window.__rxMark = (r) => {
  if (r !== undefined) window.__rxRound = r;
  if (window.__rxFrame) window.__rxFrame();  // and framed on the timeline
  const box = document.querySelector('#rx-text-box');
  if (!box || window.__rxRound === undefined) return;
  box.querySelectorAll('span.cur').forEach((e) => e.classList.remove('cur'));
  box.querySelectorAll('span[data-r="' + window.__rxRound + '"]').forEach((e) => e.classList.add('cur'));
};
const show = (r, entry, fresh) => {
  const host = div(), pre = fresh ? undefined : ready.get(r);
  if (!pre && !entry) return;  // neither drawn nor held: the server's answer shows it
  const width = host.clientWidth;  // read before the writes below: no layout forced in between
  window.__rxMark(r);
  if (fresh && ready.has(r)) { drop(ready.get(r)); ready.delete(r); }
  if (pre) {  // swap the drawn div in; the one shown goes offscreen, where it is
    ready.delete(r);
    if (pre.parentNode !== host.parentNode) host.before(pre);  // the component redrew its template
    pre.style.cssText = ON;
    pre.setAttribute('data-shown', '');  // an attribute: a class changed here restyled the whole figure
    if (host.__round !== undefined && host.__key === cacheKey) park(host, width); else drop(host);
  } else {
    plot(host, entry.fig);
    host.__round = r; host.__key = cacheKey;
  }
  caption((entry || {}).caption);
  afterPaint(drawAhead);  // not before this frame: an idle moment before it would start a 30-150 ms draw there
};
const prepare = (r) => {
  const host = div(), entry = cache.get(r);
  if (!host || !entry || ready.has(r) || host.__round === r) return;
  const d = document.createElement('div'), width = host.clientWidth;
  d.className = 'rx-plot';
  d.style.cssText = OFF + width + 'px';
  host.parentNode.appendChild(d);
  plot(d, entry.fig);
  d.__round = r; d.__key = cacheKey;
  void d.offsetHeight;  // its style and layout computed now, in idle time, and kept while it is hidden
  park(d, width);
};
// the other rounds of a finished trace, fetched while the page is idle, nearest the shown round first; one request
// at a time, PER_FETCH rounds each; given up once the key changes (the server answers no rounds for an old key).
// A round shown while a sequence runs re-aims it (`want` is shared): a far jump used to wait for the old sequence,
// whose end started no new one, so the rounds around the jump were never fetched
// the caption brought into view now, and again once it names the round asked for: the server's answer can move what
// lies above it (a list or a Compare figure redrawn), and a caption scrolled to at the click alone ended out of view
window.__rxCaptionIntoView = (r) => {
  const cap = document.querySelector('#rx-caption');
  if (!cap) return;
  cap.scrollIntoView({block: 'start'});
  const obs = new MutationObserver(() => {
    if (!(cap.innerText || '').includes('Round ' + r + ' (')) return;
    obs.disconnect();
    requestAnimationFrame(() => cap.scrollIntoView({block: 'start'}));
  });
  obs.observe(cap, {childList: true, subtree: true, characterData: true});
  setTimeout(() => obs.disconnect(), 15000);
};
let fetching = null, want = [];
const RETRIES = 6;  // busy answers a sequence rides out (0.3 + 0.6 + ... + 1.8 s: 6.3 s in all)
const fetchAhead = (src, key, around, n) => {
  want = wanted(around, n, WINDOW);
  if (fetching === key + src) return;
  fetching = key + src;
  let busy = 0;  // "busy" answers in a row: 429 (this session's last request still drawn), 503 (other sessions')
  const next = () => {
    const from = nextFrom(want, (r) => cache.has(r), n, PER_FETCH);
    if (from === null || cacheKey !== key) { if (fetching === key + src) fetching = null; return; }
    fetch(`${src}?key=${encodeURIComponent(key)}&from=${from}&count=${PER_FETCH}`, {cache: 'no-store'})
      .then((res) => (res.ok ? res.json() : Promise.reject(res.status)))
      .then((got) => {
        busy = 0;
        if (got.key !== cacheKey) { if (fetching === key + src) fetching = null; return; }  // stale: the next answer
        got.rounds.forEach((e) => {
          if (!cache.has(e.round)) cache.set(e.round, {caption: e.caption, fig: e.fig, text: JSON.stringify(e.fig)});
        });
        drawAhead();
        idle(next, {timeout: 1000});
      })
      .catch((status) => {
        // the server asks to come back later (its rounds route draws one request at a time): again, a little later
        // each time, a few times; past that the next round switch starts a new sequence
        if ((status === 429 || status === 503) && cacheKey === key && busy < RETRIES) {
          busy += 1;
          setTimeout(next, 300 * busy);
          return;
        }
        if (fetching === key + src) fetching = null;
      });
  };
  idle(next, {timeout: 1000});
};
// the held rounds nearest the shown one drawn offscreen, one an idle moment, so that a jump to one of them swaps
// divs as "next" does (a draw is 30-150 ms on this 2-core machine; a swap 1-3)
// Not before a person's first switch in the trace: a page opened (or shown another trace) and only read would spend
// ~2 s of a core drawing rounds nobody asked for, beside a run that may be starting; "next" is drawn ahead anyway
let ahead = null, opened = null, moved = false;  // the round a trace opened on; whether the view has left it
const drawAhead = () => {
  if (ahead !== null || !moved) return;
  ahead = idle(() => {
    ahead = null;
    const host = div(), at = host && host.__round;
    if (at === undefined || host.__key !== cacheKey) return;
    const r = nextToDraw(cache.keys(), at, (k) => ready.has(k), READY);
    if (r === undefined) return;
    prepare(r);
    drawAhead();
  }, {timeout: 2000});
};
const draw = () => {
  if (!window.Plotly || !div()) { setTimeout(draw, 100); return; }
  if (!props.value) return;
  const v = JSON.parse(props.value);
  if (!v.fig) { plot(div(), v); div().__round = undefined; return; }  // a placeholder figure
  if (v.key !== cacheKey) {
    cache.clear(); ready.forEach(drop); ready.clear(); cacheKey = v.key;
    opened = v.round; moved = false;
  }
  if (v.round !== opened) moved = true;
  // a fetched round that the server now draws otherwise: the server's wins
  const had = cache.get(v.round), stale = had && had.text !== undefined && had.text !== JSON.stringify(v.fig);
  // held as the newest: the oldest go below, and a round the page held longest, shown again ("first" after a long
  // run's rounds were fetched), was evicted before it was shown
  hold(cache, v.round, {caption: v.caption, fig: v.fig});
  if (v.next) hold(cache, v.next.round, {caption: v.next.caption, fig: v.next.fig});
  trim(cache, WINDOW + 16);
  if (div().__round !== v.round || div().__key !== v.key || stale) show(v.round, cache.get(v.round), stale);
  // drawn ahead once this frame is painted (rAF runs before the paint, its timeout after it)
  if (v.next) afterPaint(() => prepare(v.next.round));
  if (v.src && v.n > 1) fetchAhead(v.src, v.key, v.round, v.n);
  drawAhead();
};
watch('value', draw);
draw();
// next / prev: show a neighbour at once (capture phase: before Gradio sends the call)
const step = (delta) => {
  const d = div();
  if (!d || d.__round === undefined || d.__key !== cacheKey) return false;
  const r = d.__round + delta;
  if (!ready.has(r) && !cache.has(r)) return false;
  moved = true;
  show(r, cache.get(r));
  return true;
};
// a jump (the slider, its number box, a token, a timeline bar): a round the page holds is shown at once, in the
// event, before Gradio sends the call
const jump = (r) => {
  const d = div();
  if (window.__rxNoCache || !d || d.__key !== cacheKey || !(r >= 0) || d.__round === r) return false;
  if (!ready.has(r) && !cache.has(r)) return false;
  moved = true;
  show(r, cache.get(r));
  return true;
};
// Gradio's own work for the event that asked for a round the page has just shown (its loading statuses copy every
// output's props: 5 ms for "next", 17-30 ms for the slider on this 2-core machine) waits until the frame showing the
// round is painted, so that it no longer holds that frame back: replayed then, in order; any later click or input
// on the page replays those held first, so Gradio and the server see the events in the order they came
const held = [];
let replaying = false;
const flush = () => {
  while (held.length) {
    replaying = true;
    try { held.shift()(); } finally { replaying = false; }
  }
};
const later = (f) => {
  held.push(f);
  // the plain timeout, should no frame come (a page in the background)
  if (held.length === 1) { afterPaint(flush); setTimeout(flush, 250); }
};
// send(f, shown): Gradio's part of a round switch, held past the paint when the page showed the round itself
window.__rxSend = (f, shown) => { if (shown) later(f); else { flush(); f(); } };
// (window.__rxNoCache = true turns this off, to measure the server's path: test_app_browser.py)
window.__rxJump = jump;
window.__rxHeld = () => (cacheKey === null ? [] : [...cache.keys()]);  // the rounds the page can draw at once
window.__rxDrawn = () => [...ready.keys()];  // those of them drawn ahead
if (!window.__rxNavBound) {  // on the document: the buttons may mount after this component
  window.__rxNavBound = true;
  // capture phase on the document: before Gradio's listeners, which stopPropagation keeps from the event until its
  // replay (other listeners on the document still see it)
  document.addEventListener('input', (e) => {
    if (replaying) return;
    flush();
    const t = e.target;
    if (!(t && t.closest && t.closest('#rx-slider') && t.tagName === 'INPUT' && t.value !== '')) return;
    if (!(window.__rxJump && window.__rxJump(Number(t.value)))) return;
    // the slider's other half (number box, range) shows the round in this frame too, as Gradio's binding would
    const range = t.closest('#rx-slider')
      .querySelector(t.type === 'range' ? 'input[type=number]' : 'input[type=range]');
    if (range && range.type === 'range') {
      const lo = Number(range.min), hi = Number(range.max);
      range.value = t.value;
      range.style.setProperty('--range_progress', `${hi > lo ? (Number(t.value) - lo) / (hi - lo) * 100 : 0}%`);
    } else if (range) range.value = t.value;
    // the event goes on to Gradio now, not held past the paint as "next" is: a held and replayed slider input was
    // lost now and then (a typed jump that never settled: tests/test_app_lesson.py, 2 full runs in 6 here)
  }, true);
  // the slider's own blur and pointerup send its value too: a held next/prev or token jump goes before them
  for (const kind of ['blur', 'focusout', 'pointerup'])
    document.addEventListener(kind, () => { if (!replaying) flush(); }, true);
  // The number box's blur and pointerup send its value again ("release"), though each keystroke sent it already
  // ("input"). Leaving the box by clicking "first" sent the round shown beside the click's own switch; the two calls
  // raced, and the round left behind could win (a CI run: "first" never showed round 0) or its answer undo a phase
  // step taken after. Stopped here, in the capture phase, they never reach Gradio's listeners on the box.
  for (const kind of ['blur', 'pointerup'])
    document.addEventListener(kind, (e) => {
      const t = e.target;
      if (t && t.closest && t.tagName === 'INPUT' && t.type === 'number' && t.closest('#rx-slider')) e.stopPropagation();
    }, true);
  document.addEventListener('click', (e) => {
    if (replaying) return;
    flush();
    const b = e.target.closest && e.target.closest('#rx-next, #rx-prev');
    if (b && !window.__rxNoCache && step(b.id === 'rx-next' ? 1 : -1)) {
      e.stopPropagation();
      later(() => (document.getElementById(b.id) || b).click());
    }
    // stepping through a round: its sentence at the top of the screen, the figure under it (also when the page was
    // scrolled past it)
    if (e.target.closest && e.target.closest('#rx-phase-next, #rx-phase-prev')) {
      const cap = document.querySelector('#rx-caption'), top = cap && cap.getBoundingClientRect().top;
      if (cap && (top > 80 || top < 0)) cap.scrollIntoView({block: 'start'});
    }
    // a round of the caption's "rounds worth teaching": typed into the slider's box, as a person would
    const go = e.target.closest && e.target.closest('#rx-caption [data-goto]');
    if (go) {
      e.preventDefault();
      const box = document.querySelector('#rx-slider input[type=number]');
      if (box) { box.value = go.dataset.goto; box.dispatchEvent(new Event('input', {bubbles: true})); }
    }
  }, true);
  // left / right arrows step rounds, down / up the step-through's phases, unless a text box, list or slider
  // has the keys
  const KEYS = {ArrowRight: '#rx-next', ArrowLeft: '#rx-prev', ArrowDown: '#rx-phase-next', ArrowUp: '#rx-phase-prev'};
  document.addEventListener('keydown', (e) => {
    if (!KEYS[e.key] || e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    const b = document.querySelector(KEYS[e.key]);
    if (b) { e.preventDefault(); b.click(); }
  });
}

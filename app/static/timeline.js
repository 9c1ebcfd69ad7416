const VIEW = RX.VIEW_MARK, FRAME = RX.FRAME, OTHER = RX.OTHER;
if (FRAME) window.__rxFrame = () => {
  const d = element.querySelector('.rx-plot'), r = window.__rxRound, full = d && d._fullLayout;
  if (!full || !full.xaxis || !full.shapes || r === undefined) return;
  (d.layout.shapes || []).forEach((s, k) => {
    const drawn = full.shapes[k], path = d.querySelector(`.shapelayer path[data-index="${k}"]`);
    if (s.name !== VIEW || !drawn) return;
    s.x0 = r - 0.5; s.x1 = r + 0.5;
    if (path) path.setAttribute('transform', `translate(${full.xaxis.l2p(r - 0.5) - full.xaxis.l2p(drawn.x0)},0)`);
  });
};
const draw = () => {
  const d = element.querySelector('.rx-plot');
  if (!window.Plotly || !d) { setTimeout(draw, 100); return; }
  if (!props.value) return;
  const f = JSON.parse(props.value);
  Promise.resolve(window.Plotly.react(d, f.data, f.layout, {responsive: true, displaylogo: false})).then(() => {
    if (FRAME) window.__rxFrame();  // a streamed timeline may be older than the round figure shown
    if (d.on && !d.__rxBound) {
      d.__rxBound = true;
      d.on('plotly_click', (ev) => {
        const p = ev && ev.points && ev.points[0];
        if (!p) return;
        // a round the page holds: at once (never another run's: OTHER)
        const shown = !OTHER && !!window.__rxJump && window.__rxJump(Math.round(p.x));
        const send = () => trigger('click', {round: Math.round(p.x)});
        if (window.__rxSend) window.__rxSend(send, shown); else send();
        // from the Compare panel: the inspector's caption into view
        if (!FRAME && window.__rxCaptionIntoView) window.__rxCaptionIntoView(Math.round(p.x));
      });
    }
  });
};
watch('value', draw);
draw();

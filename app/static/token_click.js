element.addEventListener('click', (e) => {
  const t = e.target.closest('[data-r]');
  if (!t) return;
  // a round the page holds is shown at once
  const shown = !!window.__rxJump && window.__rxJump(Math.max(0, parseInt(t.dataset.r)));
  const send = () => trigger('click', {r: parseInt(t.dataset.r), k: parseInt(t.dataset.k)});
  if (window.__rxSend) window.__rxSend(send, shown); else send();
  if (window.__rxMark) window.__rxMark(Math.max(0, parseInt(t.dataset.r)));
  const top = document.querySelector('#rx-caption');
  if (top) top.scrollIntoView({behavior: 'smooth', block: 'start'});
});
// a new text (another trace, a streamed update) keeps the shown round's tokens highlighted
watch('value', () => requestAnimationFrame(() => window.__rxMark && window.__rxMark()));

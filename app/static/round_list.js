element.addEventListener('click', (e) => {
  const b = e.target.closest && e.target.closest('[data-round]');
  if (!b) return;
  const r = parseInt(b.dataset.round);
  const shown = !!window.__rxJump && window.__rxJump(r);
  const send = () => trigger('click', {round: r});
  if (window.__rxSend) window.__rxSend(send, shown); else send();
  if (window.__rxCaptionIntoView) window.__rxCaptionIntoView(r);
});

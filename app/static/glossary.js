(() => {
  const TERMS = RX.TERMS;
  const done = new Set();
  const decorate = () => {
    const els = [...document.querySelectorAll(
      '#rx-tabs label span, #rx-tabs [data-testid="block-info"], #rx-tabs .info, #rx-tabs button, #rx-tabs th, '
      + '#rx-tabs .rx-status, #rx-tabs h3, #rx-intro p')].filter((e) => e.children.length === 0 && e.textContent);
    for (const [term, src, flags, def] of TERMS) {
      if (done.has(term)) continue;
      const re = new RegExp(src, flags);
      const el = els.find((e) => re.test(e.textContent) && !e.closest('abbr'));
      if (!el) continue;
      done.add(term);
      el.title = (el.title ? el.title + '\n' : '') + term + ': ' + def;
      if (el.textContent.length < 80) el.classList.add('rx-term');  // a paragraph keeps its title, not a dotted line
    }
  };
  // controls mount as Gradio renders them (a tab's when it is first shown): again at a few moments, and on a tab's
  // selection
  [300, 1500, 4000, 10000].forEach((t) => setTimeout(decorate, t));
  document.addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest('[role="tab"]')) setTimeout(decorate, 300);
  }, true);
})();

// The rounds the page holds for jumps (page.js): which to fetch, in what order, which to keep. Pure functions
// of numbers, Maps and lists: window.rxRounds in the browser, require()d by Node's tests (tests/js/).
(function (root, make) {
  if (typeof module === 'object' && module.exports) module.exports = make();
  else root.rxRounds = make();
}(typeof globalThis !== 'undefined' ? globalThis : this, () => {
  // the rounds to hold around `around` of a trace of n: nearest first, after before, at most `window`
  const wanted = (around, n, window) => {
    const want = [];
    for (let d = 1; want.length < Math.min(n - 1, window); d++)
      for (const r of [around + d, around - d]) if (r >= 0 && r < n && want.length < window) want.push(r);
    return want;
  };
  // the first round of the next request, which brings `want`'s head once the rounds already held are dropped from
  // it (in place: a sequence re-aimed meanwhile reads the new list); null when every wanted round is held. A head
  // whose next round is held (one before the shown round: they are wanted downwards) ends its request rather than
  // starts it: a request from it brought back the rounds after it, held already, and one new round each time
  // (72 requests for the 128 rounds around a jump, instead of 16). A whole request's worth inside the trace.
  const nextFrom = (want, held, n, perFetch) => {
    while (want.length && held(want[0])) want.shift();
    if (!want.length) return null;
    const r = want[0], from = held(r + 1) ? r - perFetch + 1 : r;
    return Math.max(0, Math.min(from, n - perFetch));
  };
  // set as the newest (a Map keeps a key's first place): the oldest go first when the cache is trimmed
  const hold = (cache, r, entry) => { cache.delete(r); cache.set(r, entry); };
  const trim = (cache, max) => { while (cache.size > max) cache.delete(cache.keys().next().value); };
  // of the rounds `keys`, the one farthest from `at` (the first of a tie)
  const farthest = (keys, at) => [...keys].reduce((a, b) => (Math.abs(b - at) > Math.abs(a - at) ? b : a));
  // the next held round to draw ahead: of the `count` held rounds nearest `at` (not `at` itself), the first not
  // drawn yet; undefined when all are
  const nextToDraw = (keys, at, drawn, count) => {
    const near = [...keys].filter((k) => k !== at).sort((a, b) => Math.abs(a - at) - Math.abs(b - at));
    return near.slice(0, count).find((k) => !drawn(k));
  };
  return {wanted, nextFrom, hold, trim, farthest, nextToDraw};
}));

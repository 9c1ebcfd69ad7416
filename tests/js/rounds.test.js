// The page's prefetch and cache logic (app/static/rounds.js), as page.js uses it: `node --test tests/js/`
const test = require('node:test');
const assert = require('node:assert/strict');
const {wanted, nextFrom, hold, trim, farthest, nextToDraw} = require('../../app/static/rounds.js');

const WINDOW = 128, PER_FETCH = 8;  // app.page.PREFETCH_ROUNDS, app.views.ROUNDS_PER_FETCH

test('the window ahead of a jump: nearest first, after before, inside the trace, the shown round left out', () => {
  assert.deepEqual(wanted(10, 100, 6), [11, 9, 12, 8, 13, 7]);
  assert.deepEqual(wanted(0, 100, 4), [1, 2, 3, 4]);           // nothing before round 0
  assert.deepEqual(wanted(99, 100, 3), [98, 97, 96]);          // nothing after the last round
  assert.deepEqual(wanted(2, 4, 10), [3, 1, 0]);               // a short trace: every other round, once
  assert.deepEqual(wanted(0, 1, 10), []);
  const w = wanted(500, 2000, WINDOW);
  assert.equal(w.length, WINDOW);
  assert.equal(new Set(w).size, WINDOW);
  assert.ok(!w.includes(500));
  assert.ok(w.every((r) => Math.abs(r - 500) <= WINDOW / 2), 'a round farther than the window\'s half');
});

test('a request brings the first wanted round not held, and the wanted rounds beyond it, inside the trace', () => {
  const held = new Set([10, 11, 9]);
  const want = wanted(10, 100, 6);
  assert.equal(nextFrom(want, (r) => held.has(r), 100, PER_FETCH), 12);
  assert.deepEqual(want, [12, 8, 13, 7]);                       // the held ones dropped from the list itself
  held.add(12);
  assert.equal(nextFrom(want, (r) => held.has(r), 100, PER_FETCH), 8 - PER_FETCH + 1);  // below: ends at round 8
  assert.equal(nextFrom([3], (r) => r === 4, 100, PER_FETCH), 0);  // not before round 0
  assert.equal(nextFrom([98, 97], () => false, 100, PER_FETCH), 100 - PER_FETCH);  // not past the end
  assert.equal(nextFrom([3], () => false, 5, PER_FETCH), 0);   // a trace shorter than a request
  assert.equal(nextFrom(wanted(10, 100, 6), () => true, 100, PER_FETCH), null);
});

// page.js's fetch sequence: one request at a time, each reading the shared `want` when it starts
const fetchAll = (cache, n, aims) => {
  let want = [];
  const requests = [];
  for (let step = 0; ; step++) {
    if (aims[step] !== undefined) {  // a round shown (held: the server's answer) meanwhile: the sequence re-aimed
      hold(cache, aims[step], {round: aims[step]});
      want = wanted(aims[step], n, WINDOW);
    }
    const from = nextFrom(want, (r) => cache.has(r), n, PER_FETCH);
    if (from === null) return requests;
    requests.push(from);
    for (let r = from; r < Math.min(n, from + PER_FETCH); r++) hold(cache, r, {round: r});
  }
};

test('a far jump while the sequence runs re-aims it: the rounds around the jump are fetched next', () => {
  const cache = new Map(), n = 2000;
  const requests = fetchAll(cache, n, {0: 10, 3: 1500});
  assert.deepEqual(requests.slice(0, 3), [11, 2, 19]);          // around round 10: after it, before it, after
  assert.equal(requests[3], 1501);                             // at once around the jump, not after round 10's window
  for (const r of wanted(1500, n, WINDOW)) assert.ok(cache.has(r), `round ${r} by the jump was never fetched`);
  assert.ok(requests.every((f) => f >= 0 && f + PER_FETCH <= n));
  assert.equal(requests.length, new Set(requests).size, 'a request asked twice');
});

test('the window around a jump takes one request per PER_FETCH rounds, on both sides of it', () => {
  const cache = new Map();
  const requests = fetchAll(cache, 2000, {0: 1000});
  assert.equal(requests.length, WINDOW / PER_FETCH);
  assert.deepEqual(requests.slice(0, 4), [1001, 1000 - PER_FETCH, 1001 + PER_FETCH, 1000 - 2 * PER_FETCH]);
  assert.equal(cache.size, WINDOW + 1);                         // the window and the shown round, nothing else
});

test('the cache stays bounded and drops the rounds held longest; a round shown again is kept', () => {
  const cache = new Map();
  for (let r = 0; r < 10; r++) hold(cache, r, {round: r});
  hold(cache, 0, {round: 0, again: true});                       // shown again: now the newest
  trim(cache, 6);
  assert.deepEqual([...cache.keys()], [5, 6, 7, 8, 9, 0]);
  assert.equal(cache.get(0).again, true);
  trim(cache, WINDOW + 16);
  assert.equal(cache.size, 6);                                  // under the bound: nothing dropped
  const big = new Map();
  fetchAll(big, 5000, {0: 0, 5: 4000});
  trim(big, WINDOW + 16);
  assert.equal(big.size, WINDOW + 16);
  assert.ok(big.has(4001) && !big.has(1), 'the newest (around the jump) kept, the oldest dropped');
});

test('drawn ahead: the nearest held rounds not drawn yet, at most `count` of them; parked: the farthest goes', () => {
  const keys = [3, 4, 5, 6, 7, 20];
  const drawn = new Set([6]);
  assert.equal(nextToDraw(keys, 5, (k) => drawn.has(k), 3), 4);   // 6 and 4 are nearest; 6 drawn already
  drawn.add(4);
  assert.equal(nextToDraw(keys, 5, (k) => drawn.has(k), 3), 3);   // then 3 (a tie with 7: the first held wins)
  drawn.add(3);
  assert.equal(nextToDraw(keys, 5, (k) => drawn.has(k), 3), undefined);  // its 3 nearest are drawn: 20 waits
  assert.equal(farthest([4, 6, 20, 3], 5), 20);
  assert.equal(farthest(new Map([[9, 1], [1, 1]]).keys(), 5), 9);   // a tie: the first
});

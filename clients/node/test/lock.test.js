// Drives the package against real flockd processes (see servers.js).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const net = require('node:net');
const { execFile } = require('node:child_process');
const Redis = require('ioredis');
const { FlockdClient, LostError, NotGrantedError } = require('..');
const { startFlockd, conn, status, startCluster, leader, sleep } = require('./servers');

function newClient(t, ...nodes) {
  const client = new FlockdClient(nodes.map((n) => n.addr));
  t.after(() => client.close());
  return client;
}

async function acquire(client, name, opts) {
  const lock = await client.acquire(name, opts);
  assert.ok(lock, `${name} was not granted`);
  return lock;
}

// Resolves with when `lost` fired, or fails after limitMs.
async function waitLost(lock, limitMs) {
  let timer;
  const fired = await Promise.race([
    lock.lost.then(() => Date.now()),
    new Promise((resolve) => { timer = setTimeout(() => resolve(null), limitMs); }),
  ]);
  clearTimeout(timer);
  assert.ok(fired, `lost did not fire within ${limitMs} ms`);
  return fired;
}

// Force-releases name from another connection; resolves when the test's own subscriber saw the
// event.
async function forceRelease(t, server, name) {
  const events = conn(t, server);
  const seen = new Promise((resolve) => events.on('message', (_ch, msg) => {
    if (msg.startsWith('forcereleased ')) resolve(Date.now());
  }));
  await events.subscribe(`__flock__:${name}`);
  assert.equal(await conn(t, server).call('FLOCK.FORCERELEASE', name), 1);
  let timer;
  const at = await Promise.race([seen, new Promise((resolve) => { timer = setTimeout(() => resolve(null), 10000); })]);
  clearTimeout(timer);
  assert.ok(at, 'no forcereleased event');
  return at;
}

test('grant and token', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const lock = await acquire(newClient(t, s), 'orders:1', { leaseMs: 10000 });
  assert.equal(typeof lock.token, 'bigint');
  assert.ok(lock.token > 0n);
  assert.equal(String(lock.token), String(await admin.call('FLOCK.TOKEN', 'orders:1')));
  assert.equal(String((await status(admin, 'orders:1')).token), String(lock.token));
  assert.equal(lock.isLost(), false);
  // Held: a second acquire without a wait is not granted, and that is no error.
  assert.equal(await newClient(t, s).acquire('orders:1'), null);
  let lostFired = false;
  lock.on('lost', () => { lostFired = true; });
  assert.equal(await lock.release(), true);
  assert.equal(await admin.call('FLOCK.TTL', 'orders:1'), -2);
  assert.equal(lock.signal.aborted, true);
  await sleep(100);
  assert.equal(lostFired, false, 'lost fired on a release');
});

test('a second client waits and gets a higher token', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const first = await acquire(newClient(t, s), 'orders:2', { leaseMs: 10000 });
  let done = false;
  const second = newClient(t, s).acquire('orders:2', { leaseMs: 10000, waitMs: 20000 })
    .finally(() => { done = true; });
  for (let i = 0; ; i++) {
    if (Number((await status(admin, 'orders:2')).waiters) === 1) break;
    assert.ok(i < 200, 'the second client never queued (FLOCK.STATUS waiters 1)');
    await sleep(25);
  }
  await sleep(300);
  assert.equal(done, false, 'the second acquire returned while the lock was held');
  const released = Date.now();
  await first.release();
  const lock = await second;
  assert.ok(lock, 'the waiting client was not granted');
  assert.ok(lock.token > first.token, `second token ${lock.token} not above the first ${first.token}`);
  t.diagnostic(`tokens ${first.token} then ${lock.token}; the waiter got it ${Date.now() - released} ms after the release`);
  await lock.release();
});

// Issue 35: validity was counted from the blocking acquire's send, so a grant after a wait longer
// than the lease was reported lost at once. Now such a grant is renewed before acquire resolves.
test('a lock granted after a wait longer than its lease is kept', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const holder = await admin.call('FLOCK.ACQUIRE', 'waited', '20000');
  const releaser = setTimeout(() => void admin.call('FLOCK.RELEASE', 'waited', holder).catch(() => {}), 3000);
  t.after(() => clearTimeout(releaser));
  const started = Date.now();
  const lock = await acquire(newClient(t, s), 'waited', { leaseMs: 1500, waitMs: 6000 });
  assert.ok(Date.now() - started > 1500, 'it did not wait longer than its lease');
  let lostWhy;
  lock.on('lost', (e) => { lostWhy = e; });
  assert.equal(lock.isLost(), false, `reported lost at grant: ${lock.error?.message}`);
  await sleep(2 * 500 + 600); // two renewal periods and some slack
  assert.equal(lostWhy, undefined, `reported lost: ${lostWhy?.message}`);
  assert.equal(lock.isLost(), false);
  assert.ok(Number(await admin.call('FLOCK.TTL', 'waited')) > 0);
  const st = await status(admin, 'waited');
  assert.equal(String(st.locked), '1');
  assert.equal(String(st.token), String(lock.token));
  assert.equal(await lock.release(), true);
});

// The holding is gone when the renewal after a long wait arrives (here: removed just before it
// is sent, as if the lease ran out between the grant and its reply): not granted, never a lock
// that is lost already.
test('a late grant whose lease ran out before the renewal is not granted', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const holder = await admin.call('FLOCK.ACQUIRE', 'late', '20000');
  const releaser = setTimeout(() => void admin.call('FLOCK.RELEASE', 'late', holder).catch(() => {}), 1000);
  t.after(() => clearTimeout(releaser));
  const call = Redis.prototype.call;
  Redis.prototype.call = async function (cmd, ...args) {
    if (cmd === 'FLOCK.RENEW' && this !== admin) await admin.call('FLOCK.FORCERELEASE', 'late');
    return call.call(this, cmd, ...args);
  };
  try {
    assert.equal(await newClient(t, s).acquire('late', { leaseMs: 600, waitMs: 5000 }), null);
  } finally {
    Redis.prototype.call = call;
  }
  assert.equal(Number(await admin.call('FLOCK.TTL', 'late')), -2);
});

test('a renewal keeps a 1 s lease alive for 5 s', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const events = conn(t, s);
  let renewals = 0;
  events.on('message', (_ch, msg) => { if (msg.startsWith('renewed ')) renewals++; });
  await events.subscribe('__flock__:orders:3');
  const lock = await acquire(newClient(t, s), 'orders:3', { leaseMs: 1000 });
  let lost = null;
  lock.lost.then((e) => { lost = e; });
  await sleep(5000);
  assert.equal(lost, null, `lost within 5 s: ${lost}`);
  assert.equal(lock.isLost(), false);
  assert.equal(String((await status(admin, 'orders:3')).token), String(lock.token));
  assert.equal(await lock.fenceSet('res:3', 'still ours'), true);
  // At a third of the lease: about 15 in 5 s; a noisy machine may delay a few.
  assert.ok(renewals >= 8, `${renewals} renewals seen in 5 s, want about 15`);
  t.diagnostic(`${renewals} renewals in 5 s of a 1 s lease`);
  await lock.release();
});

test('a force-release fires lost within 100 ms of the event', async (t) => {
  const s = await startFlockd(t);
  const lock = await acquire(newClient(t, s), 'orders:4', { leaseMs: 30000 });
  let emitted = null;
  lock.on('lost', (e) => { emitted = e; });
  const event = await forceRelease(t, s, 'orders:4');
  const lost = await waitLost(lock, 5000);
  // With a 30 s lease neither a renewal (every 10 s) nor the clock (28 s) could tell this soon.
  assert.ok(lost - event <= 100, `lost fired ${lost - event} ms after the event`);
  t.diagnostic(`lost fired ${lost - event} ms after the test's subscriber saw the event`);
  const why = await lock.lost;
  assert.ok(why instanceof LostError);
  assert.equal(why.reason, 'ForceReleased');
  assert.equal(emitted, why, "the 'lost' event carries the same error");
  assert.equal(lock.signal.aborted, true);
});

test('without events a force-release is found within one renewal interval', async (t) => {
  const s = await startFlockd(t);
  const leaseMs = 3000;
  const lock = await acquire(newClient(t, s), 'orders:5', { leaseMs, noEvents: true });
  const event = await forceRelease(t, s, 'orders:5');
  const lost = await waitLost(lock, 5000);
  assert.equal((await lock.lost).reason, 'RenewRefused');
  // Within one renewal interval (a third of the lease), with slack for a busy machine.
  assert.ok(lost - event <= leaseMs / 3 + 1000, `lost fired ${lost - event} ms after the force-release`);
  t.diagnostic(`without events lost fired ${lost - event} ms after the force-release (interval ${leaseMs / 3} ms)`);
});

test('kill -9 of the server fires lost before the lease ends', async (t) => {
  const s = await startFlockd(t);
  const leaseMs = 3000;
  const before = Date.now(); // the server's lease runs from after this
  const lock = await acquire(newClient(t, s), 'orders:6', { leaseMs });
  await s.kill();
  const lost = await waitLost(lock, 2 * leaseMs);
  assert.ok(lost < before + leaseMs, `lost fired ${lost - before} ms after the acquire was sent`);
  const why = await lock.lost;
  assert.equal(why.reason, 'LeaseRunningOut');
  t.diagnostic(`lost fired ${lost - before} ms after the acquire (lease ${leaseMs} ms): ${why.message}`);
  await assert.rejects(lock.fenceSet('res:6', 'late'), LostError);
});

test('after the event loop was blocked past the lease, the lock knows before any timer ran', async (t) => {
  const s = await startFlockd(t);
  const lock = await acquire(newClient(t, s), 'orders:14', { leaseMs: 1000 });
  // As in a long synchronous stretch (or a paused process): no renewal can run meanwhile.
  const until = Date.now() + 1200;
  while (Date.now() < until) { /* busy */ }
  assert.equal(lock.isLost(), true, 'the lock still counts as held after its lease');
  assert.equal(lock.error.reason, 'LeaseRunningOut');
  await assert.rejects(lock.fenceSet('res:14', 'late'), LostError);
  assert.equal(await conn(t, s).call('FENCE.GET', 'res:14'), null);
});

test('a session lock is lost with its connection', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const lock = await acquire(newClient(t, s), 'orders:11', { leaseMs: 3000, session: true });
  const holders = await admin.call('FLOCK.HOLDERS', 'orders:11');
  assert.equal(holders.length, 1);
  const fields = holders[0].map(String);
  assert.equal(fields[fields.indexOf('session') + 1], '1', `FLOCK.HOLDERS: ${fields}`);
  await s.kill();
  await waitLost(lock, 3000);
  assert.equal((await lock.lost).reason, 'ConnectionLost');
});

test('killing the leader of a 3-node cluster does not lose the lock', async (t) => {
  const nodes = await startCluster(t);
  const old = await leader(nodes);
  // The leader first, so the lock's connections go to it and must move.
  const ordered = [nodes[old], nodes[(old + 1) % 3], nodes[(old + 2) % 3]];
  const leaseMs = 6000;
  const lock = await acquire(newClient(t, ...ordered), 'orders:7', { leaseMs });
  let lost = null;
  lock.lost.then((e) => { lost = e; });
  await sleep(500);
  await ordered[0].kill();
  await sleep(2 * leaseMs);
  assert.equal(lost, null, `lost after the leader's kill: ${lost}`);
  const now = await leader(nodes);
  assert.notEqual(now, old, 'the killed node is still the leader');
  assert.equal(String((await status(conn(t, nodes[now]), 'orders:7')).token), String(lock.token));
  assert.equal(await lock.fenceSet('res:7', 'after the failover'), true);
  t.diagnostic(`held for ${2 * leaseMs} ms after the leader (node ${old + 1}) was killed; node ${now + 1} leads now`);
  // The subscription died with the old leader and was made again elsewhere: a force-release is
  // told by the event (a renewal would say RenewRefused).
  const event = await forceRelease(t, nodes[now], 'orders:7');
  const at = await waitLost(lock, 5000);
  assert.equal((await lock.lost).reason, 'ForceReleased');
  t.diagnostic(`after the failover lost fired ${at - event} ms after the force-release event`);
});

test('through ioredis Sentinel support, across a leader kill', async (t) => {
  const nodes = await startCluster(t);
  const old = await leader(nodes);
  const client = new FlockdClient([], {
    sentinels: nodes.map((n) => ({ host: '127.0.0.1', port: n.port() })),
    name: 'flockd',
  });
  t.after(() => client.close());
  const leaseMs = 6000;
  const lock = await acquire(client, 'orders:12', { leaseMs });
  let lost = null;
  lock.lost.then((e) => { lost = e; });
  await sleep(500);
  await nodes[old].kill();
  await sleep(2 * leaseMs);
  assert.equal(lost, null, `lost after the leader's kill: ${lost}`);
  const now = await leader(nodes);
  assert.equal(String((await status(conn(t, nodes[now]), 'orders:12')).token), String(lock.token));
  assert.equal(await lock.fenceSet('res:12', 'through the sentinels'), true);
  assert.equal(await lock.release(), true);
  // A new acquire finds the new leader through the sentinels.
  const next = await acquire(client, 'orders:12', { leaseMs });
  assert.ok(next.token > lock.token);
  await next.release();
});

test('a fenced write after the loss sends nothing', async (t) => {
  const s = await startFlockd(t);
  // MONITOR from a connection that is already ready: ioredis enters its monitoring state a
  // microtask after MONITOR's +OK, so a feed line read in the same chunk as the +OK (here, the
  // ready check of a connection still starting) hit its command queue ("Command queue state
  // error"; 3 of 300 rounds in a loop, 0 of 300 with the connection ready first).
  const admin = conn(t, s);
  await admin.ping();
  const monitor = await admin.monitor();
  t.after(() => monitor.disconnect());
  const seen = [];
  monitor.on('monitor', (_time, args) => seen.push(args.map(String)));
  const lock = await acquire(newClient(t, s), 'orders:8', { leaseMs: 30000 });
  assert.equal(await lock.fenceSet('res:8', 'before'), true);
  await forceRelease(t, s, 'orders:8');
  await waitLost(lock, 5000);
  await assert.rejects(lock.fenceSet('res:8', 'after the loss'), LostError);
  // A marker after it: once MONITOR shows the marker, it has shown all that came before.
  await conn(t, s).call('ECHO', 'marker-8');
  for (let i = 0; i < 200 && !seen.some((a) => a.includes('marker-8')); i++) await sleep(25);
  assert.ok(seen.some((a) => a.includes('marker-8')), 'MONITOR never showed the marker');
  const fenceSets = seen.filter((a) => a[0].toUpperCase() === 'FENCE.SET');
  assert.deepEqual(fenceSets.map((a) => a[3]), ['before'], `MONITOR saw ${JSON.stringify(fenceSets)}`);
  assert.equal(await conn(t, s).call('FENCE.GET', 'res:8'), 'before');
});

test('withLock releases after the function, and rejects when not granted', async (t) => {
  const s = await startFlockd(t);
  const admin = conn(t, s);
  const client = newClient(t, s);
  const token = await client.withLock('orders:13', { leaseMs: 10000 }, async (lock) => {
    await assert.rejects(client.withLock('orders:13', {}, () => 'never'), NotGrantedError);
    return lock.token;
  });
  assert.ok(token > 0n);
  assert.equal(await admin.call('FLOCK.TTL', 'orders:13'), -2);
});

// The README shows example/example.js as it is, and it runs against a real server.
test('the README example runs as written', async (t) => {
  const root = path.join(__dirname, '..');
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const source = fs.readFileSync(path.join(root, 'example', 'example.js'), 'utf8');
  assert.ok(readme.includes('```js\n' + source + '```\n'), 'README.md does not show example/example.js as it is');
  const s = await startFlockd(t);
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join('example', 'example.js')],
      { cwd: root, env: { ...process.env, FLOCKD_URL: `redis://${s.addr}` }, timeout: 30000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stdout}${stderr}`)) : resolve(stdout + stderr)));
  });
  t.diagnostic(`the README's example:\n${out}`);
  for (const want of ['acquired orders:42 with token 1\n', 'stored: true\n', 'released: true\n']) {
    assert.ok(out.includes(want), `no ${JSON.stringify(want)} in the example's output`);
  }
  assert.equal(await conn(t, s).call('FENCE.GET', 'res:orders:42'), 'written by token 1');
});

// Issue 35: without FLOCKD_URL the example failed with `TypeError: Cannot read properties of
// undefined`; it now reaches flockd at its default address, 127.0.0.1:6390.
test('the example without FLOCKD_URL finds flockd at its default address', async (t) => {
  const free = await new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(6390, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
  if (!free) {
    t.skip('127.0.0.1:6390 is in use here, so the default address cannot be checked');
    return;
  }
  await startFlockd(t, '--port', '6390');
  const root = path.join(__dirname, '..');
  const env = { ...process.env };
  delete env.FLOCKD_URL;
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join('example', 'example.js')], { cwd: root, env, timeout: 30000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stdout}${stderr}`)) : resolve(stdout + stderr)));
  });
  assert.ok(out.includes('acquired orders:42 with token 1\n'), out);
});

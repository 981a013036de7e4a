// A fenced worker for flockd with node-redis (the `redis` npm package, 5.x/6.x): acquire a lock
// (waiting in line if it is held), do the work guarded by the fencing token, release. Exits
// non-zero on anything unexpected.
//
//   FLOCKD_URL=redis://127.0.0.1:6390 node fenced_worker_node_redis.js
//
// sendCommand takes strings only, and replies integers as JavaScript numbers; tokens are exact
// up to 2^53 this way. Past that, ask for strings: client.withTypeMapping({ [RESP_TYPES.NUMBER]: String }).
'use strict';
const { createClient } = require('redis');

const LOCK = 'orders:42';
const RESOURCE = 'res:orders:42';
const LEASE_MS = 10000;
const WAIT_MS = 5000;

async function main() {
  const client = createClient({
    url: process.env.FLOCKD_URL || 'redis://127.0.0.1:6390',
    // No socketTimeout (the default): a blocked acquire is silent until WAIT ends. If you set
    // one, make it exceed WAIT. Don't reconnect in a script: a command in flight when the
    // connection drops is failed, never resent.
    socket: { reconnectStrategy: false },
  });
  client.on('error', (err) => console.error('client error:', err.message));
  await client.connect();
  try {
    // Blocks up to WAIT_MS; null means the lock stayed busy.
    const token = await client.sendCommand(['FLOCK.ACQUIRE', LOCK, String(LEASE_MS), 'WAIT', String(WAIT_MS)]);
    if (token === null) {
      console.log('lock busy, giving up');
      return 1;
    }
    if (!Number.isSafeInteger(token) || token < 1) throw new Error(`unexpected token ${token}`);
    console.log(`acquired ${LOCK} with token ${token}`);
    let code = 0;
    try {
      // Every write to the protected resource carries the token. 0 = a newer holder wrote
      // already: we lost the lock and must stop.
      const value = `written by token ${token}`;
      const stored = await client.sendCommand(['FENCE.SET', RESOURCE, String(token), value]);
      if (stored !== 1) {
        console.log('fenced out: a newer holder exists, stopping');
        code = 2;
      } else {
        // Long work: extend the lease before it runs out (NOTOWNER if it already did).
        await client.sendCommand(['FLOCK.RENEW', LOCK, String(token), String(LEASE_MS)]);
        const got = await client.sendCommand(['FENCE.GET', RESOURCE]);
        if (got !== value) throw new Error(`fenced register holds ${got}, expected ${value}`);
        console.log('stored:', got);
      }
    } finally {
      try {
        const free = await client.sendCommand(['FLOCK.RELEASE', LOCK, String(token)]);
        console.log(`released (free=${free})`);
      } catch (err) { // NOTOWNER: the lease ran out while we worked
        console.log('release failed:', err.message);
        if (code === 0) code = 3;
      }
    }
    return code;
  } finally {
    await client.close();
  }
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(1); });

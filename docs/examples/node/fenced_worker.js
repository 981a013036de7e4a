// A fenced worker for flockd with ioredis (6.x): acquire a lock (waiting in line if it is held),
// do the work guarded by the fencing token, release. Exits non-zero on anything unexpected.
//
//   FLOCKD_URL=redis://127.0.0.1:6390 node fenced_worker.js
//
// With `stringNumbers: true` integer replies arrive as strings ('7', not 7): tokens stay exact
// beyond 2^53, so compare replies as strings and pass the token back as it came.
'use strict';
const Redis = require('ioredis');

const LOCK = 'orders:42';
const RESOURCE = 'res:orders:42';
const LEASE_MS = 10000;
const WAIT_MS = 5000;

async function main() {
  const redis = new Redis(process.env.FLOCKD_URL || 'redis://127.0.0.1:6390', {
    stringNumbers: true, // tokens are up to 2^63-1
    // A command timeout abandons the call but not the server's grant: keep it well above WAIT.
    commandTimeout: WAIT_MS + 5000,
    // Do not queue or resend a lock command over a new connection after a disconnect: the
    // first one may have been granted already.
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
  });
  try {
    // Blocks up to WAIT_MS; null means the lock stayed busy.
    const token = await redis.call('FLOCK.ACQUIRE', LOCK, LEASE_MS, 'WAIT', WAIT_MS);
    if (token === null) {
      console.log('lock busy, giving up');
      return 1;
    }
    if (!/^[1-9][0-9]*$/.test(String(token))) throw new Error(`unexpected token ${token}`);
    console.log(`acquired ${LOCK} with token ${token}`);
    let code = 0;
    try {
      // Every write to the protected resource carries the token. 0 = a newer holder wrote
      // already: we lost the lock and must stop.
      const value = `written by token ${token}`;
      const stored = await redis.call('FENCE.SET', RESOURCE, token, value);
      if (String(stored) !== '1') {
        console.log('fenced out: a newer holder exists, stopping');
        code = 2;
      } else {
        await redis.call('FLOCK.RENEW', LOCK, token, LEASE_MS); // long work: extend the lease
        const got = await redis.call('FENCE.GET', RESOURCE);
        if (got !== value) throw new Error(`fenced register holds ${got}, expected ${value}`);
        console.log('stored:', got);
      }
    } finally {
      try {
        const free = await redis.call('FLOCK.RELEASE', LOCK, token);
        console.log(`released (free=${free})`);
      } catch (err) { // NOTOWNER: the lease ran out while we worked
        console.log('release failed:', err.message);
        if (code === 0) code = 3;
      }
    }
    return code;
  } finally {
    redis.disconnect();
  }
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(1); });

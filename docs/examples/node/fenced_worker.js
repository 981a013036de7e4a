// A fenced worker for flockd with ioredis: acquire a lock (waiting in line if it is held), do the
// work guarded by the fencing token, release.
//
//   FLOCKD_ADDR=127.0.0.1:6390 node fenced_worker.js
'use strict';
const Redis = require('ioredis');

const LOCK = 'orders:42';
const RESOURCE = 'res:orders:42';
const LEASE_MS = 10000;
const WAIT_MS = 5000;

async function main() {
  const [host, port] = (process.env.FLOCKD_ADDR || '127.0.0.1:6390').split(':');
  const redis = new Redis({ host, port: Number(port) });
  try {
    // Blocks up to WAIT_MS; null means the lock stayed busy.
    const token = await redis.call('FLOCK.ACQUIRE', LOCK, LEASE_MS, 'WAIT', WAIT_MS);
    if (token === null) {
      console.log('lock busy, giving up');
      return 1;
    }
    console.log(`acquired ${LOCK} with token ${token}`);
    try {
      const stored = await redis.call('FENCE.SET', RESOURCE, token, `written by token ${token}`);
      if (stored !== 1) {
        console.log('fenced out: a newer holder exists, stopping');
        return 2;
      }
      await redis.call('FLOCK.RENEW', LOCK, token, LEASE_MS); // long work: extend the lease
      console.log('stored:', await redis.call('FENCE.GET', RESOURCE));
    } finally {
      try {
        await redis.call('FLOCK.RELEASE', LOCK, token);
      } catch (err) { // NOTOWNER: the lease ran out while we worked
        console.log('release failed:', err.message);
      }
    }
    return 0;
  } finally {
    redis.disconnect();
  }
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(1); });

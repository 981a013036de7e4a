const { FlockdClient } = require('flockd-client');

async function main() {
  // FLOCKD_URL, else flockd's default address
  const client = new FlockdClient([process.env.FLOCKD_URL || 'redis://127.0.0.1:6390']);
  const lock = await client.acquire('orders:42', { leaseMs: 10000, waitMs: 5000 });
  if (lock === null) {
    console.error('busy: not granted within 5 s');
    process.exit(1);
  }
  console.log(`acquired orders:42 with token ${lock.token}`);
  lock.on('lost', (why) => console.error(`stop: ${why.message}`)); // also: await lock.lost

  // Work that checks lock.signal (aborted if the lock is lost), then a fenced write.
  await new Promise((resolve) => setTimeout(resolve, 100));
  // Rejects with a LostError, sending nothing, once the lock is lost.
  const stored = await lock.fenceSet('res:orders:42', `written by token ${lock.token}`);
  console.log('stored:', stored); // false: a newer holder wrote, or this holding is gone

  console.log('released:', await lock.release());
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

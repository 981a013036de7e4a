// ioredis in sentinel mode against a flockd cluster (driven by test_sentinel_clients.py):
// acquire/release cycles through the master ioredis finds via the nodes as its sentinels;
// prints "done N" after N cycles and waits for a line on stdin (the test kills the leader
// first); at the end it prints one JSON line: cycles done, errors that reached this code (with
// their cycle and ms after the kill),
// whether tokens increased, the master it ended on, and the +switch-master messages a
// subscriber on WATCHER_PORT got.
// Usage: node ioredis_failover.js '[port, ...]' CYCLES KILL_AFTER WATCHER_PORT
const path = require('path');
const Redis = require(path.join(__dirname, '..', 'examples', 'node_modules', 'ioredis'));

const ports = JSON.parse(process.argv[2]);
const cycles = Number(process.argv[3]);
const killAfter = Number(process.argv[4]);
const watcherPort = Number(process.argv[5]);

async function main() {
  // ioredis's own retry, as documented: it reconnects through the sentinels and sends the
  // commands queued meanwhile again. failoverDetector stays off: with it, in 5 of 42
  // leader kills, the client ended for good (every later command "Connection is closed.");
  // without it, 0 of 16 (docs/cluster.md).
  const client = new Redis({
    sentinels: ports.map((port) => ({ host: '127.0.0.1', port })),
    name: 'flockd',
    failoverDetector: false,
    sentinelRetryStrategy: (times) => Math.min(50 * times, 500),
    retryStrategy: (times) => Math.min(50 * times, 500),
    maxRetriesPerRequest: 50,
  });
  // A plain subscriber on a node that stays up sees the leader change announced.
  const switches = [];
  const subscriber = new Redis({ host: '127.0.0.1', port: watcherPort });
  await subscriber.subscribe('+switch-master');
  subscriber.on('message', (channel, message) => { switches.push(message); });
  const errors = [];
  const tokens = [];
  const started = Date.now();
  let resumed = started;
  for (let n = 0; n < cycles && Date.now() - started < 60000; n++) {
    if (n === killAfter) {
      // the test kills the leader, then says go
      process.stdout.write(`done ${n}\n`);
      await new Promise((resolve) => process.stdin.once('data', resolve));
      process.stdin.pause();
      resumed = Date.now();
    }
    try {
      const token = await client.call('FLOCK.ACQUIRE', 'js:sentinel', '10000');
      await client.call('FLOCK.RELEASE', 'js:sentinel', String(token));
      tokens.push(Number(token));
    } catch (e) {
      // With the cycle and the time since the kill: the test tells a failover's errors from
      // any others.
      errors.push({ error: String(e), cycle: n, afterKillMs: n >= killAfter ? Date.now() - resumed : -1 });
      if (errors.length > 50) break;
    }
  }
  // The subscriber's message may come a little after the first command on the new master.
  for (let i = 0; i < 50 && switches.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  let addr = null;
  for (const port of ports) {
    const s = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null });
    s.on('error', () => {});
    try {
      await s.connect();
      addr = await s.call('SENTINEL', 'get-master-addr-by-name', 'flockd');
    } catch (e) {
      // that node is the one killed
    }
    s.disconnect();
    if (addr) break;
  }
  const increasing = tokens.every((t, i) => i === 0 || tokens[i - 1] < t);
  process.stdout.write(JSON.stringify({
    cycles: tokens.length,
    errors,
    increasing,
    master: addr ? [addr[0], Number(addr[1])] : null,
    switches,
  }) + '\n');
  client.disconnect();
  subscriber.disconnect();
}

main().catch((e) => { console.error(e); process.exit(1); });

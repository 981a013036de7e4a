// A Redis Cluster client with its defaults against a flockd cluster (driven by
// test_redis_cluster_clients.py): acquire, renew and release for each name, then "cycled N" and
// a wait for a line on stdin (the test kills the leader meanwhile); then acquires until one
// succeeds (at most 20 s) and a cycle of the first 32 names again (each retried up to the same
// 20 s). The last line printed is one
// JSON object: the library and its version, the ms from the go to the first success, the errors
// that reached this code before it (with their ms), and the lowest token granted after it.
// Usage: node redis_cluster_clients.js ioredis|node-redis '[port, ...]' '[name, ...]'
const path = require('path');

const modules = path.join(__dirname, '..', 'examples', 'node_modules');
const library = process.argv[2];
const ports = JSON.parse(process.argv[3]);
const names = JSON.parse(process.argv[4]);

async function open() {
  if (library === 'ioredis') {
    const Redis = require(path.join(modules, 'ioredis'));
    const client = new Redis.Cluster(ports.map((port) => ({ host: '127.0.0.1', port })));
    return {
      version: `ioredis ${require(path.join(modules, 'ioredis', 'package.json')).version}`,
      send: (args) => client.call(...args),
      close: () => client.disconnect(),
    };
  }
  const { createCluster } = require(path.join(modules, 'redis'));
  const client = createCluster({
    rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
  });
  // A node's connection errors are reported on this event as well as to the failing command.
  client.on('error', () => {});
  await client.connect();
  return {
    version: `node-redis ${require(path.join(modules, 'redis', 'package.json')).version}`,
    // The first key routes the command: node-redis's way for commands it does not know.
    send: (args) => client.sendCommand(args[1], false, args),
    close: () => client.destroy(),
  };
}

// No command may hang the test: each is given 5 s.
function bounded(promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no reply within 5 s')), 5000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function cycle(client, name) {
  const token = Number(await bounded(client.send(['FLOCK.ACQUIRE', name, '30000'])));
  if (!(token >= 1)) throw new Error(`acquire ${name}: ${token}`);
  const renewed = Number(await bounded(client.send(['FLOCK.RENEW', name, String(token), '30000'])));
  if (renewed !== 1) throw new Error(`renew ${name}: ${renewed}`);
  const released = Number(await bounded(client.send(['FLOCK.RELEASE', name, String(token)])));
  if (released !== 1) throw new Error(`release ${name}: ${released}`);
  return token;
}

async function main() {
  const client = await open();
  for (const name of names) await cycle(client, name);
  process.stdout.write(`cycled ${names.length}\n`);
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.pause();
  const go = Date.now();
  const errors = [];
  let firstOkMs = null;
  for (let n = 1; Date.now() - go < 20000; n++) {
    try {
      await bounded(client.send(['FLOCK.ACQUIRE', `after-kill:${n}`, '30000']));
      firstOkMs = Date.now() - go;
      break;
    } catch (e) {
      errors.push({ ms: Date.now() - go, error: String(e) });
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  // Then a cycle of each of the first 32 names, each tried again until 20 s after the go: with
  // several groups (cluster-groups) the first success may come from a group the kill did not
  // touch, while the killed node's groups still wait for the client's refresh.
  let tokensAfter = null;
  if (firstOkMs !== null) {
    for (const name of names.slice(0, 32)) {
      let token = null;
      while (token === null) {
        try {
          token = await cycle(client, name);
        } catch (e) {
          if (Date.now() - go > 20000) throw e;
          errors.push({ ms: Date.now() - go, error: String(e) });
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      tokensAfter = tokensAfter === null ? token : Math.min(tokensAfter, token);
    }
  }
  console.log(JSON.stringify({ version: client.version, firstOkMs, errors: errors.slice(0, 5).concat(errors.length > 5 ? [{ more: errors.length - 5 }] : []), tokensAfter }));
  client.close();
  process.exit(0);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});

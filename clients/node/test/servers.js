// Starts real flockd processes for the tests (FLOCKD_BIN, else the repository's
// target/debug/flockd) on free loopback ports, and stops each by its pid.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');

const repoRoot = path.resolve(__dirname, '..', '..', '..');

function flockdBin() {
  let bin = process.env.FLOCKD_BIN || 'target/debug/flockd';
  // CI gives it relative to the repository's root.
  if (!path.isAbsolute(bin)) bin = path.join(repoRoot, bin);
  if (!fs.existsSync(bin)) throw new Error(`no flockd binary at ${bin}: cargo build -p flockd, or set FLOCKD_BIN`);
  return bin;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const READY = /ready to accept connections on (127\.0\.0\.1:\d+)/;

// startFlockd(t, ...args): flockd with args (plus --bind, --dir and, unless given, --port 0),
// once it logged its "ready" line; killed by pid when the test ends.
async function startFlockd(t, ...args) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flockd-node-'));
  const full = ['--bind', '127.0.0.1', '--dir', path.join(dir, 'data'), ...args];
  if (!args.includes('--port')) full.push('--port', '0');
  const child = spawn(flockdBin(), full, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FLOCKD_LOG_LEVEL: 'info,openraft=error' },
  });
  const server = { child, addr: '', log: '', exited: false, dir };
  const exited = new Promise((resolve) => child.once('exit', () => { server.exited = true; resolve(); }));
  server.exitedPromise = exited;
  const onData = (chunk) => { server.log = (server.log + chunk).slice(-65536); };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  t.after(async () => { await server.kill(); fs.rmSync(dir, { recursive: true, force: true }); });
  server.kill = async () => {
    if (server.exited) return;
    process.kill(child.pid, 'SIGKILL');
    await Promise.race([exited, sleep(10000)]);
  };
  server.port = () => Number(server.addr.split(':')[1]);
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const m = READY.exec(server.log);
    if (m) { server.addr = m[1]; return server; }
    if (server.exited) throw new Error(`flockd exited during start-up:\n${server.log}`);
    await sleep(20);
  }
  throw new Error(`flockd never became ready:\n${server.log}`);
}

// A plain ioredis connection to the server, closed when the test ends.
function conn(t, server) {
  const [host, port] = server.addr.split(':');
  const c = new Redis({ host, port: Number(port), maxRetriesPerRequest: 0, retryStrategy: () => null, commandTimeout: 10000 });
  c.on('error', () => {});
  t.after(() => c.disconnect());
  return c;
}

// FLOCK.STATUS as an object of its fields.
async function status(c, name) {
  const values = await c.call('FLOCK.STATUS', name);
  const m = {};
  for (let i = 0; i + 1 < values.length; i += 2) m[String(values[i])] = values[i + 1];
  return m;
}

async function freePorts(n) {
  const servers = [];
  const ports = [];
  for (let i = 0; i < n; i++) {
    const s = net.createServer();
    await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
    servers.push(s);
    ports.push(s.address().port);
  }
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

// A 3-node cluster; returns its nodes.
async function startCluster(t) {
  const ports = await freePorts(6);
  const peers = [0, 1, 2].map((i) => `${i + 1}=127.0.0.1:${ports[i]}@${ports[3 + i]}`).join(',');
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    nodes.push(await startFlockd(t, '--port', String(ports[i]), '--node-id', String(i + 1), '--cluster-peers', peers));
  }
  return nodes;
}

async function raftLeaderId(server) {
  const [host, port] = server.addr.split(':');
  const c = new Redis({ host, port: Number(port), maxRetriesPerRequest: 0, retryStrategy: () => null, commandTimeout: 2000, connectTimeout: 2000 });
  c.on('error', () => {});
  try {
    const info = await c.info('replication');
    const m = /raft_leader_id:(\S+)/.exec(info);
    return m ? m[1] : 'none';
  } catch {
    return 'unreachable';
  } finally {
    c.disconnect();
  }
}

// The index of the node every live node names as the leader.
async function leader(nodes) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const seen = new Set();
    for (const n of nodes) if (!n.exited) seen.add(await raftLeaderId(n));
    if (seen.size === 1) {
      const id = Number([...seen][0]);
      if (id > 0) return id - 1;
    }
    await sleep(50);
  }
  throw new Error('the nodes never agreed on a leader');
}

module.exports = { startFlockd, conn, status, startCluster, leader, sleep, repoRoot };

"""What the cluster-client suites (Sentinel, Redis Cluster) share: a 3-node flockd cluster on
loopback ports (every process stopped by its pid), and the redis-py under test named in the
report header: the suites run whatever `pip install -U redis` gave (.ci/run upgrades it), never a
pinned one."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.abspath(os.environ.get("FLOCKD_BIN", os.path.join(ROOT, "target/debug/flockd")))


def pytest_report_header(config):
    return f"redis-py {redis.__version__} ({redis.__file__})"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    def __init__(self, size=3, extra_args=()):
        self.root = tempfile.mkdtemp(prefix="flockd-sentinel-")
        ports = free_ports(2 * size)
        self.ports, self.cports = ports[:size], ports[size:]
        peers = ",".join(f"{i + 1}=127.0.0.1:{self.ports[i]}@{self.cports[i]}" for i in range(size))
        self.procs = []
        for i in range(size):
            log = open(os.path.join(self.root, f"node{i}.log"), "w")
            self.procs.append(subprocess.Popen(
                [BIN, "--bind", "127.0.0.1", "--port", str(self.ports[i]), "--dir",
                 os.path.join(self.root, f"node{i}"), "--node-id", str(i + 1),
                 "--cluster-peers", peers, *extra_args],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                env=dict(os.environ, FLOCKD_LOG_LEVEL="info,openraft=error")))

    def leader(self, timeout=20.0):
        """The index of the node every running node names as the leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = set()
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    continue
                try:
                    info = redis.Redis(port=self.ports[i], socket_timeout=1).info("replication")
                    seen.add(info.get("raft_leader_id"))
                except redis.RedisError:
                    seen.add(None)
            if len(seen) == 1 and None not in seen and 0 not in seen:
                return seen.pop() - 1
            time.sleep(0.05)
        raise AssertionError("no leader agreed on")

    def forwarded(self):
        """Commands the running nodes forwarded to a leader, summed (INFO replication)."""
        total = 0
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                info = redis.Redis(port=self.ports[i], socket_timeout=2).info("replication")
                total += int(info.get("raft_forwarded_commands", 0))
        return total

    def kill(self, i):
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait(timeout=10)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def started(extra_args=()):
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"no flockd at {BIN}: cargo build first, or set FLOCKD_BIN")
    c = Cluster(extra_args=extra_args)
    try:
        c.leader()
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster():
    yield from started()


@pytest.fixture
def redirecting_cluster():
    """Nodes that answer -MOVED for a name they do not lead (`cluster-redirect yes`)."""
    yield from started(("--cluster-redirect", "yes"))

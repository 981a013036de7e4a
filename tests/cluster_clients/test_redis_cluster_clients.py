"""Redis Cluster clients, each with its defaults, against a 3-node flockd cluster (one Raft group,
so one shard of all 16384 slots, whose master is the leader): they read CLUSTER SLOTS / SHARDS,
send acquire, renew and release for names spread over every slot range, and carry on after a
kill -9 of the leader once their own refresh finds the new one.

    FLOCKD_BIN=target/debug/flockd python3 -m pytest -q -s tests/cluster_clients/test_redis_cluster_clients.py

redis-py's RedisCluster here; ioredis's Cluster and node-redis's createCluster through
redis_cluster_clients.js, with the libraries of tests/examples/node_modules (`npm ci --prefix
tests/examples`): without node or them those tests are skipped, and with CI=true a skip is a
failure. Figures (commands forwarded, time to the first success after the kill, errors that
reached the application) are printed with -s.
"""

import json
import os
import shutil
import subprocess
import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from conftest import HERE, ROOT

# 128 names; their slots fall in each of 16 equal ranges of the slot space (checked below).
NAMES = [f"order:{i}" for i in range(128)]
RANGES = 16


def test_the_names_cover_every_slot_range():
    slots = {key_slot(n.encode()) // (16384 // RANGES) for n in NAMES}
    assert slots == set(range(RANGES))


def cycle(client, name):
    token = client.execute_command("FLOCK.ACQUIRE", name, 30000)
    assert isinstance(token, int) and token >= 1, token
    assert client.execute_command("FLOCK.RENEW", name, token, 30000) == 1
    assert client.execute_command("FLOCK.RELEASE", name, token) == 1
    return token


def test_redis_py_redis_cluster_goes_to_the_leader_and_carries_on_after_its_kill(cluster):
    print(f"redis-py {redis.__version__}")
    leader = cluster.leader()
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in cluster.ports])
    assert client.get_node_from_key(NAMES[0]).port == cluster.ports[leader]
    before = cluster.forwarded()
    for name in NAMES:
        cycle(client, name)
    forwarded = cluster.forwarded() - before
    print(f"redis-py RedisCluster: {3 * len(NAMES)} commands, {forwarded} forwarded by a follower")
    # A follower's own start-up entry is its only forward (once per follower).
    assert forwarded <= 2, forwarded
    # scan_iter walks every master: here the one leader, so each name comes back once.
    scanned = [k.decode() for k in client.scan_iter(match="order:*", count=50)]
    assert sorted(scanned) == sorted(NAMES), scanned[:10]

    cluster.kill(leader)
    killed = time.monotonic()
    errors = []
    first_ok = None
    n = 0
    while time.monotonic() - killed < 20:
        n += 1
        try:
            client.execute_command("FLOCK.ACQUIRE", f"after-kill:{n}", 30000)
            first_ok = time.monotonic() - killed
            break
        except redis.RedisError as e:
            errors.append((round(time.monotonic() - killed, 3), repr(e)))
            time.sleep(0.02)
    assert first_ok is not None, f"no success within 20 s of the kill: {errors[-3:]}"
    print(f"redis-py RedisCluster: first acquire {first_ok:.3f} s after the kill; "
          f"{len(errors)} errors reached the application before it: {errors[:3]}")
    new = cluster.leader()
    assert new != leader
    assert client.get_node_from_key(NAMES[0]).port == cluster.ports[new]
    for name in NAMES[:RANGES * 2]:
        assert cycle(client, name) >= 2, "tokens never go back"


def run_node(cluster, library, ports):
    script = os.path.join(HERE, "redis_cluster_clients.js")
    modules = os.path.join(ROOT, "tests", "examples", "node_modules")
    if shutil.which("node") is None or not os.path.isdir(modules):
        if os.environ.get("CI") == "true":
            pytest.fail("node or the Node libraries missing (npm ci --prefix tests/examples)")
        pytest.skip("node or the Node libraries missing (npm ci --prefix tests/examples)")
    leader = cluster.leader()
    before = cluster.forwarded()
    proc = subprocess.Popen(
        ["node", script, library, json.dumps(ports), json.dumps(NAMES)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("cycled"), line + proc.stderr.read()
        forwarded = cluster.forwarded() - before
        cluster.kill(leader)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, out + err
    result = json.loads(out.strip().splitlines()[-1])
    print(f"{library}: {result['version']}, {3 * len(NAMES)} commands, {forwarded} forwarded; "
          f"first acquire {result['firstOkMs']} ms after the kill; "
          f"{len(result['errors'])} errors reached the application: {result['errors'][:3]}")
    assert result["firstOkMs"] is not None, result
    assert result["tokensAfter"] >= 2, result
    new = cluster.leader()
    assert new != leader
    return forwarded


def test_node_redis_create_cluster_goes_to_the_leader_and_carries_on_after_its_kill(cluster):
    forwarded = run_node(cluster, "node-redis", cluster.ports)
    assert forwarded <= 2, forwarded


def test_ioredis_cluster_follows_moved_and_carries_on_after_its_kill(redirecting_cluster):
    # ioredis's Cluster knows the keys only of the commands in its own table, so it sends
    # FLOCK.* to a node of its choosing; with cluster-redirect yes the node answers -MOVED and
    # ioredis follows it, so nothing is forwarded either.
    forwarded = run_node(redirecting_cluster, "ioredis", redirecting_cluster.ports)
    assert forwarded <= 2, forwarded


def test_redis_py_sharded_pubsub_gets_a_locks_events(redirecting_cluster):
    """redis-py's sharded pub/sub (`ClusterPubSub.ssubscribe`) routes the channel by its slot to
    the leader (followers would answer -MOVED) and gets the lock's events as `smessage`."""
    cluster = redirecting_cluster
    leader = cluster.leader()
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in cluster.ports])
    pubsub = client.pubsub()
    channel = "__flock__:{order:9}"
    pubsub.ssubscribe(channel)
    deadline = time.monotonic() + 5
    first = None
    while first is None and time.monotonic() < deadline:
        first = pubsub.get_sharded_message(timeout=0.5)
    assert first is not None and first["type"] == "ssubscribe", first
    token = client.execute_command("FLOCK.ACQUIRE", "{order:9}", 30000)
    assert client.get_node_from_key("{order:9}").port == cluster.ports[leader]
    message = None
    while message is None and time.monotonic() < deadline + 5:
        message = pubsub.get_sharded_message(timeout=0.5)
    assert message is not None, "no smessage within 5 s"
    assert message["type"] == "smessage", message
    assert message["channel"] == channel.encode()
    assert message["data"] == f"granted {token}".encode()
    pubsub.close()

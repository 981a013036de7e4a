"""Redis Cluster clients, each with its defaults, against 3 flockd nodes of 4 Raft groups
(`cluster-groups 4`): four shards, each with its own master (the group's leader, spread over the
nodes). Each client sends acquire, renew and release for names over every slot range straight to
the right group's leader (the forwarded-commands counter stays near zero), then carries on after
a kill -9 of a node that leads groups, once its own refresh finds their new leaders.

    FLOCKD_BIN=target/debug/flockd python3 -m pytest -q -s tests/cluster_clients/test_redis_cluster_groups.py

The Node clients run through redis_cluster_clients.js as in test_redis_cluster_clients.py.
"""

import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from conftest import started
from test_redis_cluster_clients import NAMES, RANGES, cycle, run_node

GROUPS = 4


def group_of(name):
    slot = key_slot(name.encode())
    return (slot * GROUPS + GROUPS - 1) // 16384


def masters(cluster, i):
    """What node i says of the shards: each range's first slot and its master's port."""
    slots = redis.Redis(port=cluster.ports[i], socket_timeout=2).execute_command("CLUSTER SLOTS")
    return {r[0]: r[2][1] for r in slots}


def settled(cluster, timeout=30.0):
    """Waits until the running nodes agree on the four masters and none leads more than its
    share (the leaders spread), and returns {first slot: master port}."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            seen = [masters(cluster, i) for i, p in enumerate(cluster.procs) if p.poll() is None]
        except redis.RedisError:
            seen = None
        if seen and len(seen[0]) == GROUPS and all(s == seen[0] for s in seen):
            running = sum(1 for p in cluster.procs if p.poll() is None)
            share = -(-GROUPS // running)
            if max(list(seen[0].values()).count(p) for p in cluster.ports) <= share:
                return seen[0]
        time.sleep(0.1)
    raise AssertionError(f"the groups did not settle: {seen}")


@pytest.fixture
def grouped_cluster():
    for c in started(("--cluster-groups", str(GROUPS))):
        settled(c)
        yield c


@pytest.fixture
def grouped_redirecting_cluster():
    for c in started(("--cluster-groups", str(GROUPS), "--cluster-redirect", "yes")):
        settled(c)
        yield c


def test_the_names_cover_every_group():
    assert {group_of(n) for n in NAMES} == set(range(GROUPS))


def test_redis_py_routes_each_name_to_its_groups_leader_and_carries_on(grouped_cluster):
    cluster = grouped_cluster
    shards = settled(cluster)
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in cluster.ports])
    for name in NAMES[:RANGES]:
        first = sorted(s for s in shards if s <= key_slot(name.encode()))[-1]
        assert client.get_node_from_key(name).port == shards[first], name
    before = cluster.forwarded()
    for name in NAMES:
        cycle(client, name)
    forwarded = cluster.forwarded() - before
    print(f"redis-py RedisCluster, {GROUPS} groups: {3 * len(NAMES)} commands, "
          f"{forwarded} forwarded")
    assert forwarded <= 2, forwarded

    # Kill -9 the node leading the first group: its groups fail over, the others go on.
    victim = cluster.ports.index(shards[0])
    cluster.kill(victim)
    killed = time.monotonic()
    errors = []
    carried = {}
    for name in NAMES[:RANGES]:
        while time.monotonic() - killed < 20:
            try:
                assert cycle(client, name) >= 2, "tokens never go back"
                carried[name] = round(time.monotonic() - killed, 3)
                break
            except redis.RedisError as e:
                errors.append((round(time.monotonic() - killed, 3), repr(e)))
                time.sleep(0.02)
    assert len(carried) == RANGES, f"stuck after the kill: {errors[-3:]}"
    print(f"redis-py RedisCluster, {GROUPS} groups: every group answered again "
          f"{max(carried.values()):.3f} s after the kill; {len(errors)} errors reached the "
          f"application before: {errors[:3]}")
    after = settled(cluster)
    assert cluster.ports[victim] not in after.values(), after


def test_node_redis_routes_by_group_and_carries_on(grouped_cluster):
    forwarded = run_node(grouped_cluster, "node-redis", grouped_cluster.ports)
    assert forwarded <= 2, forwarded


def test_ioredis_follows_moved_to_each_groups_leader_and_carries_on(grouped_redirecting_cluster):
    cluster = grouped_redirecting_cluster
    forwarded = run_node(cluster, "ioredis", cluster.ports)
    assert forwarded <= 2, forwarded

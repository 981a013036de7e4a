#!/usr/bin/env python3
"""A leader cut off from its followers answers within `cluster-wait-leader-ms`.

Three real `flockd` nodes in network namespaces (the fault harness's Network and Cluster);
the leader is cut off from both followers by nftables rules while the clients still reach it.
Right after the cut, a write (FLOCK.ACQUIRE), a fenced write (FENCE.SET) and a read
(FLOCK.STATUS) are sent to it at once, each on its own connection. cluster.md: a node keeps a
command up to cluster-wait-leader-ms (3000) from its arrival, then replies -CLUSTERDOWN, the
leader too. So each must get -CLUSTERDOWN within the limit plus generous slack, and never a
success; the connection stays open (a PING on it answers). Two scenarios, a cluster each:
  1. the cut lasts 5.5 s: the followers elect a new leader meanwhile (the replies are due
     long before the heal, which used to answer them at about 6 s);
  2. elections wait 8 to 16 s and the cut heals after 4 s, under the same leader: its entries
     then commit after it answered -CLUSTERDOWN for them. They take effect (the reply said
     the outcome is unknown), and the node, whose pending table had already answered them,
     goes on serving.

Run as root (namespaces, nftables):  python3 tests/faults/cutoff_leader.py --bin target/debug/flockd
Every process it starts is stopped by pid, every namespace removed, on every exit path.
"""

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the fault harness's network namespaces and nodes)

import redis  # noqa: E402

WAIT_LEADER_S = 3.0  # cluster-wait-leader-ms, the contract's default the nodes run with
SLACK_S = 1.5  # a shared, noisy machine
COMMANDS = {
    "FLOCK.ACQUIRE": ["FLOCK.ACQUIRE", "cutoff:lock", 30000, "OWNER", "cut-off-client"],
    "FENCE.SET": ["FENCE.SET", "cutoff:fence", 7, "written-while-cut-off"],
    "FLOCK.STATUS": ["FLOCK.STATUS", "cutoff:lock"],
}


def send(node, args, out, key):
    """Sends one command on a fresh connection; records the reply (or error), its time, and
    whether the connection still answers afterwards."""
    conn = redis.Redis(host=node.host, port=node.port, socket_timeout=20.0,
                       socket_connect_timeout=2.0,
                       retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    sent = time.monotonic()
    try:
        reply = conn.execute_command(*args)
        outcome = ("ok", reply)
    except redis.ResponseError as e:
        # redis-py takes the error's first word off for the codes it knows (CLUSTERDOWN is
        # ClusterDownError): put it back, so the check reads the reply as sent
        text = str(e)
        if isinstance(e, redis.exceptions.ClusterDownError) and not text.startswith("CLUSTERDOWN"):
            text = "CLUSTERDOWN " + text
        outcome = ("err", text)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
        outcome = ("lost", str(e))
    answered = time.monotonic()
    still_open = None
    if outcome[0] != "lost":
        try:
            still_open = conn.execute_command("PING") in (b"PONG", True, "PONG")
        except (redis.RedisError, OSError):
            still_open = False
    conn.close()
    out[key] = {"args": args, "sent": sent, "answered": answered, "outcome": outcome,
                "open": still_open}


def start_cluster(root, binary, net, extra_args):
    cluster = harness.Cluster(3, "netns", root, binary, net)
    for node in cluster.nodes:
        node.extra_args = list(extra_args)
    cluster.start_all()
    slot = cluster.leader(timeout=30.0)
    leader = cluster.nodes[slot]
    # In office (its leases re-armed) before the cut: a write through it commits.
    deadline = time.monotonic() + 15.0
    while True:
        try:
            if leader.call("FLOCK.ACQUIRE", "cutoff:warm", 1000, timeout=5.0) is not None:
                break
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise harness.Failure("the leader took no write before the cut:\n" + leader.log_tail())
        time.sleep(0.1)
    return cluster, slot


def cut_off_leader(cluster, slot, heal_after_s):
    """Cuts the leader off, sends it the three commands at once, heals `heal_after_s` later;
    returns the failures seen in their replies."""
    leader = cluster.nodes[slot]
    others = [s for s in range(3) if s != slot]
    print(f"leader: node {leader.id} (slot {slot}); cut off from slots {others} for "
          f"{heal_after_s:.1f} s", flush=True)
    results = {}
    cluster.net.cut([slot], others)
    cut_at = time.monotonic()
    threads = [threading.Thread(target=send, args=(leader, cmd, results, name), daemon=True)
               for name, cmd in COMMANDS.items()]
    for t in threads:
        t.start()
    time.sleep(max(0.0, cut_at + heal_after_s - time.monotonic()))
    cluster.net.heal([slot])
    healed_at = time.monotonic()
    for t in threads:
        t.join(timeout=30.0)

    failures = []
    limit = WAIT_LEADER_S + SLACK_S
    for name in COMMANDS:
        r = results.get(name)
        if r is None:
            failures.append(f"{name}: no reply within {heal_after_s + 30:.0f} s")
            continue
        took = r["answered"] - r["sent"]
        kind, value = r["outcome"]
        after_heal = r["answered"] > healed_at
        print(f"  {name:14s} answered after {took * 1000:5.0f} ms "
              f"({'after' if after_heal else 'before'} the heal at "
              f"{(healed_at - r['sent']) * 1000:.0f} ms): {kind} {value!r}", flush=True)
        if kind == "ok":
            failures.append(f"{name}: a success from a leader cut off from the majority "
                            f"({value!r} after {took * 1000:.0f} ms)")
        elif kind == "lost":
            failures.append(f"{name}: the connection was lost ({value})")
        elif not value.startswith("CLUSTERDOWN"):
            failures.append(f"{name}: expected -CLUSTERDOWN, got -{value}")
        if took > limit:
            failures.append(f"{name}: answered after {took * 1000:.0f} ms, over "
                            f"cluster-wait-leader-ms + slack ({limit * 1000:.0f} ms)")
        if kind != "lost" and not r["open"]:
            failures.append(f"{name}: the connection did not stay open after the reply")
    return failures


def late_commit_took_effect(cluster, slot):
    """After a heal with no election in between, the cut-off leader's entries commit: the
    writes answered -CLUSTERDOWN take effect (their outcome was unknown, as the reply said),
    and the node that had answered them goes on."""
    leader = cluster.nodes[slot]
    deadline = time.monotonic() + 15.0
    last = None
    while time.monotonic() < deadline:
        try:
            status = leader.call("FLOCK.STATUS", "cutoff:lock", timeout=5.0)
            fence = leader.call("FENCE.GET", "cutoff:fence", timeout=5.0)
            last = (status, fence)
            fields = status if isinstance(status, dict) else dict(zip(status[::2], status[1::2]))
            fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
            if int(fields["locked"]) == 1 and fence is not None:
                break
        except (redis.RedisError, OSError, KeyError, TypeError) as e:
            last = e
        time.sleep(0.2)
    else:
        return [f"the cut-off leader's entries did not take effect after the heal: {last!r}"]
    print(f"  after the heal the entries committed: {last!r}", flush=True)
    failures = []
    if not leader.running():
        failures.append("the leader stopped after applying entries it had answered")
    try:
        held = leader.call("FLOCK.ACQUIRE", "cutoff:lock", 30000, "OWNER", "someone-else",
                           timeout=5.0)
        if held is not None:
            failures.append(f"the late grant is not in the state: another owner got {held!r}")
    except redis.RedisError as e:
        failures.append(f"a command after the late commit failed: {e}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("FLOCKD_BIN", "target/debug/flockd"))
    ap.add_argument("--keep", help="keep the nodes' dirs and logs in this folder")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    if not os.path.exists(binary):
        sys.exit(f"no flockd binary at {binary}")
    if not harness.netns_available() or shutil.which("nft") is None:
        sys.exit("this test needs root, iproute2 and nftables (network namespaces, drop rules)")
    root = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="flockd-cutoff-")
    os.makedirs(root, exist_ok=True)
    net = harness.Network(3)
    clusters = []

    def cleanup():
        for cluster in clusters:
            cluster.stop_all()
        net.down()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    net.up()
    net.enter_client_namespace()
    failures = []
    scenarios = [
        # The followers elect a new leader during the cut; the old one's entries are replaced.
        ("a new leader is elected while the old one is cut off", [], WAIT_LEADER_S + 2.5, False),
        # Elections wait 8 to 16 s: the cut heals under the same leader, whose entries then
        # commit after it answered -CLUSTERDOWN for them.
        ("the cut heals before any election", ["--cluster-election-timeout-ms", "8000"],
         WAIT_LEADER_S + 1.0, True),
    ]
    for number, (title, extra_args, heal_after_s, late_commit) in enumerate(scenarios):
        print(f"scenario {number + 1}: {title}", flush=True)
        seen = []
        cluster = None
        try:
            cluster, slot = start_cluster(os.path.join(root, f"s{number}"), binary, net,
                                          extra_args)
            clusters.append(cluster)
            seen = cut_off_leader(cluster, slot, heal_after_s)
            if late_commit:
                seen += late_commit_took_effect(cluster, slot)
            cluster.converged(timeout=15.0)
        except harness.Failure as e:
            seen.append(str(e))
        failures += [f"scenario {number + 1}: {f}" for f in seen]
        if seen and cluster is not None:
            for n in cluster.nodes:
                print(f"--- slot {n.slot} (id {n.id}), last lines of its log\n{n.log_tail()}")
        if cluster is not None:
            cluster.stop_all()
    if failures:
        print("\nFAILED:")
        for f in failures:
            print(f"  {f}")
        sys.exit(1)
    print("\nthe cut-off leader answered every command with -CLUSTERDOWN within the limit")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fault harness for a flockd cluster, with a history checker.

Starts 3 or 5 real `flockd` nodes, each in a network namespace of its own (veth pairs to a
bridge in a hub namespace, addresses of 10.77.77.0/24, which exists only inside those
namespaces), runs clients against every node and injects faults one at a time or in a random
mix: kill -9 of the leader, of a follower, of two nodes of five; SIGSTOP of the leader for
three election timeouts; the leader or a follower cut off from the other nodes, or a clean
majority/minority split (nftables drop rules in the nodes' namespaces); a follower's `dir`
wiped, the node replaced under a new id with FLOCK.CLUSTER REMOVE / ADD; a slow disk on one
node (a delay before every Raft log sync, behind the test-only FLOCKD_TEST_SYNC_DELAY_FILE);
two of those at once on two nodes (`combined`: on 3 nodes no majority is left).
`--snapshot-every N` makes the nodes snapshot every N log entries (a short run writes far fewer
than the default 50,000), so the faults also meet snapshots built, sent and restarted from.
`--mode loopback` runs the faults that need no namespaces (kills, pauses, wipes, slow disks)
with every node on 127.0.0.1.

Every request is recorded with its send time, reply time, node and result; the checker then
proves, over the whole history:
  * per lock name, tokens are unique and increase in real-time order;
  * every acknowledged grant and fence write is in the final state (last-token, FENCE.TOKEN),
    and no acknowledged release left its holding in place;
  * no node cut off from the majority (or paused) answered anything but an error;
  * no read was older than a write acknowledged before the read was sent;
  * no lease ended (another holder granted) before its length since the grant or renewal was
    sent, unless its release had been sent;
  * after each healing, one leader, and every node at the same applied index and state digest
    within 5 s;
  * no node answered a command (success, null, error, -CLUSTERDOWN) later than
    cluster-wait-leader-ms (--wait-leader-ms, passed to every node) plus a slack for this machine
    (--late-slack-ms) after it was sent; a blocking `WAIT ms` acquire may take its WAIT more; a
    command sent to a SIGSTOPped node is counted from its SIGCONT. A client's socket timeout
    (--client-timeout) is well above that: a command that got no answer at all by then, on a
    connection that stayed open, is a violation too. A connection closed or refused is no answer.
It prints a summary table, then per fault kind (of the last round whose fault began before the
answer; "no fault" before the first round) a histogram of answer times (send to answer) by
outcome (success, null, error, CLUSTERDOWN), and exits 1 naming the first bad operations if any
check fails. --hold makes the pauses and cuts outlast cluster-wait-leader-ms.

Run as root (namespaces, nftables):  python3 tests/faults/harness.py --nodes 3 --rounds 50
Every process it starts is stopped by pid, every namespace removed, on every exit path.
"""

import argparse
import atexit
import bisect
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import redis
import redis.backoff
import redis.retry

SUBNET = "10.77.77"
CLIENT_ADDR = SUBNET + ".2"
CLONE_NEWNET = 0x40000000
ELECTION_TIMEOUT_MS = 500  # the contract's default, which the nodes run with
# cluster.md: no node answers a command later than cluster-wait-leader-ms after its arrival.
WAIT_LEADER_MS = 3000  # the contract's default; given to every node (--wait-leader-ms)
LATE_SLACK_MS = 500  # client-side slack over that limit: 32 Python threads on a noisy 2-core box
# The clients' socket timeout: far enough above limit + slack that a late answer is seen (and
# reported) as late, not lost as a timeout.
CLIENT_TIMEOUT_S = 10.0
# answer-time histogram buckets (upper bounds, seconds); the last column is ">= 4 s"
ANSWER_BUCKETS_S = (0.1, 0.5, 1.0, 2.0, 3.0, 3.5, 4.0)
ANSWER_CLASSES = ("success", "null", "error", "CLUSTERDOWN")

PARTITION_KINDS = ["partition-leader", "partition-follower", "split"]
KINDS = [
    "kill-leader",
    "kill-follower",
    "kill-two",
    "pause-leader",
    "partition-leader",
    "partition-follower",
    "split",
    "wipe-follower",
    "slow-disk",
    "combined",
]


def now():
    return time.monotonic()


def apply_parting(nodes, shown=3):
    """Where the nodes' apply traces (test-only FLOCKD_TEST_APPLY_TRACE: a line per entry each
    group applied, in the group's dir) first disagree: per group, the first `shown` log indexes
    at which two nodes (or one node before and after a restart) applied different entries or
    got different results, with each variant's nodes."""
    out = []
    groups = {}
    for slot, node in enumerate(nodes):
        raft = os.path.join(node.dir, "raft")
        others = sorted(d for d in os.listdir(raft) if d.startswith("group-")) \
            if os.path.isdir(raft) else []
        # the first group keeps its files in raft/ itself, each other one in raft/group-N/
        places = [("group-1", raft)] + [(d, os.path.join(raft, d)) for d in others]
        for group, place in places:
            path = os.path.join(place, "applied.trace")
            if not os.path.exists(path):
                continue
            seen = groups.setdefault(group, {})
            run = 0
            with open(path, errors="replace") as f:
                for line in f:
                    words = line.rstrip("\n").split(" ", 2)
                    if words[0] == "START":
                        run += 1
                    elif words[0] == "APPLY" and len(words) == 3 and words[1].isdigit():
                        who = seen.setdefault(int(words[1]), {})
                        who.setdefault(words[2], []).append(f"node {node.id} (run {run})")
    for group, seen in sorted(groups.items()):
        parted = [i for i in sorted(seen) if len(seen[i]) > 1]
        if not parted:
            out.append(f"  {group}: the apply traces agree on every index ({len(seen)} seen)")
            continue
        out.append(f"  {group}: the apply traces differ at {len(parted)} of {len(seen)} "
                   f"indexes, first at:")
        for index in parted[:shown]:
            for line, who in seen[index].items():
                out.append(f"    {index} {', '.join(who)}: {line[:400]}")
    return "\n".join(out) or "  (no apply traces)"


def sh(*args, check=True, input=None):
    return subprocess.run(
        list(args), check=check, input=input, capture_output=True, text=True, timeout=30
    )


# ----------------------------------------------------------------------------- the network


class Network:
    """Network namespaces: a hub with a bridge, one namespace per node, one for the clients."""

    def __init__(self, size):
        tag = f"flkf{os.getpid() % 100000}"
        self.hub = f"{tag}-hub"
        self.client = f"{tag}-cli"
        self.nodes = [f"{tag}-n{i}" for i in range(size)]
        self.made = []

    def address(self, slot):
        return f"{SUBNET}.{11 + slot}"

    def up(self):
        for ns in [self.hub, self.client] + self.nodes:
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        ends = [(self.client, CLIENT_ADDR, "hc")] + [
            (ns, self.address(i), f"h{i}") for i, ns in enumerate(self.nodes)
        ]
        for ns, addr, hub_end in ends:
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
               hub_end, "netns", self.hub)
            sh("ip", "-n", self.hub, "link", "set", hub_end, "master", "br0")
            sh("ip", "-n", self.hub, "link", "set", hub_end, "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def enter_client_namespace(self):
        """Moves this thread (and every thread and process it starts later) into the clients'
        namespace: the controller and the clients reach the nodes from there."""
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/run/netns/{self.client}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the clients' namespace")
        finally:
            os.close(fd)

    def cut(self, minority, majority):
        """Drops every packet between the two sides, in the minority nodes' namespaces."""
        others = ", ".join(self.address(s) for s in majority)
        rules = (
            "table inet flkfault {\n"
            f"  chain in {{ type filter hook input priority 0; policy accept; ip saddr {{ {others} }} drop; }}\n"
            f"  chain out {{ type filter hook output priority 0; policy accept; ip daddr {{ {others} }} drop; }}\n"
            "}\n"
        )
        for slot in minority:
            sh("ip", "netns", "exec", self.nodes[slot], "nft", "-f", "-", input=rules)

    def heal(self, slots):
        for slot in slots:
            sh("ip", "netns", "exec", self.nodes[slot], "nft", "delete", "table", "inet",
               "flkfault", check=False)

    def down(self):
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)
        self.made = []


# ----------------------------------------------------------------------------- the nodes


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Node:
    def __init__(self, slot, host, port, cport, ns, root, binary):
        self.slot, self.host, self.port, self.cport, self.ns = slot, host, port, cport, ns
        self.binary = binary
        self.id = slot + 1
        self.dir = os.path.join(root, f"node{slot}")
        self.log_path = os.path.join(root, f"node{slot}.log")
        self.slow_file = os.path.join(root, f"node{slot}.sync-delay-ms")
        self.extra_args = []  # more flags for every start (tests/faults/cutoff_leader.py)
        self.wait_leader_ms = None  # --cluster-wait-leader-ms, when the harness sets it
        self.proc = None

    def addr(self):
        return f"{self.host}:{self.port}@{self.cport}"

    def start(self, peers):
        os.makedirs(self.dir, exist_ok=True)
        cmd = [self.binary, "--bind", self.host, "--port", str(self.port), "--dir", self.dir,
               "--node-id", str(self.id), "--cluster-peers", peers] + self.extra_args
        if self.wait_leader_ms is not None:
            cmd += ["--cluster-wait-leader-ms", str(self.wait_leader_ms)]
        if self.ns:
            cmd = ["ip", "netns", "exec", self.ns] + cmd  # ip execs flockd: the pid is flockd's
        # FLOCKD_TEST_APPLY_TRACE: a line per applied entry in each group's dir, compared when
        # the nodes' states differ (apply_parting).
        env = dict(os.environ, FLOCKD_LOG_LEVEL="info,openraft=warn",
                   FLOCKD_TEST_SYNC_DELAY_FILE=self.slow_file, FLOCKD_TEST_APPLY_TRACE="1")
        log = open(self.log_path, "a")
        log.write(f"--- start {time.strftime('%H:%M:%S')} id {self.id}\n")
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env,
                                     stdin=subprocess.DEVNULL)
        log.close()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def pause(self):
        """SIGSTOP, returning once every thread of the process is stopped. kill() returns when
        the signal is queued; the group stop reaches each thread when it next runs, which on a
        busy machine can be milliseconds later, and a thread still running may answer a command
        sent meanwhile (CI once saw an answer 2.6 ms after the signal was sent)."""
        if not self.running():
            return
        os.kill(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self.all_threads_stopped():
            time.sleep(0.0005)

    def all_threads_stopped(self):
        tasks = f"/proc/{self.proc.pid}/task"
        try:
            for tid in os.listdir(tasks):
                with open(f"{tasks}/{tid}/stat") as f:
                    # the state follows the command name, which is in parentheses
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                        return False
        except (FileNotFoundError, ProcessLookupError):
            return True  # the process is gone: it answers nothing either
        return True

    def kill9(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def call(self, *args, timeout=1.0):
        r = redis.Redis(host=self.host, port=self.port, socket_timeout=timeout,
                        socket_connect_timeout=timeout, retry=redis.retry.Retry(
                            redis.backoff.NoBackoff(), 0))
        try:
            return r.execute_command(*args)
        finally:
            r.close()

    def replication(self):
        try:
            return self.call("INFO", "replication", "digest")
        except (redis.RedisError, OSError):
            return None

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Cluster:
    def __init__(self, size, mode, root, binary, net, wait_leader_ms=None, groups=1):
        self.mode, self.net = mode, net
        self.groups = groups
        if mode == "netns":
            self.nodes = [Node(i, net.address(i), 6379, 16379, net.nodes[i], root, binary)
                          for i in range(size)]
        else:
            ports = free_ports(2 * size)
            self.nodes = [Node(i, "127.0.0.1", ports[i], ports[size + i], None, root, binary)
                          for i in range(size)]
        for n in self.nodes:
            n.wait_leader_ms = wait_leader_ms
            if groups > 1:
                n.extra_args += ["--cluster-groups", str(groups)]
        self.next_id = size + 1
        self.joining = set()  # slots started under a new id, not yet added

    def peers(self, slots=None):
        slots = range(len(self.nodes)) if slots is None else slots
        return ",".join(f"{self.nodes[s].id}={self.nodes[s].addr()}" for s in slots)

    def start_all(self):
        peers = self.peers()
        for n in self.nodes:
            n.start(peers)

    def stop_all(self):
        for n in self.nodes:
            n.kill9()

    def leader(self, timeout=15.0):
        """The slot of the node every running node agrees leads, once they do."""
        deadline = now() + timeout
        while now() < deadline:
            leaders = set()
            states = []
            for n in self.nodes:
                if not n.running() or n.slot in self.joining:
                    continue
                info = n.replication()
                if info is None:
                    leaders.add(None)
                    continue
                leaders.add(info.get("raft_leader_id"))
                states.append((n.slot, info.get("raft_state")))
            if len(leaders) == 1 and None not in leaders and 0 not in leaders:
                lid = leaders.pop()
                for n in self.nodes:
                    if n.id == lid and n.running():
                        return n.slot
            time.sleep(0.05)
        raise Failure("no leader agreed on within %.0f s" % timeout)

    def converged(self, timeout=5.0):
        """Waits for one leader and equal applied index and digest on every node; returns the
        time it took, or raises with what differed."""
        start = now()
        last = None
        while now() - start < timeout:
            infos = [n.replication() for n in self.nodes]
            # a missing field must not pass as equal
            if all(infos) and all(i.get("raft_state_digest") is not None for i in infos):
                leaders = [i for i in infos if i.get("raft_state") == "leader"]
                # With several groups, each group's line (leader, term, commit and applied
                # index, lag) must match too.
                keys = {(i.get("raft_leader_id"), i.get("raft_applied_index"),
                         i.get("raft_state_digest"),
                         tuple(str(i.get(f"raft_group_{g}")) for g in range(1, self.groups + 1)
                               if self.groups > 1))
                        for i in infos}
                if len(leaders) == 1 and len(keys) == 1:
                    return now() - start
            last = [None if i is None else (i.get("raft_node_id"), i.get("raft_state"),
                                            i.get("raft_leader_id"),
                                            i.get("raft_applied_index"),
                                            i.get("raft_state_digest")) for i in infos]
            time.sleep(0.05)
        raise Failure(f"not converged {timeout:.0f} s after healing: {last}")

    def wait_answers(self, node, timeout=15.0):
        deadline = now() + timeout
        while now() < deadline:
            try:
                if node.call("PING") in (b"PONG", True, "PONG"):
                    return
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.05)
        raise Failure(f"node in slot {node.slot} does not answer:\n{node.log_tail()}")

    def on_leader(self, *args, timeout=20.0):
        """Sends a membership command to whoever leads, until it is accepted."""
        deadline = now() + timeout
        last = None
        while now() < deadline:
            try:
                leader = self.nodes[self.leader(timeout=deadline - now())]
                reply = leader.call(*args, timeout=10.0)
                if reply in (b"OK", True, "OK"):
                    return
                last = reply
            except (redis.RedisError, OSError, Failure) as e:
                last = e
            time.sleep(0.2)
        raise Failure(f"{' '.join(map(str, args))} not accepted: {last}")


class Failure(Exception):
    pass


# ----------------------------------------------------------------------------- the clients


class Clients:
    """32 (by default) client threads; each records every request it sends."""

    def __init__(self, cluster, count, names, seed, timeout=CLIENT_TIMEOUT_S):
        self.cluster = cluster
        self.timeout = timeout  # the socket timeout of every request
        self.names = names
        self.seed = seed
        self.stop = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.busy = 0
        self.busy_lock = threading.Condition()
        self.histories = [[] for _ in range(count)]
        self.threads = [threading.Thread(target=self.run, args=(c,), daemon=True)
                        for c in range(count)]

    def start(self):
        for t in self.threads:
            t.start()

    def pause(self, timeout=10.0):
        """Stops new cycles and waits for the ones under way (each is bounded by its timeouts)."""
        self.gate.clear()
        deadline = now() + timeout
        with self.busy_lock:
            while self.busy and now() < deadline:
                self.busy_lock.wait(0.05)

    def resume(self):
        self.gate.set()

    def finish(self):
        self.stop.set()
        self.gate.set()
        for t in self.threads:
            t.join(timeout=15)

    def history(self):
        return sorted((op for h in self.histories for op in h), key=lambda o: o["s"])

    def run(self, c):
        rng = random.Random(self.seed * 1000 + c)
        nodes = self.cluster.nodes
        # a quarter of the clients stay on one node whatever happens (some on the minority side)
        pinned = c % 4 == 0
        slot = c % len(nodes)
        conn = None
        hist = self.histories[c]
        seq = 0

        def connect():
            n = nodes[slot]
            return redis.Redis(host=n.host, port=n.port, socket_timeout=self.timeout,
                               socket_connect_timeout=1.0,
                               retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))

        def send(op, name, *args, tok=None, lease=None, wait=None):
            # wait: the WAIT ms of a blocking acquire (None for every command these clients
            # send today); the late-answer check allows it on top of the limit
            nonlocal conn, slot
            if conn is None:
                conn = connect()
            rec = {"c": c, "node": slot, "id": nodes[slot].id, "op": op, "name": name,
                   "tok": tok, "lease": lease, "wait": wait}
            rec["s"] = now()
            try:
                v = conn.execute_command(*args)
                rec["r"] = now()
                if v is None:
                    rec["res"] = "null"
                else:
                    rec["res"], rec["v"] = "ok", int(v)
            except redis.ResponseError as e:
                rec["r"] = now()
                rec["res"], rec["v"] = "err", error_text(e)[:120]
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                rec["r"] = now()
                text = str(e)
                # refused at connect time: nothing was sent
                rec["res"] = "unsent" if ("refused" in text or "111" in text) else "unknown"
                rec["v"] = text[:120]
                if rec["res"] == "unknown":
                    # "timeout": sent on an open connection, no answer by the socket timeout;
                    # "closed": the connection broke (a node killed), or never connected
                    read_timeout = (isinstance(e, (redis.TimeoutError, TimeoutError))
                                    and "connecting" not in text)
                    rec["lost"] = "timeout" if read_timeout else "closed"
                try:
                    conn.close()
                except Exception:
                    pass
                conn = None
            hist.append(rec)
            failed = rec["res"] in ("unsent", "unknown") or (
                rec["res"] == "err" and rec["v"].startswith("CLUSTERDOWN"))
            if failed:
                if not pinned:
                    slot = rng.choice([s for s in range(len(nodes)) if s != slot])
                    if conn is not None:
                        conn.close()
                        conn = None
                time.sleep(0.05)
            return rec

        while not self.stop.is_set():
            self.gate.wait()
            if self.stop.is_set():
                break
            with self.busy_lock:
                if not self.gate.is_set():
                    continue
                self.busy += 1
            try:
                seq += 1
                name = rng.choice(self.names)
                owner = f"c{c}-{seq}"
                lease = rng.randint(400, 2000)
                rec = send("acquire", name, "FLOCK.ACQUIRE", name, lease, "OWNER", owner,
                           lease=lease)
                if rec["res"] == "ok":
                    tok = rec["v"]
                    send("fence-set", name, "FENCE.SET", "f:" + name, tok, f"{owner}:{tok}",
                         tok=tok)
                    if rng.random() < 0.4:
                        time.sleep(rng.random() * 0.05)
                        lease2 = rng.randint(400, 2000)
                        send("renew", name, "FLOCK.RENEW", name, tok, lease2, tok=tok,
                             lease=lease2)
                    if rng.random() < 0.3:
                        send("token", name, "FLOCK.TOKEN", name)
                        send("fence-token", name, "FENCE.TOKEN", "f:" + name)
                    if rng.random() < 0.9:  # the rest expire
                        send("release", name, "FLOCK.RELEASE", name, tok, tok=tok)
                elif rng.random() < 0.5:
                    send("token", name, "FLOCK.TOKEN", name)
                time.sleep(rng.random() * 0.01)
            finally:
                with self.busy_lock:
                    self.busy -= 1
                    self.busy_lock.notify_all()
        if conn is not None:
            conn.close()


def error_text(e):
    """An error reply as the node sent it. redis-py takes the first word off the codes it knows
    (CLUSTERDOWN, MOVED, ...): it is put back, so -CLUSTERDOWN is told from other errors."""
    text = str(e)
    code = getattr(e, "status_code", None)
    if isinstance(e, redis.exceptions.ClusterDownError):
        code = "CLUSTERDOWN"
    if code and not text.startswith(code):
        text = f"{code} {text}"
    return text


# ----------------------------------------------------------------------------- the checker


def answer_class(op):
    """success, null, error or CLUSTERDOWN for an answer; None for no answer (not sent,
    connection lost, client timeout)."""
    if op["res"] == "ok":
        return "success"
    if op["res"] == "null":
        return "null"
    if op["res"] == "err":
        return "CLUSTERDOWN" if str(op["v"]).startswith("CLUSTERDOWN") else "error"
    return None


def round_of(history, windows, at="r"):
    """Per operation (in history order), the window of the last round whose fault began before
    the operation ended (at="r", its answer: an operation under way when a fault began is that
    fault's) or was sent (at="s"); None before the first round."""
    starts = [w["t0"] for w in windows]  # in round order
    out = []
    for op in history:
        k = bisect.bisect_right(starts, op[at]) - 1
        out.append(windows[k] if k >= 0 else None)
    return out


def answer_deadline(op, windows, wait_leader_s, slack_s):
    """The latest time op may be answered, and why if a pause moved it. Counted from the
    send; a command sent to a node while it was SIGSTOPped arrives when it is continued, and one
    that was there when it stopped cannot be answered before then."""
    arrival, floor, note = op["s"], op["s"], ""
    for w in windows:
        for slot, t_stop, t_cont in w.get("paused", ()):
            if slot != op["node"]:
                continue
            if t_stop <= op["s"] < t_cont:
                arrival = t_cont
                note = (f", sent while the node was paused (continued {t_cont - op['s']:.2f} s "
                        "after the send)")
            elif op["s"] < t_stop < op["r"]:
                floor, note = max(floor, t_cont), ", the node was paused while holding it"
    limit = wait_leader_s + (op.get("wait") or 0) / 1000.0
    return max(arrival + limit, floor) + slack_s, limit, note


def late_answers(history, windows, wait_leader_s, slack_s, origin=0.0):
    """No node answers a command later than cluster-wait-leader-ms after its arrival (a
    blocking WAIT acquire: its WAIT more), on any path; plus a slack for the client side."""
    bad = []
    for op, w, w_sent in zip(history, round_of(history, windows),
                             round_of(history, windows, at="s")):
        cls = answer_class(op)
        timed_out = op["res"] == "unknown" and op.get("lost") == "timeout"
        if cls is None and not timed_out:
            continue
        deadline, limit, note = answer_deadline(op, windows, wait_leader_s, slack_s)
        where = "no fault" if w is None else f"{w['kind']} round {w['round']}"
        if w_sent is not w:
            where += (" (sent before any fault)" if w_sent is None else
                      f" (sent in {w_sent['kind']} round {w_sent['round']})")
        who = f"{op['op']} {op['name']} (client {op['c']}) on slot {op['node']}"
        if op.get("id") is not None:
            who += f" (node id {op['id']})"
        sent = f"sent at +{op['s'] - origin:.2f} s"
        if timed_out:
            bad.append(("unanswered past the limit",
                        f"{where}: {who}, {sent}: no answer in {op['r'] - op['s']:.2f} s on an "
                        f"open connection (the client's timeout), limit {limit:.1f} s{note}", [op]))
        elif op["r"] > deadline:
            bad.append(("late answer",
                        f"{where}: {who} answered {cls} after {op['r'] - op['s']:.2f} s, {sent}; "
                        f"limit {limit:.1f} s + slack {slack_s:.1f} s{note}", [op]))
    return bad


def answer_times(history, windows, kinds):
    """Per fault kind (and "no fault"), per outcome class: answer times (send to answer) of the
    non-blocking commands, bucketed, with p50/p99/max; and the operations with no answer."""
    order = ["no fault"] + list(kinds)
    per = {}
    for op, w in zip(history, round_of(history, windows)):
        if op.get("wait"):
            continue
        kind = "no fault" if w is None else w["kind"]
        row = per.setdefault(kind, {"times": {c: [] for c in ANSWER_CLASSES},
                                    "unsent": 0, "closed": 0, "timeout": 0})
        cls = answer_class(op)
        if cls is not None:
            row["times"][cls].append(op["r"] - op["s"])
        elif op["res"] == "unsent":
            row["unsent"] += 1
        else:
            row["timeout" if op.get("lost") == "timeout" else "closed"] += 1
    out = []
    for kind in order + sorted(k for k in per if k not in order):
        if kind not in per:
            continue
        row = per[kind]
        classes = {}
        everything = []
        for cls in ANSWER_CLASSES + ("all",):
            times = everything if cls == "all" else row["times"][cls]
            if cls != "all":
                everything += times
            counts = [0] * (len(ANSWER_BUCKETS_S) + 1)
            for t in times:
                counts[bisect.bisect_right(ANSWER_BUCKETS_S, t)] += 1
            classes[cls] = {"n": len(times), "buckets": counts,
                            "p50_s": percentile(times, 50), "p99_s": percentile(times, 99),
                            "max_s": max(times) if times else None}
        out.append({"kind": kind, "classes": classes, "unsent": row["unsent"],
                    "closed": row["closed"], "timeout": row["timeout"]})
    return out


def print_answer_times(table, wait_leader_s, slack_s):
    def bound(b):
        return f"<{b:g}s"
    heads = [bound(b) for b in ANSWER_BUCKETS_S] + [f">={ANSWER_BUCKETS_S[-1]:g}s"]
    print(f"\nanswer times of non-blocking commands, send to answer, by the kind of the last "
          f"fault begun before the answer (limit {wait_leader_s:g} s + slack {slack_s:g} s)")
    print(f"{'fault':18s} {'outcome':11s} {'n':>6s} " + " ".join(f"{h:>6s}" for h in heads)
          + f" {'p50':>6s} {'p99':>6s} {'max':>6s}")

    def sec(v):
        return "     -" if v is None else f"{v:5.2f}s"
    for row in table:
        first = True
        for cls in ANSWER_CLASSES + ("all",):
            c = row["classes"][cls]
            if c["n"] == 0 and cls != "all":
                continue
            print(f"{row['kind'] if first else '':18s} {cls:11s} {c['n']:6d} "
                  + " ".join(f"{n:6d}" for n in c["buckets"])
                  + f" {sec(c['p50_s'])} {sec(c['p99_s'])} {sec(c['max_s'])}")
            first = False
        print(f"{'':18s} {'no answer':11s} not sent {row['unsent']}, connection lost "
              f"{row['closed']}, client timeout {row['timeout']}")


def check(history, windows, final, convergence_failures, wait_leader_s=WAIT_LEADER_MS / 1000.0,
          slack_s=LATE_SLACK_MS / 1000.0, origin=0.0):
    """Every violation as (check, text, [operations]). origin: the run's start, for the times
    in the late-answer texts."""
    bad = list(convergence_failures)
    by_name = {}
    for op in history:
        by_name.setdefault(op["name"], []).append(op)
    for name, ops in by_name.items():
        grants = [o for o in ops if o["op"] == "acquire" and o["res"] == "ok"]
        # unique tokens
        seen = {}
        for g in grants:
            if g["v"] in seen:
                bad.append(("unique tokens", f"{name}: token {g['v']} granted twice",
                            [seen[g["v"]], g]))
            seen[g["v"]] = g
        # real-time order: a grant acknowledged before another was sent has a lower token
        by_reply = sorted(grants, key=lambda o: o["r"])
        i, best = 0, None
        for g in sorted(grants, key=lambda o: o["s"]):
            while i < len(by_reply) and by_reply[i]["r"] < g["s"]:
                if best is None or by_reply[i]["v"] > best["v"]:
                    best = by_reply[i]
                i += 1
            if best is not None and best["v"] >= g["v"]:
                bad.append(("tokens in real-time order",
                            f"{name}: token {g['v']} sent after token {best['v']} was acknowledged",
                            [best, g]))
        # leases: the next holder is granted no earlier than a lease's length after its send
        releases = {}
        for o in ops:
            if o["op"] == "release" and o["res"] not in ("unsent",):
                releases.setdefault(o["tok"], []).append(o["s"])
        renews = {}  # a holding's renewals, in the order its one client sent them
        for o in ops:
            # -CLUSTERDOWN is an outcome the node did not know (cluster.md): a renewal that a
            # leader committed after its forward timed out is one
            if o["op"] == "renew" and (o["res"] in ("ok", "unknown")
                                       or answer_class(o) == "CLUSTERDOWN"):
                renews.setdefault(o["tok"], []).append(o)
        by_token = sorted(grants, key=lambda o: o["v"])
        later_min = [None] * len(by_token)
        running = None
        for k in range(len(by_token) - 1, -1, -1):
            later_min[k] = running
            if running is None or by_token[k]["r"] < running["r"]:
                running = by_token[k]
        for k, g in enumerate(by_token):
            nxt = later_min[k]
            if nxt is None:
                continue
            # a renewal sets the lease to its length from then, which may shorten it; one whose
            # answer was lost may or may not have done so
            end, cause = g["s"] + g["lease"] / 1000.0, g
            for rn in renews.get(g["v"], []):
                if rn["s"] > nxt["r"]:
                    break
                renewed = rn["s"] + rn["lease"] / 1000.0
                if rn["res"] == "ok" or renewed < end:
                    end, cause = renewed, rn
            released = [s for s in releases.get(g["v"], []) if s < nxt["r"]]
            # (a higher token answered before this grant was sent is an order violation)
            if not released and g["s"] < nxt["r"] < end - 0.002:
                bad.append(("lease length",
                            f"{name}: token {nxt['v']} granted {1000 * (end - nxt['r']):.0f} ms "
                            f"before the lease of token {g['v']} could end", [cause, nxt]))
        # reads: never older than a write acknowledged before the read was sent
        for read_op, write_op, in_write in (("token", "acquire", lambda o: o["v"]),
                                            ("fence-token", "fence-set", lambda o: o["tok"])):
            writes = sorted((o for o in ops if o["op"] == write_op and o["res"] == "ok"
                             and (write_op == "acquire" or o["v"] == 1)),
                            key=lambda o: o["r"])
            j, best = 0, None
            for rd in sorted((o for o in ops if o["op"] == read_op and o["res"] == "ok"),
                             key=lambda o: o["s"]):
                while j < len(writes) and writes[j]["r"] < rd["s"]:
                    if best is None or in_write(writes[j]) > in_write(best):
                        best = writes[j]
                    j += 1
                if best is not None and rd["v"] < in_write(best):
                    bad.append(("stale read", f"{name}: {read_op} read {rd['v']} after "
                                f"{in_write(best)} was acknowledged", [best, rd]))
        # the final state holds every acknowledged write
        fin = final.get(name)
        if fin is not None:
            if grants:
                top = max(grants, key=lambda o: o["v"])
                if fin["last-token"] < top["v"]:
                    bad.append(("final state", f"{name}: last-token {fin['last-token']} below "
                                f"acknowledged token {top['v']}", [top]))
            fences = [o for o in ops if o["op"] == "fence-set" and o["res"] == "ok"
                      and o["v"] == 1]
            if fences:
                top = max(fences, key=lambda o: o["tok"])
                if fin["fence-token"] < top["tok"]:
                    bad.append(("final state", f"f:{name}: FENCE.TOKEN {fin['fence-token']} "
                                f"below acknowledged write {top['tok']}", [top]))
            if fin["locked"]:
                for o in ops:
                    if (o["op"] == "release" and o["tok"] == fin["token"] and o["res"] == "ok"
                            and o["v"] == 1):
                        bad.append(("final state", f"{name}: still held by token "
                                    f"{fin['token']}, whose release was acknowledged", [o]))
    # nothing but errors from a node cut off from the majority, or paused: requests sent after
    # the cut (or SIGSTOP) was in place and answered before it was lifted
    sends = [o["s"] for o in history]  # the history is sorted by send time
    for w in windows:
        if not w["isolated"]:
            continue
        for op in history[bisect.bisect_right(sends, w["iso0"]):
                          bisect.bisect_left(sends, w["iso1"])]:
            if (op["node"] in w["isolated"] and op["r"] < w["iso1"]
                    and op["res"] in ("ok", "null")):
                bad.append(("isolated node answered",
                            f"{w['kind']} round {w['round']}: slot {op['node']} answered while "
                            "cut off from the majority", [op]))
    bad += late_answers(history, windows, wait_leader_s, slack_s, origin)
    return bad


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def summarize(history, windows, kinds):
    """Per fault kind: rounds, operations, unavailability, latency during faults, healing."""
    # answered: a token, a 1/0 or a null (the lock is held) is an answer the cluster committed
    # or read linearizably; unavailability is the longest time with no answer anywhere
    answered = sorted(o["r"] for o in history if o["res"] in ("ok", "null"))
    sends = [o["s"] for o in history]  # the history is sorted by send time
    rows = []
    for kind in kinds:
        ws = [w for w in windows if w["kind"] == kind]
        if not ws:
            continue
        gaps, lat, ops = [], [], 0
        for w in ws:
            # from the fault to the check after healing (the clients are held back for that)
            lo, hi = w["t0"], w.get("gated", w["t1"])
            k = bisect.bisect_right(answered, lo)
            prev, gap = lo, 0.0
            while k < len(answered) and answered[k] <= hi:
                gap = max(gap, answered[k] - prev)
                prev = answered[k]
                k += 1
            gap = max(gap, hi - prev) if prev < hi else gap
            gaps.append(gap)
            for o in history[bisect.bisect_left(sends, w["t0"]):
                             bisect.bisect_right(sends, w["t1"])]:
                ops += 1
                if o["res"] in ("ok", "null"):
                    lat.append(o["r"] - o["s"])
        heal = [w["converged"] for w in ws if w.get("converged") is not None]
        rows.append({
            "kind": kind, "rounds": len(ws), "ops": ops,
            "unavail_p50_ms": 1000 * percentile(gaps, 50),
            "unavail_max_ms": 1000 * max(gaps),
            "lat_p50_ms": 1000 * (percentile(lat, 50) or 0),
            "lat_p99_ms": 1000 * (percentile(lat, 99) or 0),
            "heal_max_ms": 1000 * max(heal) if heal else float("nan"),
        })
    return rows


# ----------------------------------------------------------------------------- the faults


class Controller:
    def __init__(self, cluster, clients, rng, log, hold=None):
        self.cluster, self.clients, self.rng, self.log = cluster, clients, rng, log
        # how long a pause, a cut or a combined fault lasts; None: 3 election timeouts for a
        # pause, 2.5 s for the others (shorter than cluster-wait-leader-ms)
        self.hold = hold
        self.windows = []
        self.convergence_failures = []

    def others(self, slot):
        return [n.slot for n in self.cluster.nodes if n.slot != slot]

    def round(self, number, kind):
        c = self.cluster
        leader = c.leader()
        followers = self.others(leader)
        w = {"kind": kind, "round": number, "isolated": [], "t0": now()}
        if kind == "kill-leader":
            self.kill_and_restart([leader], hold=2.0)
        elif kind == "kill-follower":
            self.kill_and_restart([self.rng.choice(followers)], hold=2.0)
        elif kind == "kill-two":
            self.kill_and_restart([leader, self.rng.choice(followers)], hold=2.0)
        elif kind == "pause-leader":
            node = c.nodes[leader]
            w["isolated"] = [leader]
            stopped = now()
            node.pause()
            w["iso0"] = now()
            time.sleep(self.hold or 3 * ELECTION_TIMEOUT_MS / 1000.0)
            w["iso1"] = now()
            node.signal(signal.SIGCONT)
            w["paused"] = [(leader, stopped, now())]
        elif kind in PARTITION_KINDS:
            if kind == "partition-leader":
                minority = [leader]
            elif kind == "partition-follower":
                minority = [self.rng.choice(followers)]
            else:  # a clean split: the leader and as many others as keep it a minority
                size = (len(c.nodes) - 1) // 2
                minority = [leader] + self.rng.sample(followers, size - 1)
            majority = [s for s in range(len(c.nodes)) if s not in minority]
            w["isolated"] = minority
            c.net.cut(minority, majority)
            w["iso0"] = now()
            time.sleep(self.hold or 2.5)
            w["iso1"] = now()
            c.net.heal(minority)
        elif kind == "combined":
            self.combined(w, leader, followers)
        elif kind == "wipe-follower":
            self.wipe_and_replace(self.rng.choice(followers))
        elif kind == "slow-disk":
            slot = leader if number % 2 == 0 else self.rng.choice(followers)
            node = c.nodes[slot]
            with open(node.slow_file, "w") as f:
                f.write("40")
            time.sleep(3.0)
            with open(node.slow_file, "w") as f:
                f.write("0")
            w["slow"] = slot
        else:
            raise ValueError(kind)
        w["t1"] = now()
        self.windows.append(w)
        # after healing: one leader, then (clients held back) equal state everywhere in 5 s
        try:
            c.leader(timeout=15.0)
            w["gated"] = now()
            self.clients.pause()
            w["converged"] = c.converged(timeout=5.0)
        except Failure as e:
            self.convergence_failures.append(
                ("healing", f"{kind} round {number}: {e}", []))
            self.log(f"round {number}: not converged; each node's view of every name:\n"
                     + self.views() + "\n" + apply_parting(self.cluster.nodes))
            w["converged"] = None
        finally:
            self.clients.resume()
        self.log(f"round {number:3d} {kind:18s} fault {w['t1'] - w['t0']:5.2f} s, "
                 f"healed in {(w['converged'] or float('nan')) * 1000:5.0f} ms")

    def views(self):
        """Each node's own FLOCK.STATUS of every name (last-token/token, as a read there sees
        it), one line per name: what differs when the nodes' digests do."""
        lines = []
        for name in self.clients.names:
            seen = []
            for n in self.cluster.nodes:
                try:
                    st = n.call("FLOCK.STATUS", name, timeout=2.0)
                    if isinstance(st, dict):
                        f = {(k.decode() if isinstance(k, bytes) else k): v
                             for k, v in st.items()}
                    else:
                        it = iter(st)
                        f = {k.decode(): v for k, v in zip(it, it)}
                    seen.append(f"{int(f['last-token'])}/{f['token']}")
                except Exception as e:  # a node that does not answer says so
                    seen.append(f"({type(e).__name__})")
            lines.append(f"  {name}: " + "  ".join(seen))
        return "\n".join(lines)

    def combined(self, w, leader, followers):
        """Two faults at once on two nodes (the leader one time in two): each killed, paused
        or cut off (cut only with namespaces). On 3 nodes that leaves no majority: no node may
        answer anything but an error until it heals."""
        c = self.cluster
        first = leader if self.rng.random() < 0.5 else self.rng.choice(followers)
        second = self.rng.choice([s for s in range(len(c.nodes)) if s != first])
        actions = ["kill", "pause"] + (["cut"] if c.net is not None else [])
        plan = [(first, self.rng.choice(actions)), (second, self.rng.choice(actions))]
        w["plan"] = plan
        stopped = {}
        for slot, action in plan:
            if action == "kill":
                c.nodes[slot].kill9()
            elif action == "pause":
                stopped[slot] = now()
                c.nodes[slot].pause()
            else:
                c.net.cut([slot], [s for s in range(len(c.nodes)) if s != slot])
        w["iso0"] = now()
        left = len(c.nodes) - len(plan)
        if left < len(c.nodes) // 2 + 1:
            w["isolated"] = list(range(len(c.nodes)))
        else:
            w["isolated"] = [slot for slot, action in plan if action != "kill"]
        time.sleep(self.hold or 2.5)
        w["iso1"] = now()
        for slot, action in plan:
            if action == "kill":
                c.nodes[slot].start(c.peers())
            elif action == "pause":
                c.nodes[slot].signal(signal.SIGCONT)
                w.setdefault("paused", []).append((slot, stopped[slot], now()))
            else:
                c.net.heal([slot])
        for slot, action in plan:
            if action == "kill":
                c.wait_answers(c.nodes[slot])

    def kill_and_restart(self, slots, hold):
        c = self.cluster
        for s in slots:
            c.nodes[s].kill9()
        time.sleep(hold)
        for s in slots:
            c.nodes[s].start(c.peers())
        for s in slots:
            c.wait_answers(c.nodes[s])

    def wipe_and_replace(self, slot):
        """A follower loses its dir. Started again under its old id it must be refused (it
        forgot its vote) and stop with the procedure; then the procedure: remove it, start it
        empty under a new id, add it."""
        c = self.cluster
        node = c.nodes[slot]
        old = node.id
        node.kill9()
        shutil.rmtree(node.dir, ignore_errors=True)
        node.start(c.peers())
        try:
            code = node.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill9()
            raise Failure(f"node {old}, wiped and started again under its old id, was not "
                          f"refused within 20 s:\n{node.log_tail()}")
        tail = node.log_tail(40)
        if code == 0 or "FLOCK.CLUSTER REMOVE" not in tail:
            raise Failure(f"node {old}, wiped, exited {code} without the procedure:\n{tail}")
        node.proc = None
        shutil.rmtree(node.dir, ignore_errors=True)
        c.on_leader("FLOCK.CLUSTER", "REMOVE", old)
        node.id = c.next_id
        c.next_id += 1
        c.joining.add(slot)
        node.start(c.peers())
        c.wait_answers(node)
        c.on_leader("FLOCK.CLUSTER", "ADD", node.id, node.addr())
        c.joining.discard(slot)


def group_of(name, groups):
    """The group serving `name`: its Redis Cluster slot, in even contiguous ranges."""
    from redis.crc import key_slot
    return (key_slot(name.encode()) * groups + groups - 1) // 16384


def names_over_groups(count, groups):
    """`count` lock names, as evenly over the groups as `count` allows."""
    if groups <= 1:
        return [f"fault:{i}" for i in range(count)]
    share = -(-count // groups)
    per_group = {g: [] for g in range(groups)}
    i = 0
    while sum(len(v) for v in per_group.values()) < count:
        name = f"fault:{i}"
        g = group_of(name, groups)
        if len(per_group[g]) < share:
            per_group[g].append(name)
        i += 1
    return sorted(n for v in per_group.values() for n in v)[:count]


def final_state(cluster, names):
    """Every name's counter, holding and fence token, read through one node (linearizable)."""
    c = cluster
    node = c.nodes[c.leader()]
    out = {}
    for name in names:
        status = node.call("FLOCK.STATUS", name, timeout=5.0)
        if isinstance(status, dict):
            fields = {k.decode() if isinstance(k, bytes) else k: v for k, v in status.items()}
        else:
            it = iter(status)
            fields = {k.decode(): v for k, v in zip(it, it)}
        out[name] = {
            "last-token": int(fields["last-token"]),
            "locked": int(fields["locked"]) == 1,
            "token": None if fields["token"] is None else int(fields["token"]),
            "fence-token": int(node.call("FENCE.TOKEN", "f:" + name, timeout=5.0)),
        }
    return out


def self_test():
    """The checker against small hand-made histories: a clean one passes, and each kind of
    violation is found and named. Runs before every harness run (no root needed)."""
    def op(c, kind, s, r, res="ok", v=None, tok=None, lease=None, node=0, name="n", **more):
        return dict({"c": c, "node": node, "op": kind, "name": name, "tok": tok, "lease": lease,
                     "s": s, "r": r, "res": res, "v": v}, **more)

    def clean():  # tokens may skip numbers (a grant whose answer was lost)
        return [
            op(1, "acquire", 0.0, 0.01, v=10, lease=1000),
            op(1, "fence-set", 0.02, 0.03, v=1, tok=10),
            op(1, "release", 0.04, 0.05, v=1, tok=10),
            op(2, "acquire", 0.06, 0.07, v=20, lease=500),
            op(2, "renew", 0.08, 0.09, v=1, tok=20, lease=300),
            op(3, "acquire", 0.40, 0.41, v=30, lease=1000),  # 20's lease, renewed, ended by 0.38
            op(4, "token", 0.42, 0.43, v=30),
            op(4, "fence-token", 0.44, 0.45, v=10),
        ]
    final = {"n": {"last-token": 30, "locked": True, "token": 30, "fence-token": 10}}
    limit = WAIT_LEADER_MS / 1000.0
    slack = LATE_SLACK_MS / 1000.0
    late = limit + slack + 0.2
    pause = {"kind": "pause-leader", "round": 1, "isolated": [], "t0": 0.9,
             "paused": [(2, 1.0, 2.5)]}

    def in_time():  # answers by the limit (+ slack), each path; none is a violation
        return clean() + [
            op(8, "acquire", 1.0, 1.0 + limit + 0.1, res="err", v="CLUSTERDOWN no leader",
               lease=1000, node=1),
            op(8, "acquire", 5.0, 5.0 + limit + slack - 0.01, res="null", lease=1000, node=1),
            # sent to a node while it was SIGSTOPped: counted from its SIGCONT at 2.5
            op(9, "renew", 1.5, 2.5 + limit + 0.2, res="err", v="NOTOWNER", tok=10,
               lease=500, node=2),
            # a blocking acquire may take its WAIT more
            op(10, "acquire", 6.0, 6.0 + 2.0 + limit, res="null", lease=1000, wait=2000),
            # a connection lost is no answer
            op(11, "token", 7.0, 7.0 + 2 * late, res="unknown", v="Connection closed",
               lost="closed"),
        ]
    cases = [
        (None, clean(), final, []),
        (None, in_time(), final, [pause]),
        ("late answer", clean() + [op(8, "acquire", 1.0, 1.0 + late, res="null", lease=1000,
                                      node=1)], final, []),
        ("late answer", clean() + [op(8, "release", 1.0, 1.0 + late, res="err",
                                      v="CLUSTERDOWN no leader", tok=10, node=1)], final, []),
        ("late answer", clean() + [op(10, "acquire", 6.0, 6.0 + 2.0 + late, res="null",
                                      lease=1000, wait=2000)], final, []),
        ("late answer", clean() + [op(9, "renew", 2.6, 2.6 + late, res="err", v="NOTOWNER",
                                      tok=10, lease=500, node=2)], final, [pause]),
        ("unanswered past the limit", clean() + [
            op(11, "token", 7.0, 7.0 + CLIENT_TIMEOUT_S, res="unknown",
               v="Timeout reading from socket", lost="timeout")], final, []),
        ("unique tokens", clean() + [op(5, "acquire", 0.395, 0.415, v=30, lease=10)], final,
         []),
        ("tokens in real-time order",
         clean() + [op(5, "acquire", 3.0, 3.01, v=25, lease=10)], final, []),
        ("lease length", [o for o in clean() if o["op"] != "renew"], final, []),
        # the renewal that shortened 20's lease answered -CLUSTERDOWN: it may have been applied
        (None, [dict(o, res="err", v="CLUSTERDOWN no leader") if o["op"] == "renew" else o
                for o in clean()], final, []),
        ("stale read", clean() + [op(6, "token", 0.5, 0.51, v=20)], final, []),
        ("final state", clean(), {"n": dict(final["n"], **{"last-token": 20})}, []),
        ("isolated node answered",
         clean() + [op(7, "token", 0.6, 0.61, v=30, node=1)], final,
         [{"kind": "partition-follower", "round": 1, "isolated": [1], "iso0": 0.55,
           "iso1": 0.7, "t0": 0.5}]),
    ]
    for expected, history, fin, windows in cases:
        history = sorted(history, key=lambda o: o["s"])
        found = {what for what, _, _ in check(history, windows, fin, [])}
        want = set() if expected is None else {expected}
        if found != want:
            sys.exit(f"checker self-test: a history with {expected or 'no violation'} "
                     f"gave {sorted(found) or 'none'}")
    # the histogram: each answer in its kind, class and bucket; no answer counted apart
    history = sorted(in_time(), key=lambda o: o["s"])
    table = {r["kind"]: r for r in answer_times(history, [pause], ["pause-leader"])}
    nofault, paused = table["no fault"]["classes"], table["pause-leader"]["classes"]
    # the CLUSTERDOWN took 3.1 s (< 3.5 s), the paused node's error 4.2 s (>= 4 s)
    got = (nofault["all"]["n"], paused["CLUSTERDOWN"]["buckets"][5], paused["null"]["n"],
           paused["error"]["buckets"][-1], table["pause-leader"]["closed"],
           paused["all"]["n"])
    if got != (8, 1, 1, 1, 1, 3):
        sys.exit(f"checker self-test: answer-time histogram {got}, expected (8, 1, 1, 1, 1, 3)")
    # the apply traces: a node that applied another entry at an index is named there; a
    # restart that applies an index again the same way is not a difference
    root = tempfile.mkdtemp(prefix="flockd-traces-")
    try:
        nodes = []
        traces = [["START 5 pid 1", "APPLY 6 3.2 blank", "START 5 pid 4", "APPLY 6 3.2 blank",
                   "APPLY 7 3.2 x"],
                  ["START - pid 2", "APPLY 6 3.2 acquire", "APPLY 7 3.2 x"],
                  ["START - pid 3", "APPLY 6 3.2 blank"]]
        for number, lines in enumerate(traces, start=1):
            node = argparse.Namespace(id=number, dir=os.path.join(root, f"node{number}"))
            os.makedirs(os.path.join(node.dir, "raft", "group-2"))
            with open(os.path.join(node.dir, "raft", "applied.trace"), "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(os.path.join(node.dir, "raft", "group-2", "applied.trace"), "w") as f:
                f.write("START - pid 9\nAPPLY 1 1.1 blank\n")
            nodes.append(node)
        got = apply_parting(nodes).splitlines()
        want = ["  group-1: the apply traces differ at 1 of 2 indexes, first at:",
                "    6 node 1 (run 1), node 1 (run 2), node 3 (run 1): 3.2 blank",
                "    6 node 2 (run 1): 3.2 acquire",
                "  group-2: the apply traces agree on every index (1 seen)"]
        if got != want:
            sys.exit(f"checker self-test: apply traces compared as {got}, expected {want}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- main


def netns_available():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"flkfprobe{os.getpid()}"
    ok = sh("ip", "netns", "add", probe, check=False).returncode == 0
    sh("ip", "netns", "del", probe, check=False)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("FLOCKD_BIN", "target/release/flockd"))
    ap.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    ap.add_argument("--mode", choices=("auto", "netns", "loopback"), default="auto")
    ap.add_argument("--kinds", default="all",
                    help="comma-separated fault kinds, or 'all' (each in turn)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    ap.add_argument("--mix", action="store_true",
                    help="the rounds in a random order instead of kind by kind")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--names", type=int, default=8)
    ap.add_argument("--groups", type=int, default=1,
                    help="cluster-groups: Raft groups the slots are spread over; the names "
                         "are picked so that every group has its share")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FLOCKD_FAULT_SEED", "0"))
                    or random.randrange(1, 1 << 30))
    ap.add_argument("--max-seconds", type=float, default=600.0,
                    help="stop starting rounds after this long")
    ap.add_argument("--keep", help="keep the nodes' dirs, logs and the history in this folder")
    ap.add_argument("--json", help="write the summary rows here")
    ap.add_argument("--wait-leader-ms", type=int, default=WAIT_LEADER_MS,
                    help="cluster-wait-leader-ms given to every node: no answer may come later "
                    "(default %(default)s, the contract's)")
    ap.add_argument("--late-slack-ms", type=int, default=LATE_SLACK_MS,
                    help="client-side slack allowed over that limit (default %(default)s)")
    ap.add_argument("--client-timeout", type=float, default=CLIENT_TIMEOUT_S,
                    help="the clients' socket timeout in seconds (default %(default)s); must be "
                    "well above the limit plus slack")
    ap.add_argument("--hold", type=float,
                    help="seconds a pause, a cut or a combined fault lasts (default: 3 election "
                    "timeouts for a pause, 2.5 s for the others); longer than "
                    "cluster-wait-leader-ms, commands wait out the limit under the fault")
    ap.add_argument("--snapshot-every", type=int,
                    help="a Raft snapshot every this many log entries (the nodes' test-only "
                    "FLOCKD_TEST_SNAPSHOT_EVERY; default 50,000, more than a short run writes), "
                    "so that the faults meet snapshots built, sent and restarted from")
    ap.add_argument("--self-test", action="store_true",
                    help="only check the checker against hand-made histories")
    args = ap.parse_args()
    self_test()
    if args.self_test:
        print("checker self-test: every violation found, none in the clean history")
        return

    if args.snapshot_every is not None:
        os.environ["FLOCKD_TEST_SNAPSHOT_EVERY"] = str(args.snapshot_every)  # the nodes inherit it
    wait_leader_s, slack_s = args.wait_leader_ms / 1000.0, args.late_slack_ms / 1000.0
    if args.client_timeout < wait_leader_s + slack_s + 2.0:
        sys.exit(f"--client-timeout {args.client_timeout:g} s: keep it at least 2 s above the "
                 f"limit plus slack ({wait_leader_s + slack_s:g} s), or late answers are lost "
                 "as timeouts")
    mode = args.mode
    if mode == "auto":
        mode = "netns" if netns_available() else "loopback"
    elif mode == "netns" and not netns_available():
        sys.exit("--mode netns: cannot create network namespaces here (root and iproute2 needed)")
    kinds = KINDS if args.kinds == "all" else args.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            sys.exit(f"unknown fault kind {k!r}; kinds: {', '.join(KINDS)}")
    skipped = []
    if mode == "loopback":
        skipped += [k for k in kinds if k in PARTITION_KINDS]
    if args.nodes == 3:
        skipped += [k for k in kinds if k == "kill-two"]
    kinds = [k for k in kinds if k not in skipped]
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        sys.exit(f"no flockd binary at {binary} (build it, or give --bin)")
    if mode == "netns" and shutil.which("nft") is None and any(k in PARTITION_KINDS for k in kinds):
        sys.exit("the partition faults need nft (Debian's nftables)")

    root = args.keep or tempfile.mkdtemp(prefix="flockd-faults-")
    os.makedirs(root, exist_ok=True)
    rng = random.Random(args.seed)
    started = now()

    def log(text):
        print(f"[{now() - started:7.1f}s] {text}", flush=True)

    log(f"{args.nodes} nodes, {args.groups} group(s), mode {mode}, seed {args.seed}, {args.clients} clients, "
        f"cluster-wait-leader-ms {args.wait_leader_ms} (+ {args.late_slack_ms} ms slack), "
        f"client timeout {args.client_timeout:g} s, "
        f"{args.rounds} round(s) of: {', '.join(kinds)}"
        + (f"; skipped here: {', '.join(skipped)}" if skipped else ""))
    net = Network(args.nodes) if mode == "netns" else None
    cluster = None
    clients = None

    def cleanup():
        if clients is not None:
            clients.stop.set()
            clients.gate.set()
        if cluster is not None:
            cluster.stop_all()
        if net is not None:
            net.down()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    violations = []
    try:
        if net is not None:
            net.up()
            net.enter_client_namespace()
        cluster = Cluster(args.nodes, mode, root, binary, net,
                          wait_leader_ms=args.wait_leader_ms, groups=args.groups)
        cluster.start_all()
        cluster.leader(timeout=30.0)
        names = names_over_groups(args.names, args.groups)
        clients = Clients(cluster, args.clients, names, args.seed, timeout=args.client_timeout)
        clients.start()
        time.sleep(1.0)
        controller = Controller(cluster, clients, rng, log, hold=args.hold)
        plan = [k for k in kinds for _ in range(args.rounds)]
        if args.mix:
            rng.shuffle(plan)
        for number, kind in enumerate(plan, 1):
            if now() - started > args.max_seconds:
                log(f"stopping after {number - 1} rounds: --max-seconds {args.max_seconds:.0f}")
                break
            try:
                controller.round(number, kind)
            except Failure as e:
                controller.convergence_failures.append((kind, f"round {number}: {e}", []))
                log(f"round {number} {kind}: {e}")
                break
            time.sleep(0.5)
        clients.finish()
        time.sleep(0.2)
        history = clients.history()
        try:
            cluster.converged(timeout=10.0)
            final = final_state(cluster, names)
        except Failure as e:
            controller.convergence_failures.append(("final", str(e), []))
            final = {}
        violations = check(history, controller.windows, final,
                           controller.convergence_failures, wait_leader_s=wait_leader_s,
                           slack_s=slack_s, origin=started)
        rows = summarize(history, controller.windows, kinds)
        times = answer_times(history, controller.windows, kinds)
        if args.keep:
            with open(os.path.join(root, "history.jsonl"), "w") as f:
                for op in history:
                    f.write(json.dumps(op) + "\n")
            with open(os.path.join(root, "windows.json"), "w") as f:
                json.dump({"origin": started, "windows": controller.windows}, f, indent=1)
        counts = {}
        for op in history:
            counts[op["res"]] = counts.get(op["res"], 0) + 1
        print()
        print(f"{args.nodes} nodes, {mode}, seed {args.seed}: {len(controller.windows)} rounds, "
              f"{len(history)} operations ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), "
              f"{now() - started:.0f} s")
        print(f"{'fault':18s} {'rounds':>6s} {'ops':>7s} {'unavail p50':>11s} {'max':>7s} "
              f"{'lat p50':>8s} {'p99':>7s} {'heal max':>8s}")
        for r in rows:
            print(f"{r['kind']:18s} {r['rounds']:6d} {r['ops']:7d} {r['unavail_p50_ms']:9.0f}ms "
                  f"{r['unavail_max_ms']:5.0f}ms {r['lat_p50_ms']:6.1f}ms {r['lat_p99_ms']:5.0f}ms "
                  f"{r['heal_max_ms']:6.0f}ms")
        print_answer_times(times, wait_leader_s, slack_s)
        late = sum(1 for v in violations if v[0] in ("late answer", "unanswered past the limit"))
        print(f"answers later than {wait_leader_s:g} s + {slack_s:g} s slack (or none by the "
              f"client timeout): {late}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"nodes": args.nodes, "mode": mode, "seed": args.seed,
                           "operations": len(history), "rows": rows,
                           "wait_leader_ms": args.wait_leader_ms,
                           "late_slack_ms": args.late_slack_ms,
                           "answer_buckets_s": list(ANSWER_BUCKETS_S), "answer_times": times,
                           "late_answers": late,
                           "violations": len(violations)}, f, indent=1)
    except Failure as e:
        violations.append(("harness", str(e), []))
    if violations:
        by_check = {}
        for v in violations:
            by_check.setdefault(v[0], []).append(v)
        print(f"\nFAILED: {len(violations)} violation(s): "
              + ", ".join(f"{what} {len(vs)}" for what, vs in by_check.items())
              + "; the first of each:")
        for what, vs in by_check.items():
            for _, text, ops in vs[:10]:
                print(f"  [{what}] {text}")
                for op in ops:
                    print(f"      {json.dumps(op)}")
        if cluster is not None:
            for n in cluster.nodes:
                print(f"--- slot {n.slot} (id {n.id}), last lines of its log\n{n.log_tail()}")
        sys.exit(1)
    print("\nno violations")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What several Raft groups cost (docs/benchmarks.md, "Several groups"): 3-node clusters of one
flockd build on loopback ports with `--cluster-groups` 1 and 4 (or --groups), in rounds that
alternate which goes first. Each round waits for the leaders to settle and spread, measures the
three processes' CPU (utime + stime from /proc) for 10 s idle, then for redis-benchmark's
acquires (64 connections, long leases): with several groups `--cluster`, so each acquire goes
straight to its group's leader; with one group straight to the leader (redis-benchmark refuses
a cluster of one master). Prints, per round and as medians: server CPU per acquire (the three
members together), acquires/s, idle CPU and RSS per member, and the ratio to one group.

With `--rate R` the load is the same for every G instead of as much as each takes: 64
connections, each sending its next acquire at its own fixed times (R per second in all, spread
evenly), every name with a hash tag that puts it in one group, to that group's leader as
CLUSTER SLOTS names it, for `--seconds` seconds. Flat out, one group goes faster than four and
so gathers more ops in each entry and sync; at one rate both carry the same ops per second.

    python3 tests/groups_cost.py --flockd target/release/flockd [--rounds 3] [--groups 1,4]
    python3 tests/groups_cost.py --flockd target/release/flockd --rate 10000 [--seconds 8]

Each member runs `--member-workers` runtime workers: by default the cores over the three
members, at least one, as docs/cluster.md advises for members that share a machine.

Needs redis-benchmark and redis-cli (Debian's redis-tools). Every process it starts is stopped
by its pid; its dirs are removed.
"""
import argparse
import asyncio
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def info(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "replication"],
                         capture_output=True, text=True, timeout=5).stdout
    return dict(line.split(":", 1) for line in out.replace("\r", "").splitlines() if ":" in line)


class Cluster:
    def __init__(self, binary, groups, workers):
        self.groups = groups
        self.root = tempfile.mkdtemp(prefix="flockd-groups-cost-")
        ports = free_ports(6)
        self.ports, cports = ports[:3], ports[3:]
        peers = ",".join(f"{i + 1}=127.0.0.1:{self.ports[i]}@{cports[i]}" for i in range(3))
        self.procs = []
        for i in range(3):
            log = open(os.path.join(self.root, f"node{i + 1}.log"), "w")
            self.procs.append(subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(self.ports[i]),
                 "--dir", os.path.join(self.root, f"node{i + 1}"), "--node-id", str(i + 1),
                 "--cluster-peers", peers, "--cluster-groups", str(groups),
                 "--worker-threads", str(workers)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                env=dict(os.environ, FLOCKD_LOG_LEVEL="warn")))

    def settle(self, timeout=60.0):
        """Waits until every group has a leader and none leads more than its share."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                infos = [info(p) for p in self.ports]
                if self.groups == 1:
                    led = [int(i.get("raft_state") == "leader") for i in infos]
                else:
                    led = [int(i.get("raft_groups_led", 0)) for i in infos]
                if sum(led) == self.groups and max(led) <= -(-self.groups // 3):
                    return
            except (subprocess.SubprocessError, ValueError):
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.groups} group(s): the leaders did not settle in {timeout:.0f} s")

    def cpu(self):
        return sum(cpu_s(p.pid) for p in self.procs)

    def load(self, n):
        if self.groups == 1:
            leader = next(p for p in self.ports if info(p).get("raft_state") == "leader")
            args = ["-p", str(leader), "FLOCK.ACQUIRE", "lock:__rand_int__", "6000000"]
        else:
            args = ["--cluster", "-p", str(self.ports[0]),
                    "FLOCK.ACQUIRE", "lock:{tag}:__rand_int__", "6000000"]
        out = subprocess.run(["redis-benchmark", "-c", "64", "-n", str(n), "-r", "10000000"] + args,
                             capture_output=True, text=True, timeout=900).stdout
        found = re.search(r"throughput summary: ([\d.]+)", out)
        if not found:
            raise SystemExit(f"redis-benchmark gave no throughput:\n{out[-2000:]}")
        return float(found.group(1))

    def paced(self, rate, seconds, connections=64):
        """Acquires at `rate` per second in all for `seconds` (see the module's text); returns
        how many were answered."""
        import redis  # only for the two setup calls; the load itself is raw RESP
        first = redis.Redis(host="127.0.0.1", port=self.ports[0])
        targets = []
        for start, end, master, *_ in first.execute_command("CLUSTER", "SLOTS"):
            tag = next(f"g{k}" for k in range(100_000)
                       if start <= first.execute_command("CLUSTER", "KEYSLOT", f"g{k}") <= end)
            targets.append((int(master[1]), tag))
        first.close()
        interval = connections / rate

        async def one(i, begin, stop):
            port, tag = targets[i % len(targets)]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            due, answered = begin + interval * i / connections, 0
            while due < stop:
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                due += interval
                name = f"lock:{{{tag}}}:{random.randrange(10_000_000)}".encode()
                writer.write(b"*3\r\n$13\r\nFLOCK.ACQUIRE\r\n$%d\r\n%s\r\n$7\r\n6000000\r\n"
                             % (len(name), name))
                reply = await reader.readline()
                if reply.startswith(b"-"):
                    raise SystemExit(f"an acquire on port {port} failed: {reply!r}")
                answered += 1
            writer.close()
            return answered

        async def run():
            begin = time.monotonic() + 0.2
            counts = await asyncio.gather(*(one(i, begin, begin + seconds)
                                            for i in range(connections)))
            return sum(counts)

        return asyncio.run(asyncio.wait_for(run(), timeout=seconds + 60))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flockd", default="target/release/flockd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", default="1,4")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=int, help="acquires/s offered to every G alike (paced)")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long a paced load runs")
    ap.add_argument("--member-workers", type=int, default=0,
                    help="runtime workers per member; 0: the cores over the three members, "
                         "at least one (docs/cluster.md)")
    args = ap.parse_args()
    if args.rate is not None and not (0 < args.rate <= 1_000_000 and 0 < args.seconds <= 600):
        ap.error("--rate takes 1 to 1000000 acquires/s, --seconds more than 0 and at most 600")
    workers = args.member_workers or max(1, (os.cpu_count() or 1) // 3)
    print(f"each member runs {workers} runtime worker thread(s)", flush=True)
    groups = [int(g) for g in args.groups.split(",")]
    rows = {g: [] for g in groups}
    for r in range(args.rounds):
        for g in (groups if r % 2 == 0 else groups[::-1]):
            cluster = Cluster(os.path.abspath(args.flockd), g, workers)
            try:
                cluster.settle()
                time.sleep(2)
                before, started = cluster.cpu(), time.monotonic()
                time.sleep(10)
                idle = (cluster.cpu() - before) / (time.monotonic() - started)
                rss = statistics.mean(rss_kib(p.pid) for p in cluster.procs) / 1024
                before, started = cluster.cpu(), time.monotonic()
                if args.rate:
                    done = cluster.paced(args.rate, args.seconds)
                    rps = done / (time.monotonic() - started - 0.2)
                else:
                    done = args.requests
                    rps = cluster.load(done)
                us = (cluster.cpu() - before) / done * 1e6
            finally:
                cluster.stop()
            rows[g].append((us, rps, idle * 100, rss))
            print(f"round {r + 1}, {g} group(s): {us:.1f} µs CPU per acquire (3 members), "
                  f"{rps:,.0f} acquires/s, idle {idle * 100:.2f}% of a core (3 members), "
                  f"RSS {rss:.1f} MiB per member", flush=True)
    base = statistics.median(x[0] for x in rows[groups[0]])
    # The medians' ratio, and the median of each round's own ratio (the two clusters of a
    # round ran minutes apart, so a round's ratio leaves out the machine's slower drifts).
    print("| groups | µs CPU per acquire | acquires/s | idle CPU, 3 members | RSS per member | "
          f"CPU per acquire / {groups[0]} group(s) | median of the rounds' ratios |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for g in groups:
        med = [statistics.median(x[k] for x in rows[g]) for k in range(4)]
        paired = statistics.median(a[0] / b[0] for a, b in zip(rows[g], rows[groups[0]]))
        print(f"| {g} | {med[0]:.1f} | {med[1]:,.0f} | {med[2]:.2f}% | {med[3]:.1f} MiB | "
              f"{med[0] / base:.2f} | {paired:.2f} |")


if __name__ == "__main__":
    main()

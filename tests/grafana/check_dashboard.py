"""config/grafana/flockd.json against a real Prometheus: a single flockd and a 3-node cluster,
each with its metrics port, scraped every second under a short load that exercises what the
panels show (grants, busy answers, waits granted and timed out, expiries, force-releases,
fenced writes accepted and refused, commands forwarded by a follower, a leadership transfer).
Then every query of every panel, with the dashboard's variables filled in, goes to Prometheus's
HTTP query API and must return at least one series with a finite value.

    python3 tests/grafana/check_dashboard.py --bin target/debug/flockd

Needs prometheus (Debian's package) and redis-py. Every process it starts is stopped by pid;
the load and every wait are bounded in time. Prints `ok   NAME` / `FAIL NAME` per check.
"""

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import redis

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "config", "grafana", "flockd.json")
# What Grafana would put in for the dashboard's variables: every job, and a rate window that
# holds several 1 s scrapes.
VARIABLES = {"$job": ".+", "$__rate_interval": "15s", "${datasource}": "prometheus"}
LOAD_SECONDS = 20
QUERY_DEADLINE_SECONDS = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Everything started here, stopped by pid (SIGTERM, then SIGKILL after 10 s)."""

    def __init__(self, work):
        self.work = work
        self.procs = {}

    def start(self, name, argv):
        log = open(os.path.join(self.work, f"{name}.log"), "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        return self.procs[name]

    def log(self, name, lines=20):
        with open(os.path.join(self.work, f"{name}.log"), "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")

    def stop_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(what, check, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError, ValueError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"gave up waiting for {what} after {seconds} s")


def client(port):
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, protocol=2,
                       decode_responses=True)


def load(ports, stop, errors):
    """Bounded by `stop`: the traffic each panel needs, on one node (or through a follower)."""
    a, b = client(ports[0]), client(ports[-1])

    def call(conn, *argv):
        try:
            return conn.execute_command(*argv)
        except redis.ResponseError:
            return None  # NOTOWNER and friends are part of the load
        except (redis.RedisError, OSError) as e:
            errors.append(repr(e))
            time.sleep(0.2)
            return None

    n = 0
    while not stop.is_set() and n < 100_000:
        n += 1
        name = f"dash:{n % 20}"
        token = call(a, "FLOCK.ACQUIRE", name, 60000)
        call(b, "FLOCK.ACQUIRE", name, 60000)  # busy
        if token is not None:
            call(a, "FLOCK.RENEW", name, token, 60000)
            call(a, "FENCE.SET", f"{name}:data", token, "v")
            call(a, "FENCE.SET", f"{name}:data", max(1, token - 1), "late")  # refused
            call(a, "FLOCK.RELEASE", name, token)
        call(a, "FLOCK.RELEASE", name, 999999)  # NOTOWNER
        if n % 5 == 0:
            # A wait that runs out, one granted when the holder releases, a lease that
            # expires, and a force-release.
            held = call(a, "FLOCK.ACQUIRE", "dash:held", 60000)
            call(b, "FLOCK.ACQUIRE", "dash:held", 1000, "WAIT", 20)
            if held is not None:
                # redis-py's pool gives the timer's thread a connection of its own.
                threading.Timer(0.05, call, (a, "FLOCK.RELEASE", "dash:held", held)).start()
            waited = call(b, "FLOCK.ACQUIRE", "dash:held", 60000, "WAIT", 3000)
            if waited is not None:
                call(b, "FLOCK.RELEASE", "dash:held", waited)
            call(a, "FLOCK.ACQUIRE", f"dash:short:{n}", 200)
            call(a, "FLOCK.ACQUIRE", "dash:taken", 60000)
            call(a, "FLOCK.FORCERELEASE", "dash:taken")


def prometheus_query(web, expr):
    url = f"http://{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise ValueError(f"query failed: {body}")
    return body["data"]["result"]


def finite_values(result):
    values = []
    for series in result:
        try:
            v = float(series["value"][1])
        except (KeyError, IndexError, ValueError):
            continue
        if math.isfinite(v):
            values.append(v)
    return values


def fill(expr):
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def check_shape(dashboard, report):
    """What Grafana needs to import it: panels with a type, a place and Prometheus targets,
    rows, and the `job` variable."""
    names = [v["name"] for v in dashboard.get("templating", {}).get("list", [])]
    report("the `job` and data-source variables", "job" in names and "datasource" in names, names)
    panels = dashboard.get("panels", [])
    rows = [p for p in panels if p.get("type") == "row"]
    graphs = [p for p in panels if p.get("type") != "row"]
    report(f"{len(rows)} rows, {len(graphs)} panels", len(rows) >= 6 and len(graphs) >= 12, "")
    bad = [p.get("title") for p in graphs
           if not p.get("targets") or "gridPos" not in p
           or any(not t.get("expr") for t in p["targets"])
           or any("$job" not in t["expr"] for t in p["targets"])]
    report("every panel has a place and queries that honour $job", not bad, bad)
    ids = [p["id"] for p in panels]
    report("panel ids are unique", len(ids) == len(set(ids)), ids)
    # One way to name the data source: the `datasource` variable, which works both for an
    # import (Grafana asks which Prometheus) and for file provisioning, where `__inputs` is never
    # read and a `${DS_...}` placeholder stays unresolved. An `__inputs` entry nobody uses, or a
    # placeholder nobody declares, leaves panels without data.
    text = json.dumps(dashboard)
    declared = {i.get("name") for i in dashboard.get("__inputs", [])}
    used = set(re.findall(r"\$\{(DS_[A-Za-z0-9_]+)\}", text))
    report("every __inputs entry is used and every ${DS_...} declared", declared == used,
           f"declared {sorted(declared)}, used {sorted(used)}")
    sources = {json.dumps(p.get("datasource"), sort_keys=True) for p in graphs}
    sources |= {json.dumps(t.get("datasource"), sort_keys=True)
                for p in graphs for t in p["targets"]}
    want = json.dumps({"type": "prometheus", "uid": "${datasource}"}, sort_keys=True)
    report("every panel and query uses the `datasource` variable", sources == {want},
           sorted(sources))
    return graphs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/debug/flockd")
    parser.add_argument("--prometheus", default="prometheus")
    args = parser.parse_args()
    if shutil.which(args.prometheus) is None:
        sys.exit("prometheus not found (apt-get install prometheus)")
    results = {"passed": 0, "failed": 0}

    def report(name, ok, detail):
        results["passed" if ok else "failed"] += 1
        print(("ok   " if ok else "FAIL ") + name)
        if not ok:
            print(f"     | {detail}"[:2000])

    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    graphs = check_shape(dashboard, report)

    work = tempfile.mkdtemp(prefix="flockd-grafana-")
    procs = Processes(work)
    stop = threading.Event()
    try:
        # One node, and a cluster of three, each with its metrics port.
        single = (free_port(), free_port())
        procs.start("single", [args.bin, "--bind", "127.0.0.1", "--port", str(single[0]),
                               "--dir", os.path.join(work, "single"), "--metrics-port",
                               str(single[1])])
        nodes = [(free_port(), free_port(), free_port()) for _ in range(3)]
        peers = ",".join(f"{i + 1}=127.0.0.1:{p}@{c}" for i, (p, c, _) in enumerate(nodes))
        for i, (port, _, metrics) in enumerate(nodes):
            procs.start(f"node{i + 1}", [args.bin, "--bind", "127.0.0.1", "--port", str(port),
                                         "--dir", os.path.join(work, f"node{i + 1}"),
                                         "--node-id", str(i + 1), "--cluster-peers", peers,
                                         "--metrics-port", str(metrics)])
        wait_for("the single node", lambda: client(single[0]).ping(), 30)

        def leader():
            ids = {client(p).info("replication").get("raft_leader_id") for p, _, _ in nodes}
            return ids.pop() if len(ids) == 1 and 0 not in ids and None not in ids else None

        wait_for("a cluster leader", lambda: leader() not in (None, 0), 60)
        lead = int(leader())
        follower = nodes[lead % 3][0]  # the next node: not the leader

        web = f"127.0.0.1:{free_port()}"
        targets = lambda ports: json.dumps([f"127.0.0.1:{m}" for m in ports])
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: flockd
    static_configs:
      - targets: {targets([single[1]])}
  - job_name: flockd-cluster
    static_configs:
      - targets: {targets([m for _, _, m in nodes])}
""")
        procs.start("prometheus", [args.prometheus, "--config.file",
                                   os.path.join(work, "prometheus.yml"),
                                   "--storage.tsdb.path", os.path.join(work, "tsdb"),
                                   "--web.listen-address", web])

        def ready():
            with urllib.request.urlopen(f"http://{web}/-/ready", timeout=2) as r:
                return r.status == 200

        wait_for("Prometheus", ready, 30)

        errors = []
        loaders = [
            threading.Thread(target=load, args=([single[0]], stop, errors)),
            # Through a follower to the leader: forwarded commands, Raft commits.
            threading.Thread(target=load, args=([follower, nodes[lead - 1][0]], stop, errors)),
        ]
        for t in loaders:
            t.start()
        time.sleep(LOAD_SECONDS / 2)
        # A leader change half-way: a term rise and a new leader for the panels to show.
        next_id = lead % 3 + 1
        try:
            client(nodes[lead - 1][0]).execute_command("FLOCK.CLUSTER", "LEADER", next_id)
        except redis.RedisError as e:
            errors.append(f"FLOCK.CLUSTER LEADER {next_id}: {e!r}")
        time.sleep(LOAD_SECONDS / 2)

        # Every panel's every query returns data (the load goes on while we ask).
        for panel in graphs:
            for target in panel["targets"]:
                expr = fill(target["expr"])
                values, deadline = [], time.monotonic() + QUERY_DEADLINE_SECONDS
                last = None
                while time.monotonic() < deadline:
                    try:
                        last = prometheus_query(web, expr)
                        values = finite_values(last)
                    except (OSError, ValueError) as e:
                        last = repr(e)
                    if values:
                        break
                    time.sleep(0.5)
                report(f"{panel['title']} / {target.get('legendFormat', target['refId'])}: "
                       f"{len(values)} series", bool(values), f"{expr} -> {last}")
        # The Durability row on a cluster, where there is no AOF: the Raft log's fsyncs, on
        # every node (a follower syncs what it is sent too).
        expr = ('histogram_quantile(0.99, sum by (le, instance) (rate('
                'flockd_raft_log_fsync_duration_seconds_bucket{job="flockd-cluster"}[15s])))')
        try:
            values = finite_values(prometheus_query(web, expr))
        except (OSError, ValueError) as e:
            values = [repr(e)]
        report(f"Raft log fsync on the cluster: {len(values)} nodes of 3",
               len(values) == 3 and all(isinstance(v, float) for v in values),
               f"{expr} -> {values}")
        stop.set()
        for t in loaders:
            t.join(timeout=15)
        report("the load ran without connection errors", len(errors) <= 2, errors[:5])
        for name in ["single", "node1", "node2", "node3", "prometheus"]:
            report(f"{name} still running", procs.procs[name].poll() is None, procs.log(name))
    finally:
        stop.set()
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()

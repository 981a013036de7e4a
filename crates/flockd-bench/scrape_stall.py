#!/usr/bin/env python3
"""Whether statistics stall the op path: workload 3 of perf-guard (redis-benchmark, 50
connections, pipeline 16, `FLOCK.ACQUIRE lock:<random of 1M> 5000`, appendfsync everysec) on a
fresh flockd per round, with a scraper that every 100 ms fetches the metrics page and runs INFO,
against the same load without it. Rounds alternate; the report gives each round's ops/s, max
latency and the server's CPU per op (user + system time from /proc over the load, the scraper's
own requests included), and the medians. Loopback only; every flockd it starts is stopped by pid.

  cargo build --release -p flockd
  crates/flockd-bench/scrape_stall.py [--rounds 5] [--requests 1000000] [--flockd PATH]

Needs redis-benchmark (Debian package redis-tools).
"""
import argparse, os, re, shutil, socket, statistics, subprocess, sys, tempfile, threading, time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, deadline):
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    sys.exit("flockd did not start")


def info(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
        c.sendall(b"INFO\r\n")
        head = b""
        while b"\r\n" not in head:
            head += c.recv(4096)
        size = int(head[1:head.index(b"\r\n")])
        body = head[head.index(b"\r\n") + 2:]
        while len(body) < size + 2:
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk


class Scraper(threading.Thread):
    """Every 100 ms: the metrics page, then INFO. Counts the scrapes and their longest time."""

    def __init__(self, port, metrics_port):
        super().__init__(daemon=True)
        self.port, self.metrics_port = port, metrics_port
        self.stop, self.scrapes, self.longest = threading.Event(), 0, 0.0

    def run(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        while not self.stop.wait(0.1):
            started = time.time()
            urllib.request.urlopen(url, timeout=2).read()
            info(self.port)
            self.longest = max(self.longest, time.time() - started)
            self.scrapes += 1


def cpu_seconds(pid):
    """User + system time of a process so far, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(flockd, scraped, requests):
    port, metrics_port = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="flockd-stall-")
    server = subprocess.Popen([flockd, "--port", str(port), "--dir", data, "--appendfsync", "everysec",
                               "--metrics-port", str(metrics_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, time.time() + 10)
        scraper = Scraper(port, metrics_port) if scraped else None
        if scraper:
            scraper.start()
        cpu_before = cpu_seconds(server.pid)
        out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-P", "16", "-n", str(requests),
                              "-r", "1000000", "FLOCK.ACQUIRE", "lock:__rand_int__", "5000"],
                             capture_output=True, text=True, timeout=300).stdout
        cpu_us = (cpu_seconds(server.pid) - cpu_before) * 1e6 / requests
        if scraper:
            scraper.stop.set()
            scraper.join(5)
        rps = float(re.search(r"throughput summary: ([\d.]+) requests per second", out).group(1))
        lat = re.search(r"avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n\s*([\d.\s]+)", out).group(1).split()
        p99, top = float(lat[4]), float(lat[5])
        return rps, p99, top, cpu_us, (scraper.scrapes if scraper else 0), (scraper.longest if scraper else 0)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--flockd", default="target/release/flockd")
    o = p.parse_args()
    rows = {False: [], True: []}
    for r in range(o.rounds):
        # Which goes first alternates round by round.
        for scraped in ((False, True) if r % 2 == 0 else (True, False)):
            rps, p99, top, cpu_us, scrapes, longest = one_round(o.flockd, scraped, o.requests)
            rows[scraped].append((rps, p99, top, cpu_us))
            print("round %d %-12s %9.0f ops/s  p99 %6.3f ms  max %6.3f ms  cpu %.2f us/op  scrapes %3d"
                  " (longest %.1f ms)" % (r + 1, "scraped" if scraped else "not scraped", rps, p99, top,
                                          cpu_us, scrapes, longest * 1000), flush=True)
    print("\n| | ops/s | p99 ms | max ms | max ms (worst round) | server CPU µs per op |"
          "\n|---|--:|--:|--:|--:|--:|")
    for scraped in (False, True):
        rs = rows[scraped]
        print("| %s | %.0f | %.3f | %.3f | %.3f | %.2f |" % (
            "scraped every 100 ms" if scraped else "not scraped",
            statistics.median(x[0] for x in rs), statistics.median(x[1] for x in rs),
            statistics.median(x[2] for x in rs), max(x[2] for x in rs), statistics.median(x[3] for x in rs)))
    print("(medians of rounds, except the worst round's max)")
    ratio = statistics.median(x[2] for x in rows[True]) / statistics.median(x[2] for x in rows[False])
    print("\nmax latency, scraped / not scraped (medians): %.2f" % ratio)


if __name__ == "__main__":
    main()

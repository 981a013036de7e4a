"""The README's redis-py snippet, run as written against a real flockd, with the redis-py that
`pip install -U redis` gives today (its version is printed).

The lock is held by another connection for longer than the snippet's WAIT: the snippet must come
back with "busy" after about the WAIT (the server's null, not a client timeout), and the server
must have received exactly one FLOCK.ACQUIRE from it (counted with MONITOR), since a resent
acquire waits in line again and can leave a grant nobody saw.

    FLOCKD_BIN=target/debug/flockd python3 -m pytest -q tests/examples/test_readme_snippet.py
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.abspath(os.environ.get("FLOCKD_BIN", os.path.join(ROOT, "target/debug/flockd")))
README = os.path.join(ROOT, "README.md")


def readme_snippet():
    """The README's first Python block, byte for byte."""
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```\n", text, re.S)
    assert blocks, "README.md has no ```python block"
    return blocks[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def flockd():
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"no flockd at {BIN}: cargo build first, or set FLOCKD_BIN")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="flockd-readme-") as root:
        log = open(os.path.join(root, "flockd.log"), "w")
        proc = subprocess.Popen(
            [BIN, "--bind", "127.0.0.1", "--port", str(port), "--dir", os.path.join(root, "data")],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    redis.Redis(port=port, socket_timeout=1).ping()
                    break
                except redis.ConnectionError:
                    assert proc.poll() is None and time.monotonic() < deadline, "flockd did not start"
                    time.sleep(0.05)
            yield port
        finally:
            proc.kill()
            proc.wait(timeout=10)
            log.close()


class Monitor:
    """Counts the FLOCK.ACQUIREs the server receives, on a MONITOR connection of its own."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=1)
        self.sock.sendall(b"MONITOR\r\n")
        self.data = b""
        self.stop = threading.Event()
        while b"+OK\r\n" not in self.data:
            self.data += self.sock.recv(4096)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.stop.is_set():
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return
            self.data += chunk

    def acquires(self):
        return self.data.count(b'"FLOCK.ACQUIRE"')

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_the_readme_snippet_gives_up_after_its_wait_with_one_acquire(flockd):
    print(f"redis-py {redis.__version__}")
    snippet = readme_snippet()
    wait_ms = int(re.search(r'"WAIT", (\d+)', snippet).group(1))
    name = re.search(r'"FLOCK.ACQUIRE", "([^"]+)"', snippet).group(1)
    holder = redis.Redis(port=flockd, protocol=2, socket_timeout=10)
    assert holder.execute_command("FLOCK.ACQUIRE", name, 120000) == 1
    monitor = Monitor(flockd)
    try:
        started = time.monotonic()
        # Bounded: redis-py's defaults (5 s timeout, 10 retries) would take about a minute.
        run = subprocess.run(
            [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=150,
            env=dict(os.environ, FLOCKD_URL=f"redis://127.0.0.1:{flockd}"))
        elapsed = time.monotonic() - started
        time.sleep(0.3)  # the last MONITOR lines
        sent = monitor.acquires()
    finally:
        monitor.close()
    report = (f"exit {run.returncode} after {elapsed:.1f} s, {sent} FLOCK.ACQUIRE sent\n"
              f"stdout: {run.stdout}\nstderr: {run.stderr[-3000:]}")
    print(report)
    assert run.returncode == 0, report
    assert "busy" in run.stdout, report
    # The server answers null at the WAIT; generous slack above it (shared machine), but below
    # the WAIT plus the snippet's own 5 s margin, past which only a client timeout could end it.
    assert wait_ms / 1000 - 0.2 <= elapsed < wait_ms / 1000 + 5, report
    assert sent == 1, report
    status = holder.execute_command("FLOCK.STATUS", name)
    fields = dict(zip(status[::2], status[1::2]))
    assert fields[b"token"] == 1 and fields[b"waiters"] == 0, fields

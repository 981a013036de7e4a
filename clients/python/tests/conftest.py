"""A real flockd per test, on a free loopback port, stopped by its pid afterwards."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def flockd_port():
    binary = os.environ.get("FLOCKD_BIN", "target/debug/flockd")
    if not os.path.exists(binary):
        pytest.fail(f"no flockd binary at {binary}: build it, or set FLOCKD_BIN")
    data = tempfile.mkdtemp(prefix="flockd-py-")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=port, socket_timeout=1).ping():
                    break
            except redis.ConnectionError:
                pass
            assert proc.poll() is None, "flockd exited during start-up"
            assert time.monotonic() < deadline, "flockd did not answer PING in 10 s"
            time.sleep(0.02)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)

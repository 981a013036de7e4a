"""The Python package against a real flockd: renewals past the lease, a holder paused with
SIGSTOP that knows it lost the lock before it writes, renewals that stop after release, a lock
dropped without release, a force-release told through the event, SHARED and LIMIT, and the
asyncio variant."""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import redis

from flockd import Client, LockLost, LockNotAcquired
from flockd.asyncio import AsyncClient


def renew_calls(r):
    stats = r.info("commandstats")
    return stats.get("cmdstat_flock.renew", {}).get("calls", 0)


def test_a_lock_is_kept_past_its_lease_while_held(flockd_port):
    client = Client(port=flockd_port)
    with client.lock("keep", lease=1.0) as lock:
        assert lock.token == 1
        time.sleep(2.5)
        assert not lock.lost.is_set()
        assert lock.fence_set("keep:data", "written") is True
        assert client.redis.execute_command("FLOCK.TTL", "keep") > 0
    assert client.redis.execute_command("FLOCK.TTL", "keep") == -2
    assert renew_calls(client.redis) >= 3


def test_from_url_reads_the_address_as_the_examples_give_it(flockd_port):
    client = Client.from_url(f"redis://127.0.0.1:{flockd_port}", socket_timeout=10)
    with client.lock("from-url", lease=5.0) as lock:
        assert lock.token == 1
    assert client.redis.connection_pool.connection_kwargs["socket_timeout"] == 10
    aclient = AsyncClient.from_url(f"redis://127.0.0.1:{flockd_port}")

    async def take():
        async with aclient.lock("from-url", lease=5.0) as alock:
            return alock.token

    assert asyncio.run(take()) == 2


def test_renewals_stop_after_release(flockd_port):
    client = Client(port=flockd_port)
    lock = client.lock("r", lease=1.0)
    assert lock.acquire()
    time.sleep(1.2)
    assert lock.release() is True
    calls = renew_calls(client.redis)
    time.sleep(0.5)
    assert renew_calls(client.redis) == calls


def test_not_granted_raises_and_wait_waits(flockd_port):
    client = Client(port=flockd_port)
    client.redis.execute_command("FLOCK.ACQUIRE", "busy", 400)
    with pytest.raises(LockNotAcquired):
        with client.lock("busy"):
            pass
    started = time.monotonic()
    with client.lock("busy", lease=5, wait=3) as lock:
        assert lock.token == 2
    assert time.monotonic() - started < 3


def test_a_dropped_lock_frees_itself(flockd_port):
    client = Client(port=flockd_port)
    lock = client.lock("dropped", lease=60)
    assert lock.acquire()
    del lock
    gc.collect()
    started = time.monotonic()
    token = client.redis.execute_command("FLOCK.ACQUIRE", "dropped", 1000, "WAIT", 5000)
    assert token == 2
    assert time.monotonic() - started < 2


def test_a_force_release_sets_lost_through_the_event(flockd_port):
    client = Client(port=flockd_port)
    with client.lock("f", lease=60) as lock:
        client.redis.execute_command("FLOCK.FORCERELEASE", "f")
        # The next renewal is 20 s away: only the event can tell this soon.
        assert lock.lost.wait(2)
        assert lock.lost_reason == "force-released"
        with pytest.raises(LockLost):
            lock.fence_set("f:data", "late")


def test_shared_and_limit(flockd_port):
    client = Client(port=flockd_port)
    with client.lock("doc", shared=True) as a, client.lock("doc", shared=True) as b:
        assert (a.token, b.token) == (1, 2)
        assert not client.lock("doc").acquire()
    with client.lock("api", limit=2), client.lock("api", limit=2):
        assert not client.lock("api", limit=2).acquire()
    with pytest.raises(ValueError):
        client.lock("api", limit=0)


HOLDER = textwrap.dedent("""
    import sys
    from flockd import Client, LockLost
    client = Client(port=int(sys.argv[1]))
    with client.lock("stall", lease=0.5) as lock:
        assert lock.fence_set("stall:data", "old holder, on time")
        print(lock.token, flush=True)
        sys.stdin.readline()  # stopped (SIGSTOP) while waiting here, resumed, then told to go
        known = lock.is_lost()
        try:
            lock.fence_set("stall:data", "old holder, late")
            print("wrote late", flush=True)
        except LockLost as e:
            print(f"lost {known} {e}", flush=True)
""")


def test_a_holder_paused_past_its_lease_knows_it_lost_the_lock_before_it_writes(flockd_port):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(flockd_port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        old_token = int(holder.stdout.readline())
        os.kill(holder.pid, signal.SIGSTOP)
        r = redis.Redis(port=flockd_port, socket_timeout=10)
        new_token = r.execute_command("FLOCK.ACQUIRE", "stall", 60000, "WAIT", 5000)
        assert new_token > old_token
        assert r.execute_command("FENCE.SET", "stall:data", new_token, "new holder") == 1
        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        line = holder.stdout.readline().strip()
        assert line.startswith("lost True"), line
        assert r.execute_command("FENCE.GET", "stall:data") == b"new holder"
        assert holder.wait(timeout=10) == 0
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()


def test_the_asyncio_variant(flockd_port):
    async def main():
        client = AsyncClient(port=flockd_port)
        async with client.lock("a", lease=1.0) as lock:
            await asyncio.sleep(2.5)
            assert not lock.lost.is_set()
            assert await lock.fence_set("a:data", "x") is True
        assert await client.redis.execute_command("FLOCK.TTL", "a") == -2
        async with client.lock("af", lease=60) as lock:
            await client.redis.execute_command("FLOCK.FORCERELEASE", "af")
            await asyncio.wait_for(lock.lost.wait(), 2)
            assert lock.lost_reason == "force-released"
        with pytest.raises(LockNotAcquired):
            await client.redis.execute_command("FLOCK.ACQUIRE", "held", 60000)
            async with client.lock("held"):
                pass
        # Dropped without release, a minute of lease left: given back on the loop.
        lock = client.lock("dropped", lease=60)
        assert await lock.acquire()
        del lock
        gc.collect()
        started = time.monotonic()
        token = await client.redis.execute_command("FLOCK.ACQUIRE", "dropped", 1000, "WAIT", 5000)
        assert token == 2 and time.monotonic() - started < 2
        await client.aclose()

    asyncio.run(main())

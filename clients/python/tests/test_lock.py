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


def test_a_force_release_right_after_the_grant_is_always_told(flockd_port):
    # acquire returns only once the event subscription is confirmed: a force-release sent the
    # moment it returns must reach the subscriber, not land before the SUBSCRIBE does.
    client = Client(port=flockd_port)
    for i in range(20):
        with client.lock(f"race:{i}", lease=60) as lock:
            client.redis.execute_command("FLOCK.FORCERELEASE", f"race:{i}")
            assert lock.lost.wait(2), f"round {i}: the force-release was not told"

    async def main():
        aclient = AsyncClient(port=flockd_port)
        for i in range(20):
            async with aclient.lock(f"arace:{i}", lease=60) as lock:
                await aclient.redis.execute_command("FLOCK.FORCERELEASE", f"arace:{i}")
                try:
                    await asyncio.wait_for(lock.lost.wait(), 2)
                except asyncio.TimeoutError:
                    pytest.fail(f"round {i} (asyncio): the force-release was not told")
        await aclient.aclose()

    asyncio.run(main())


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


def _release_later(port, name, token, delay):
    """The holder gives the lock back after `delay` seconds, from a thread of its own."""
    import threading

    def release():
        redis.Redis(port=port, socket_timeout=10).execute_command("FLOCK.RELEASE", name, token)

    timer = threading.Timer(delay, release)
    timer.start()
    return timer


def status_of(r, name):
    reply = r.execute_command("FLOCK.STATUS", name)
    if isinstance(reply, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def test_a_lock_granted_after_a_wait_longer_than_its_lease_is_kept(flockd_port):
    # Issue 35: validity was counted from the blocking acquire's send, so a grant after a wait
    # longer than the lease was reported lost at once. The client now renews at once after
    # such a grant and counts from that renewal's send.
    client = Client(port=flockd_port)
    r = client.redis
    holder = r.execute_command("FLOCK.ACQUIRE", "waited", 20000)
    timer = _release_later(flockd_port, "waited", holder, 3.0)
    try:
        lock = client.lock("waited", lease=1.5, wait=6)
        started = time.monotonic()
        assert lock.acquire()
        assert time.monotonic() - started > 1.5  # it waited longer than its lease
        assert lock.token > holder
        assert not lock.is_lost(), lock.lost_reason
        time.sleep(2 * 1.5 / 3 + 0.6)  # two renewal periods and some slack
        assert not lock.is_lost(), lock.lost_reason
        assert r.execute_command("FLOCK.TTL", "waited") > 0
        status = status_of(r, "waited")
        assert status["locked"] == 1 and status["token"] == lock.token
        assert lock.release() is True
    finally:
        timer.cancel()


def test_the_asyncio_variant_keeps_a_lock_granted_after_a_long_wait(flockd_port):
    r = redis.Redis(port=flockd_port, socket_timeout=10)
    holder = r.execute_command("FLOCK.ACQUIRE", "awaited", 20000)
    timer = _release_later(flockd_port, "awaited", holder, 3.0)

    async def main():
        client = AsyncClient(port=flockd_port)
        lock = client.lock("awaited", lease=1.5, wait=6)
        started = time.monotonic()
        assert await lock.acquire()
        assert time.monotonic() - started > 1.5
        assert not lock.is_lost(), lock.lost_reason
        await asyncio.sleep(2 * 1.5 / 3 + 0.6)
        assert not lock.is_lost(), lock.lost_reason
        assert r.execute_command("FLOCK.TTL", "awaited") > 0
        assert status_of(r, "awaited")["token"] == lock.token
        assert await lock.release() is True
        await client.aclose()

    try:
        asyncio.run(main())
    finally:
        timer.cancel()


def test_a_late_grant_whose_lease_ran_out_before_the_renewal_is_not_acquired(flockd_port):
    # The holding is gone by the time the renewal after a long wait arrives (here: removed
    # just before it is sent, as if the lease ran out between grant and reply): the acquire
    # says "not granted", never hands over a lock that is already lost.
    client = Client(port=flockd_port)
    r = redis.Redis(port=flockd_port, socket_timeout=10)
    holder = r.execute_command("FLOCK.ACQUIRE", "late", 20000)
    timer = _release_later(flockd_port, "late", holder, 1.0)
    send = client.redis.execute_command

    def expire_first(*args):
        if args[0] == "FLOCK.RENEW":
            r.execute_command("FLOCK.FORCERELEASE", "late")
        return send(*args)

    client.redis.execute_command = expire_first
    try:
        with pytest.raises(LockNotAcquired):
            with client.lock("late", lease=0.6, wait=5):
                pass
        assert r.execute_command("FLOCK.TTL", "late") == -2
    finally:
        timer.cancel()


def test_the_readme_example_runs_as_written(flockd_port):
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    source = readme.split("```python\n", 1)[1].split("```\n", 1)[0]
    env = dict(os.environ, FLOCKD_URL=f"redis://127.0.0.1:{flockd_port}")
    run = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    shown = readme.split(source + "```\n", 1)[1].split("```\n", 2)[1]
    assert run.stdout == shown, run.stdout
    r = redis.Redis(port=flockd_port, socket_timeout=10)
    assert r.execute_command("FENCE.GET", "order:1042:state") == b"shipped"

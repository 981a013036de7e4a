"""redis-py against a running flockd at FLOCKD_URL (redis://host:port); run by tests/compat/run.sh."""

import os
import threading
import uuid
from urllib.parse import urlparse

import pytest
import redis

_URL = urlparse(os.environ.get("FLOCKD_URL", "redis://127.0.0.1:6390"))
HOST, PORT = _URL.hostname, _URL.port


def client(protocol=2, **kwargs):
    # Explicit protocol: newer redis-py versions default to RESP3.
    return redis.Redis(host=HOST, port=PORT, socket_timeout=30, decode_responses=True, protocol=protocol, **kwargs)


def unique(prefix):
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def test_ping():
    r = client()
    assert r.ping() is True
    assert r.echo("hi") == "hi"
    assert r.execute_command("CLIENT", "INFO").count(" resp=2 ") == 1


def test_resp3():
    r = client(protocol=3)
    assert r.ping() is True
    info = r.execute_command("CLIENT", "INFO")
    assert " resp=3 " in info
    name = unique("py3")
    assert r.execute_command("FLOCK.ACQUIRE", name, 30000, "OWNER", "me") == 1
    status = r.execute_command("FLOCK.STATUS", name)
    assert isinstance(status, dict), status
    assert list(status) == [
        "name", "locked", "token", "owner", "ttl", "holds", "waiters", "last-token",
        "holdings", "limit", "delay",
    ]
    assert status["locked"] == 1 and status["token"] == 1 and status["owner"] == "me"
    assert r.execute_command("FLOCK.ACQUIRE", name, 30000) is None
    free = r.execute_command("FLOCK.STATUS", unique("free"))
    assert free["token"] is None and free["ttl"] == -2


def test_acquire_release_status():
    r = client()
    name = unique("py")
    assert r.execute_command("FLOCK.ACQUIRE", name, 30000) == 1
    assert r.execute_command("FLOCK.ACQUIRE", name, 30000) is None
    status = r.execute_command("FLOCK.STATUS", name)
    assert status[:4] == ["name", name, "locked", 1]
    fields = dict(zip(status[::2], status[1::2]))
    assert fields["token"] == 1 and fields["holds"] == 1 and fields["last-token"] == 1
    assert 0 < r.execute_command("FLOCK.TTL", name) <= 30000
    assert r.execute_command("FLOCK.RENEW", name, 1, 60000) == 1
    assert r.execute_command("FLOCK.RELEASE", name, 1) == 1
    with pytest.raises(redis.ResponseError, match="NOTOWNER"):
        r.execute_command("FLOCK.RELEASE", name, 1)
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.execute_command("FLOCK.ACQUIRE", name, "soon")
    assert r.execute_command("FLOCK.ACQUIRE", name, 30000) == 2
    assert r.execute_command("FLOCK.TOKEN", name) == 2


def test_pool_contention_with_wait_and_fence():
    """20 threads share a pool, contend on one lock with WAIT, and write through FENCE.SET."""
    pool = redis.ConnectionPool(
        host=HOST, port=PORT, socket_timeout=60, decode_responses=True, max_connections=20, protocol=2
    )
    lock, key = unique("contended"), unique("fenced")
    rounds = 5
    granted, errors = [], []
    guard = threading.Lock()
    holders = [0]

    def worker(i):
        r = redis.Redis(connection_pool=pool)
        try:
            for n in range(rounds):
                token = r.execute_command("FLOCK.ACQUIRE", lock, 10000, "WAIT", 30000)
                assert token is not None, "WAIT timed out"
                with guard:
                    holders[0] += 1
                    assert holders[0] == 1, "two holders at once"
                assert r.execute_command("FENCE.SET", key, token, f"{i}-{n}") == 1
                with guard:
                    holders[0] -= 1
                    granted.append(token)
                assert r.execute_command("FLOCK.RELEASE", lock, token) == 1
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "workers stuck"
    assert not errors, errors
    assert sorted(granted) == list(range(1, 20 * rounds + 1))
    r = redis.Redis(connection_pool=pool)
    top = max(granted)
    assert int(r.execute_command("FENCE.TOKEN", key)) == top
    # No lower token is accepted after a higher one.
    before = r.execute_command("FENCE.GET", key)
    assert r.execute_command("FENCE.SET", key, top - 1, "stale") == 0
    assert r.execute_command("FENCE.GET", key) == before
    assert r.execute_command("FENCE.SET", key, top, "same-token") == 1
    pool.disconnect()


def test_pipeline():
    r = client()
    name = unique("pipe")
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("FLOCK.ACQUIRE", name, 30000)
    pipe.execute_command("FLOCK.ACQUIRE", name, 30000)
    pipe.execute_command("FLOCK.TOKEN", name)
    pipe.echo("done")
    for i in range(500):
        pipe.echo(str(i))
    results = pipe.execute()
    assert results[:4] == [1, None, 1, "done"]
    assert results[4:] == [str(i) for i in range(500)]
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("FLOCK.RELEASE", name, 5)
    pipe.ping()
    out = pipe.execute(raise_on_error=False)
    assert isinstance(out[0], redis.ResponseError) and "NOTOWNER" in str(out[0])
    assert out[1] is True


def test_default_pipeline_is_a_transaction():
    # redis-py's default pipeline() wraps its commands in MULTI/EXEC.
    for protocol in (2, 3):
        r = client(protocol=protocol)
        name = unique("tx")
        pipe = r.pipeline()
        pipe.execute_command("FLOCK.ACQUIRE", name, 30000)
        pipe.execute_command("FENCE.SET", name + ":v", 1, "paid")
        pipe.execute_command("FLOCK.TOKEN", name)
        pipe.execute_command("FENCE.GET", name + ":v")
        assert pipe.execute() == [1, 1, 1, "paid"]
        # A command error inside is its element of the reply; the others took effect.
        pipe = r.pipeline()
        pipe.execute_command("FLOCK.RELEASE", name, 99)
        pipe.execute_command("FLOCK.RELEASE", name, 1)
        out = pipe.execute(raise_on_error=False)
        assert isinstance(out[0], redis.ResponseError) and "NOTOWNER" in str(out[0])
        assert out[1] == 1
        # A queued syntax error aborts the whole transaction: nothing is applied.
        pipe = r.pipeline()
        pipe.execute_command("FLOCK.ACQUIRE", name, 30000)
        pipe.execute_command("FLOCK.ACQUIRE", name)
        with pytest.raises(redis.ResponseError) as e:
            pipe.execute()
        assert "EXECABORT" in str(e.value) or "wrong number" in str(e.value)
        assert r.execute_command("FLOCK.TOKEN", name) == 1
        assert r.execute_command("FLOCK.TTL", name) == -2


@pytest.mark.parametrize("protocol", [2, 3])
def test_scan_iter_and_type(protocol):
    # SCAN walks lock names and fence keys; other tests' keys share this server, so MATCH a prefix.
    r = client(protocol=protocol)
    prefix = unique("scan")
    locks = {f"{prefix}:lock:{i}" for i in range(7)}
    fences = {f"{prefix}:fence:{i}" for i in range(7)}
    both = f"{prefix}:both"
    for name in locks | {both}:
        assert r.execute_command("FLOCK.ACQUIRE", name, 30000) == 1
    for key in fences | {both}:
        assert r.execute_command("FENCE.SET", key, 1, "v") == 1
    everything = locks | fences | {both}
    listed = list(r.scan_iter(match=f"{prefix}:*", count=2))
    assert sorted(listed) == sorted(everything)
    assert set(r.scan_iter(match=f"{prefix}:*", count=1000, _type="flock")) == locks
    assert set(r.scan_iter(match=f"{prefix}:*", _type="fence")) == fences | {both}
    cursor, page = r.scan(0, match=f"{prefix}:*", count=1)
    assert isinstance(cursor, int) and isinstance(page, list)
    assert r.type(next(iter(locks))) == "flock"
    assert r.type(next(iter(fences))) == "fence"
    assert r.type(both) == "fence"
    assert r.type(f"{prefix}:missing") == "none"
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.execute_command("SCAN", "x")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.scan(0, count=0)
    assert r.ping() is True


def test_client_name_and_info():
    r = client(client_name="py-client")
    assert r.client_getname() == "py-client"
    assert r.client_id() > 0
    info = r.info()
    assert info["redis_version"] == "7.2.0"
    assert "connected_clients" in info
    assert r.command_count() > 0
    assert r.config_get("maxclients")["maxclients"].isdigit()
    t = r.time()
    assert t[0] > 1_600_000_000


def _next_message(pubsub, timeout=5.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if m is not None:
            return m
    raise AssertionError("no message within %.1f s" % timeout)


@pytest.mark.parametrize("protocol", [2, 3])
def test_pubsub_lock_events(protocol):
    r = client(protocol=protocol)
    name = unique("ev")
    p = r.pubsub()
    p.subscribe(f"__flock__:{name}")
    p.psubscribe("__flockevent__:*")
    # The subscription confirmations first.
    assert p.get_message(timeout=5)["type"] == "subscribe"
    assert p.get_message(timeout=5)["type"] == "psubscribe"
    token = r.execute_command("FLOCK.ACQUIRE", name, 30000)
    seen = [_next_message(p), _next_message(p)]
    by_type = {m["type"]: m for m in seen}
    assert by_type["message"]["channel"] == f"__flock__:{name}"
    assert by_type["message"]["data"] == f"granted {token}"
    assert by_type["pmessage"]["pattern"] == "__flockevent__:*"
    assert by_type["pmessage"]["channel"] == "__flockevent__:granted"
    assert by_type["pmessage"]["data"] == f"{token} {name}"
    assert r.execute_command("PUBSUB", "NUMSUB", f"__flock__:{name}") == [f"__flock__:{name}", 1]
    p.close()

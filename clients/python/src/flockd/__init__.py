"""Fenced locks from flockd on redis-py: a token per grant, a renewing thread, and an Event
that is set when the lock is lost.

The lock's validity is counted from when each request was *sent* (time.monotonic), so a slow
network or a paused process counts against it: `is_lost()` checks the clock itself, and
`fence_set` refuses to send once the lock is known to be lost. A grant that followed a wait
may have been applied any time before its reply: when the reply came later than a third of the
lease, the lock is renewed at once, before `acquire` returns, and counts from that renewal's
send (refused with -NOTOWNER, the acquire was not granted).
"""

import threading
import time
import weakref

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

__all__ = ["Client", "Lock", "LockLost", "LockNotAcquired"]


class LockNotAcquired(Exception):
    """The lock was not granted (at once, or within the wait)."""


class LockLost(Exception):
    """The lock is lost (or about to be): nothing was sent."""


def _margin(lease):
    """How long before the lease's end the lock counts as lost: a tenth of it, at most 2 s."""
    return min(lease / 10.0, 2.0)


def acquire_args(name, lease, wait, owner, shared, limit, session):
    """FLOCK.ACQUIRE's arguments for these options (shared by the asyncio variant)."""
    if lease <= 0:
        raise ValueError("the lease must be positive")
    if shared and limit is not None:
        raise ValueError("shared and limit cannot be combined")
    args = ["FLOCK.ACQUIRE", name, max(1, int(lease * 1000))]
    if shared:
        args.append("SHARED")
    if limit is not None:
        if not 1 <= limit <= 65535:
            raise ValueError("a limit is 1 to 65535")
        args += ["LIMIT", limit]
    if wait:
        args += ["WAIT", max(1, int(wait * 1000))]
    if owner is not None:
        args += ["OWNER", owner]
    if session:
        args.append("SESSION")
    return args


def renews_at_once(wait, lease, sent, replied):
    """Whether a grant must be renewed before it is handed over: it followed a WAIT, so the
    server may have applied it any time before its reply, and the reply came later than a
    third of the lease after the acquire was sent (the first renewal would be due already)."""
    return bool(wait) and replied - sent > lease / 3.0


def is_notowner(error):
    """A -NOTOWNER reply: the holding is gone."""
    return str(error).startswith("NOTOWNER")


SUBSCRIBE_TIMEOUT = 5.0
"""How long acquire waits for the event subscription's confirmation (renewals still tell)."""


def is_subscribed(message, channel):
    """True for the confirmation of SUBSCRIBE `channel`."""
    if not isinstance(message, dict) or message.get("type") not in ("subscribe", b"subscribe"):
        return False
    got = message.get("channel")
    return (got.decode("utf-8", "replace") if isinstance(got, bytes) else got) == channel


def ends_holding(message, token):
    """The reason an `__flock__:<name>` message ends the holding of `token`, or None."""
    data = message.get("data") if isinstance(message, dict) else None
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not isinstance(data, str) or " " not in data:
        return None
    event, _, raw = data.partition(" ")
    if raw != str(token):
        return None
    return {"expired": "expired", "forcereleased": "force-released"}.get(event)


class ClientBase:
    """What both clients share: the connection settings, and a connection of its own for a
    blocking acquire or a SESSION lock. Subclasses name their Redis, Retry and lock classes.

    A lock command is never resent (a resent acquire can leave a lock held under a token
    nobody saw): retries are off unless you pass `retry` yourself.
    """

    redis_class = redis.Redis
    retry_class = Retry
    lock_class = None

    def __init__(self, host="127.0.0.1", port=6390, **kwargs):
        kwargs.setdefault("retry", self.retry_class(NoBackoff(), 0))
        self._kwargs = dict(host=host, port=port, **kwargs)
        self.redis = self.redis_class(**self._kwargs)

    @classmethod
    def from_url(cls, url, **kwargs):
        """A client for the flockd at `url`: `redis://[user:pass@]host:port`, `rediss://` for
        TLS, `unix://path` (what the examples read from `FLOCKD_URL`). `kwargs` as for the
        constructor, and they win over the URL."""
        parts = parse_url(url)
        # parse_url names a connection class; the Redis constructor takes a flag or a path.
        connection_class = parts.pop("connection_class", None)
        if connection_class is not None and "SSL" in connection_class.__name__:
            parts["ssl"] = True
        if "path" in parts:
            parts["unix_socket_path"] = parts.pop("path")
        parts.update(kwargs)
        return cls(**parts)

    def connection(self, timeout=None):
        """A client of its own (one connection), with `timeout` as its socket timeout."""
        kwargs = dict(self._kwargs)
        if timeout is not None:
            kwargs["socket_timeout"] = timeout
        return self.redis_class(single_connection_client=True, **kwargs)

    def lock(self, name, lease=30.0, wait=None, owner=None, shared=False, limit=None,
             session=False):
        return self.lock_class(self, name, lease, wait, owner, shared, limit, session)


class LockBase:
    """What both lock variants keep: the request, the token, and the validity counted from
    when each request was sent. Subclasses name their Event class and define `_lose`."""

    event_class = threading.Event

    def __init__(self, client, name, lease, wait, owner, shared, limit, session):
        self.client = client
        self.name = name
        self.lease = float(lease)
        self.wait = wait
        self._args = acquire_args(name, self.lease, wait, owner, shared, limit, session)
        self._session = session
        self.token = None
        self.lost = self.event_class()
        self.lost_reason = None
        self._valid_until = 0.0
        self._conn = None
        self._pubsub = None

    def is_lost(self):
        """True when the lock is lost, checked now (also by the clock, if the renewing thread
        or task has not run since a pause)."""
        if self.lost.is_set():
            return True
        if time.monotonic() + _margin(self.lease) >= self._valid_until:
            self._lose("the lease is about to run out")
            return True
        return False


class Client(ClientBase):
    """Connections to one flockd: `Client(host, port, ...)` takes redis.Redis's arguments;
    `Client.from_url("redis://host:port")` takes a URL."""


class Lock(LockBase):
    """A lock request; `with` (or `acquire()`) takes it, leaving (or `release()`) gives it back."""

    def __init__(self, *args):
        super().__init__(*args)
        self._stop = threading.Event()
        self._threads = []
        self._guard = threading.Lock()

    # -- taking and giving back

    def acquire(self):
        """Sends the acquire; True with `token` set, False when it was not granted."""
        blocking = bool(self.wait)
        if blocking or self._session:
            conn = self.client.connection(timeout=(self.wait or 0) + 5.0)
        else:
            conn = self.client.redis
        sent = time.monotonic()
        token = conn.execute_command(*self._args)
        if token is None:
            if conn is not self.client.redis:
                conn.close()
            return False
        token = int(token)
        # A SESSION holding lives as long as the connection that took it.
        if self._session:
            self._conn = conn
        else:
            if conn is not self.client.redis:
                conn.close()
            self._conn = self.client.redis
        if renews_at_once(self.wait, self.lease, sent, time.monotonic()):
            # Granted after a wait: the lease may have started any time before the reply, so
            # renew now, on the renewals' connection, and count from this renewal's send.
            sent = time.monotonic()
            try:
                renewed = self._conn.execute_command(
                    "FLOCK.RENEW", self.name, token, max(1, int(self.lease * 1000)))
                if renewed != 1:
                    raise redis.ResponseError(f"FLOCK.RENEW replied {renewed!r}")
            except BaseException as e:
                if self._session:
                    self._conn.close()  # which ends a SESSION holding, if it is still there
                self._conn = None
                if isinstance(e, redis.ResponseError) and is_notowner(e):
                    return False  # the lease ran out before the reply: not acquired
                raise
        self.token = token
        self._valid_until = sent + self.lease
        self._watch_events()
        # The threads hold the lock weakly: a lock dropped without release stops renewing,
        # and its finalizer gives it back.
        renewer = threading.Thread(
            target=_renew_loop, args=(weakref.ref(self), self._stop, sent), daemon=True)
        renewer.start()
        self._threads.append(renewer)
        self._finalizer = weakref.finalize(
            self, _release_dropped, self._conn, self.name, self.token, self._stop,
            self._session)
        return True

    def release(self):
        """Stops renewing and releases: True when the holding is gone now."""
        self._stop.set()
        self._finalizer.detach()
        try:
            free = self._conn.execute_command("FLOCK.RELEASE", self.name, self.token)
            return free == 1
        finally:
            self._close()

    def __enter__(self):
        if not self.acquire():
            raise LockNotAcquired(self.name)
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        except redis.ResponseError:
            pass  # lost already: -NOTOWNER
        return False

    # -- knowing it is still ours

    def fence_set(self, key, value):
        """FENCE.SET key token value LOCK name: True when stored, False when flockd refused it.
        Raises LockLost without sending when the lock is known to be lost."""
        if self.is_lost():
            raise LockLost(self.lost_reason)
        stored = self._conn.execute_command(
            "FENCE.SET", key, self.token, value, "LOCK", self.name)
        return stored == 1

    # -- the renewing thread and the events

    def _lose(self, reason):
        with self._guard:
            if not self.lost.is_set() and not self._stop.is_set():
                self.lost_reason = reason
                self.lost.set()

    def _renewed(self, sent):
        self._valid_until = sent + self.lease

    def _watch_events(self):
        try:
            pubsub = self.client.redis.pubsub()
            channel = f"__flock__:{self.name}"
            pubsub.subscribe(channel)
            # Subscribed before acquire returns, so no event after that is missed: SUBSCRIBE
            # only sends, and a force-release right after the grant would otherwise reach the
            # server before the subscription did.
            deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
            while (left := deadline - time.monotonic()) > 0:
                if is_subscribed(pubsub.get_message(timeout=left), channel):
                    break
        except redis.RedisError:
            pubsub = None  # renewals and the clock still tell
        self._pubsub = pubsub
        listener = threading.Thread(
            target=_event_loop, args=(weakref.ref(self), self._stop, pubsub, self.token),
            daemon=True)
        listener.start()
        self._threads.append(listener)

    def _close(self):
        # The event thread closes its own subscription: closing it from here while that
        # thread reads would hand its socket back to the pool under the reader.
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2)
        if self._session and self._conn is not None:
            self._conn.close()


Client.lock_class = Lock


def _renew_loop(lock_ref, stop, renewed_at):
    """Renews at a third of the lease until stopped, lost, or the lock is dropped."""
    while True:
        lock = lock_ref()
        if lock is None:
            return
        next_renewal = renewed_at + lock.lease / 3.0
        name, token, lease_ms, conn = lock.name, lock.token, max(1, int(lock.lease * 1000)), lock._conn
        del lock
        if stop.wait(max(0.0, next_renewal - time.monotonic())):
            return
        lock = lock_ref()
        if lock is None or lock.is_lost():
            return
        sent = time.monotonic()
        try:
            renewed = conn.execute_command("FLOCK.RENEW", name, token, lease_ms)
        except redis.ResponseError as e:
            return lock._lose(f"renewal refused: {e}")
        except redis.RedisError as e:
            return lock._lose(f"renewal failed: {e}")
        if renewed != 1:
            return lock._lose(f"FLOCK.RENEW replied {renewed!r}")
        lock._renewed(sent)
        renewed_at = sent
        del lock


def _event_loop(lock_ref, stop, pubsub, token):
    """Until stopped: an expiry or force-release of `token` on the lock's channel loses it, and
    so does the clock when the lease is about to run out (a renewal may hang on a dead
    network; the Event is set all the same). The subscription is this thread's alone, and it
    closes it on the way out."""
    try:
        _watch(lock_ref, stop, pubsub, token)
    finally:
        if pubsub is not None:
            try:
                pubsub.close()
            except (redis.RedisError, OSError):
                pass


def _watch(lock_ref, stop, pubsub, token):
    listening = pubsub
    while not stop.is_set():
        message = None
        if listening is not None:
            try:
                message = listening.get_message(timeout=0.2)
            except (redis.RedisError, ValueError, OSError):
                listening = None
        elif stop.wait(0.2):
            return
        lock = lock_ref()
        if lock is None:
            return
        reason = ends_holding(message, token) if message else None
        if reason:
            return lock._lose(reason)
        if lock.is_lost():
            return
        del lock


def _release_dropped(conn, name, token, stop, own_connection):
    """A lock dropped without release: stop its threads (the event thread closes its
    subscription) and give it back."""
    stop.set()
    try:
        conn.execute_command("FLOCK.RELEASE", name, token)
    except redis.RedisError:
        pass  # the lease runs out on its own
    if own_connection:
        conn.close()

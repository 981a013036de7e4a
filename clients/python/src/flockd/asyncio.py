"""The asyncio variant, on redis.asyncio: `async with client.lock(...) as lock:` with
`lock.lost` an asyncio.Event, renewed by a task at a third of the lease."""

import asyncio
import time
import weakref

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry

from . import (SUBSCRIBE_TIMEOUT, ClientBase, LockBase, LockLost, LockNotAcquired, _margin,
               ends_holding, is_notowner, is_subscribed, renews_at_once)

__all__ = ["AsyncClient", "AsyncLock"]


class AsyncClient(ClientBase):
    """Connections to one flockd: `AsyncClient(host, port, ...)` takes redis.asyncio.Redis's
    arguments."""

    redis_class = aioredis.Redis
    retry_class = Retry

    async def aclose(self):
        await self.redis.aclose()


class AsyncLock(LockBase):
    event_class = asyncio.Event

    def __init__(self, *args):
        super().__init__(*args)
        self._tasks = []
        self._released = False

    async def acquire(self):
        own = bool(self.wait) or self._session
        conn = self.client.connection(timeout=(self.wait or 0) + 5.0) if own else self.client.redis
        sent = time.monotonic()
        token = await conn.execute_command(*self._args)
        if token is None:
            if own:
                await conn.aclose()
            return False
        token = int(token)
        if self._session:
            self._conn = conn
        else:
            if own:
                await conn.aclose()
            self._conn = self.client.redis
        if renews_at_once(self.wait, self.lease, sent, time.monotonic()):
            # Granted after a wait: the lease may have started any time before the reply, so
            # renew now, on the renewals' connection, and count from this renewal's send.
            sent = time.monotonic()
            try:
                renewed = await self._conn.execute_command(
                    "FLOCK.RENEW", self.name, token, max(1, int(self.lease * 1000)))
                if renewed != 1:
                    raise redis.ResponseError(f"FLOCK.RENEW replied {renewed!r}")
            except BaseException as e:
                if self._session:
                    await self._conn.aclose()  # which ends a SESSION holding, if still there
                self._conn = None
                if isinstance(e, redis.ResponseError) and is_notowner(e):
                    return False  # the lease ran out before the reply: not acquired
                raise
        self.token = token
        self._valid_until = sent + self.lease
        try:
            self._pubsub = self.client.redis.pubsub()
            channel = f"__flock__:{self.name}"
            await self._pubsub.subscribe(channel)
            # Subscribed before acquire returns, so no event after that is missed (SUBSCRIBE
            # only sends).
            deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
            while (left := deadline - time.monotonic()) > 0:
                if is_subscribed(await self._pubsub.get_message(timeout=left), channel):
                    break
            self._tasks.append(asyncio.create_task(_event_loop(weakref.ref(self), self._pubsub, self.token)))
        except redis.RedisError:
            self._pubsub = None
        self._tasks.append(asyncio.create_task(_renew_loop(weakref.ref(self), sent)))
        # Dropped without release: the tasks hold the lock weakly, and this gives it back on
        # the loop it was taken on.
        self._finalizer = weakref.finalize(
            self, _release_dropped, asyncio.get_running_loop(), self._conn, self.name,
            self.token, self._tasks, self._pubsub, self._session)
        return True

    async def release(self):
        self._released = True
        self._finalizer.detach()
        for task in self._tasks:
            task.cancel()
        try:
            free = await self._conn.execute_command("FLOCK.RELEASE", self.name, self.token)
            return free == 1
        finally:
            if self._pubsub is not None:
                await self._pubsub.aclose()
            if self._session:
                await self._conn.aclose()

    async def __aenter__(self):
        if not await self.acquire():
            raise LockNotAcquired(self.name)
        return self

    async def __aexit__(self, *exc):
        try:
            await self.release()
        except redis.ResponseError:
            pass  # lost already: -NOTOWNER
        return False

    async def fence_set(self, key, value):
        if self.is_lost():
            raise LockLost(self.lost_reason)
        stored = await self._conn.execute_command(
            "FENCE.SET", key, self.token, value, "LOCK", self.name)
        return stored == 1

    def _lose(self, reason):
        if not self.lost.is_set() and not self._released:
            self.lost_reason = reason
            self.lost.set()


AsyncClient.lock_class = AsyncLock


async def _renew_loop(lock_ref, renewed_at):
    while True:
        lock = lock_ref()
        if lock is None:
            return
        delay = max(0.0, renewed_at + lock.lease / 3.0 - time.monotonic())
        del lock
        await asyncio.sleep(delay)
        lock = lock_ref()
        if lock is None or lock._released or lock.is_lost():
            return
        sent = time.monotonic()
        remaining = lock._valid_until - _margin(lock.lease) - sent
        try:
            renewed = await asyncio.wait_for(
                lock._conn.execute_command(
                    "FLOCK.RENEW", lock.name, lock.token, max(1, int(lock.lease * 1000))),
                timeout=max(0.001, remaining))
        except asyncio.TimeoutError:
            return lock._lose("the lease is about to run out")
        except redis.ResponseError as e:
            return lock._lose(f"renewal refused: {e}")
        except redis.RedisError as e:
            return lock._lose(f"renewal failed: {e}")
        if renewed != 1:
            return lock._lose(f"FLOCK.RENEW replied {renewed!r}")
        lock._valid_until = sent + lock.lease
        renewed_at = sent
        del lock


async def _event_loop(lock_ref, pubsub, token):
    while True:
        try:
            message = await pubsub.get_message(timeout=1.0)
        except (redis.RedisError, ValueError, OSError):
            return
        reason = ends_holding(message, token) if message else None
        lock = lock_ref()
        if lock is None or lock._released:
            return
        if reason:
            return lock._lose(reason)
        del lock


def _release_dropped(loop, conn, name, token, tasks, pubsub, own_connection):
    """A lock dropped without release: stop its tasks and release it on its loop."""

    async def release():
        for task in tasks:
            task.cancel()
        try:
            await conn.execute_command("FLOCK.RELEASE", name, token)
        except redis.RedisError:
            pass  # the lease runs out on its own
        if pubsub is not None:
            await pubsub.aclose()
        if own_connection:
            await conn.aclose()

    try:
        loop.call_soon_threadsafe(lambda: loop.create_task(release()))
    except RuntimeError:
        pass  # the loop is closed: the lease runs out

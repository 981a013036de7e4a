"""A fenced worker for flockd, with redis-py.

Acquire a lock (waiting in line if it is held), do the work guarded by the fencing token,
and release. Run:  FLOCKD_URL=redis://127.0.0.1:6390 python3 fenced_worker.py
"""

import os
import sys

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

LOCK = "orders:42"
RESOURCE = "res:orders:42"  # a fenced register in flockd itself (FENCE.SET/GET)
LEASE_MS = 10_000  # much longer than the work takes
WAIT_MS = 5_000  # how long to wait in line for the lock


def main() -> int:
    r = redis.Redis.from_url(
        os.environ.get("FLOCKD_URL", "redis://127.0.0.1:6390"),
        decode_responses=True,
        # redis-py 8 defaults to a 5 s socket timeout: the blocking acquire needs more than WAIT.
        socket_timeout=WAIT_MS / 1000 + 5,
        # and to 10 retries on a timeout or connection error: never resend a lock command blindly.
        retry=Retry(NoBackoff(), 0),
    )

    # Blocks up to WAIT_MS; None means we did not get the lock in time.
    token = r.execute_command("FLOCK.ACQUIRE", LOCK, LEASE_MS, "WAIT", WAIT_MS)
    if token is None:
        print("lock busy, giving up")
        return 1
    print(f"acquired {LOCK} with token {token}")
    try:
        # Every write to the protected resource carries the token. 0 = a newer holder wrote
        # already: we lost the lock (e.g. we paused past our lease) and must stop.
        if r.execute_command("FENCE.SET", RESOURCE, token, f"written by token {token}") != 1:
            print("fenced out: a newer holder exists, stopping")
            return 2
        # Long work? Extend the lease before it runs out (a watchdog would do this on a timer).
        r.execute_command("FLOCK.RENEW", LOCK, token, LEASE_MS)
        stored = r.execute_command("FENCE.GET", RESOURCE)
        if stored != f"written by token {token}":
            print(f"fenced register holds {stored!r}, expected our value")
            return 2
        print(f"stored: {stored}")
    finally:
        try:
            free = r.execute_command("FLOCK.RELEASE", LOCK, token)
            print(f"released (free={free})")
        except redis.ResponseError as e:
            # NOTOWNER: the lease expired or the lock was force-released while we worked.
            print(f"release failed: {e}")
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

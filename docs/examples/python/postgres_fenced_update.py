"""The fenced UPDATE of docs/fencing.md, for real: two holders of orders:42 write the same row
of a PostgreSQL table, each with its token; the holder whose lease ran out is fenced out (its
UPDATE matches 0 rows) although it writes last.

    FLOCKD_URL=redis://127.0.0.1:6390 PG_DSN="host=127.0.0.1 port=5432 user=flockd dbname=postgres" \\
        python3 docs/examples/python/postgres_fenced_update.py

Needs the flockd package (pip install ./clients/python) and psycopg 3. Exits 0 when the stale
write was refused and the row holds the newer holder's write, 2 otherwise.
"""

import os
import sys
import time

import psycopg
import redis

from flockd import Client

FENCED_UPDATE = """
    UPDATE orders
       SET status = %s, fence_token = %s
     WHERE id = %s
       AND fence_token <= %s
"""


def write(db, status, token):
    """The fenced write; how many rows it updated (0: fenced out)."""
    with db.cursor() as cur:
        cur.execute(FENCED_UPDATE, (status, token, 42, token))
        db.commit()
        return cur.rowcount


def main():
    url = os.environ.get("FLOCKD_URL", "redis://127.0.0.1:6390")
    db = psycopg.connect(os.environ["PG_DSN"])
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS orders")
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL,"
                    " fence_token BIGINT NOT NULL DEFAULT 0)")
        cur.execute("INSERT INTO orders (id, status) VALUES (42, 'new')")
    db.commit()

    # The stale holder: a plain acquire with a short lease and no renewal (a process that
    # stalls after taking the lock behaves the same).
    r = redis.Redis.from_url(url, socket_timeout=10)
    stale = r.execute_command("FLOCK.ACQUIRE", "orders:42", 300)
    assert write(db, "paid (stale holder, on time)", stale) == 1
    time.sleep(0.5)  # ... and its lease runs out

    client = Client.from_url(url)
    with client.lock("orders:42", lease=30, wait=5) as lock:
        assert lock.token > stale
        assert write(db, "shipped", lock.token) == 1
        # The stale holder wakes up and writes: 0 rows, it is fenced out.
        fenced_out = write(db, "refunded (stale holder, late)", stale) == 0

    with db.cursor() as cur:
        cur.execute("SELECT status, fence_token FROM orders WHERE id = 42")
        status, token = cur.fetchone()
    print(f"stale token {stale}: fenced out {fenced_out}; row: {status!r} with token {token}")
    return 0 if fenced_out and status == "shipped" and token == lock.token else 2


if __name__ == "__main__":
    sys.exit(main())

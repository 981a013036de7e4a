"""docs/cluster.md's redis-py Sentinel recipe, taken from the docs file itself (the fenced block
after its `<!-- recipe: redis-py sentinel ... -->` marker) and run as written against a 3-node
cluster, with only the example's node addresses replaced by the cluster's:

- it carries on across a `kill -9` of the leader: acquire/read/release cycles go on, the first
  command after the kill is answered (or reported as of unknown outcome) within seconds, and it
  ends connected to the new leader;
- it never sends a lock command twice: a blocked FLOCK.ACQUIRE whose connection is cut is
  reported as OutcomeUnknown, and MONITOR on the node sees it once.

    FLOCKD_BIN=target/debug/flockd python3 -m pytest -q tests/cluster_clients/test_docs_recipe.py

Prints the redis-py version under test (CI installs the newest).
"""

import os
import re
import socket
import threading
import time

import redis

from conftest import ROOT

DOC = os.path.join(ROOT, "docs", "cluster.md")
MARKER = "<!-- recipe: redis-py sentinel"
NODES = '[("10.0.0.1", 6390), ("10.0.0.2", 6390), ("10.0.0.3", 6390)]'
CYCLES = 300
KILL_AFTER = 50


def recipe_source():
    text = open(DOC).read()
    at = text.index(MARKER)
    block = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert block and text[at:].index("```python") < text[at:].index("\n\n") + 2, \
        "the marker must be right above the recipe's ```python block"
    return block.group(1)


def run_recipe(cluster):
    """Runs the docs' block as written (its example included), the nodes being this cluster's."""
    source = recipe_source()
    assert source.count(NODES) == 1, "the recipe's example names the nodes as the test expects"
    nodes = repr([("127.0.0.1", p) for p in cluster.ports])
    namespace = {"__name__": "flockd_docs_recipe"}
    exec(compile(source.replace(NODES, nodes), DOC, "exec"), namespace)
    return namespace


def test_the_docs_recipe_carries_on_across_a_leader_kill(cluster):
    print(f"redis-py {redis.__version__}")  # whatever `pip install -U redis` gave: never pinned
    old = cluster.leader()
    recipe = run_recipe(cluster)
    # The example acquired order:1042 and released it.
    assert isinstance(recipe["token"], int), recipe["token"]
    leader, unknown_outcome = recipe["leader"], recipe["OutcomeUnknown"]
    assert leader.client.connection_pool.connection_kwargs["port"] == cluster.ports[old]

    unknown, tokens, first_after_kill, recovered = [], {}, None, None
    name = "docs:recipe:0"
    started = time.monotonic()
    for n in range(CYCLES):
        assert time.monotonic() - started < 60, f"{n} cycles in 60 s"
        if n == KILL_AFTER:
            cluster.kill(old)
            killed = time.monotonic()
        try:
            token = leader.lock("FLOCK.ACQUIRE", name, 10000)
            assert isinstance(token, int), token
            assert leader.read("FLOCK.TOKEN", name) == token
            assert leader.lock("FLOCK.RELEASE", name, token) == 1
            tokens.setdefault(name, []).append(token)
            if n >= KILL_AFTER and recovered is None:
                recovered = time.monotonic() - killed
        except unknown_outcome as e:
            # The caller's part: not resent. The lock may be held now; go on with another.
            unknown.append((n, str(e)))
            name = f"docs:recipe:{n}"
        if n == KILL_AFTER:
            first_after_kill = time.monotonic() - killed
    assert first_after_kill is not None and first_after_kill < 5, first_after_kill
    assert recovered is not None and recovered < 10, recovered
    # The kill can cost the command in flight on the dead connection, and one more cut at the
    # failover: never a stream of them.
    assert len(unknown) <= 2, unknown
    for name, seen in tokens.items():
        assert seen == sorted(seen) and len(set(seen)) == len(seen), (name, seen)
    assert sum(len(t) for t in tokens.values()) >= CYCLES - len(unknown)
    new = cluster.leader()
    assert new != old
    assert leader.client.connection_pool.connection_kwargs["port"] == cluster.ports[new]
    print(f"first command after the kill answered in {first_after_kill:.2f} s, first cycle done "
          f"{recovered:.2f} s after it; unknown outcomes: {unknown}")


def test_the_docs_recipe_never_resends_a_lock_command(cluster):
    lead = cluster.leader()
    port = cluster.ports[lead]
    recipe = run_recipe(cluster)
    leader, unknown_outcome = recipe["leader"], recipe["OutcomeUnknown"]
    holder = redis.Redis(port=port, socket_timeout=10)
    assert isinstance(holder.execute_command("FLOCK.ACQUIRE", "docs:resend", 30000), int)

    # MONITOR on the node: every command it is sent, for a bounded time.
    seen, stop = [], threading.Event()

    def watch():
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"MONITOR\r\n")
            data, deadline = b"", time.monotonic() + 15
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                data += chunk
            seen.extend(data.decode("utf-8", "replace").splitlines())

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.3)
    outcome = {}

    def acquire():
        try:
            outcome["reply"] = leader.lock("FLOCK.ACQUIRE", "docs:resend", 10000, "WAIT", 8000)
        except Exception as e:  # noqa: BLE001 (the test looks at which)
            outcome["error"] = e

    waiter = threading.Thread(target=acquire)
    waiter.start()
    # Cut the waiter's connection while its acquire is queued on the server.
    admin = redis.Redis(port=port, socket_timeout=10, decode_responses=True)
    deadline, killed = time.monotonic() + 5, 0
    while not killed and time.monotonic() < deadline:
        for client in admin.client_list():
            if client.get("cmd") == "flock.acquire" and client.get("flags", "").find("b") >= 0:
                killed = admin.execute_command("CLIENT", "KILL", "ID", client["id"])
        time.sleep(0.05)
    assert killed, admin.client_list()
    waiter.join(timeout=10)
    time.sleep(1.0)  # a resend would arrive within this
    stop.set()
    watcher.join(timeout=5)
    sent = [line for line in seen if '"FLOCK.ACQUIRE"' in line.upper() and '"WAIT"' in line.upper()]
    assert len(sent) == 1, f"the acquire was sent {len(sent)} times: {sent}"
    assert not waiter.is_alive(), "the acquire did not return"
    assert isinstance(outcome.get("error"), unknown_outcome), outcome
    assert admin.execute_command("FLOCK.TOKEN", "docs:resend") == 1

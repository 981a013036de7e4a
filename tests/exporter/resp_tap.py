"""A loopback TCP proxy that logs every RESP command and the kind of its reply.

    python3 resp_tap.py LISTEN_PORT_FILE UPSTREAM_PORT LOG_FILE

Listens on 127.0.0.1 on a free port (written to LISTEN_PORT_FILE once listening), forwards each
connection to 127.0.0.1:UPSTREAM_PORT, and appends one line per request to LOG_FILE:

    INFO ALL -> bulk
    LATENCY LATEST -> error: ERR unknown command 'LATENCY', ...

The first four words of a request are logged (AUTH and HELLO: only the command name and
protocol version). Runs until killed. Used by tests/exporter/run.sh to see exactly what
prometheus-redis-exporter sends and which of it flockd refuses.
"""

import os
import socket
import sys
import threading

KINDS = {
    b"+": "simple",
    b"-": "error",
    b":": "integer",
    b"$": "bulk",
    b"*": "array",
    b"%": "map",
    b"~": "set",
    b"_": "null",
    b",": "double",
    b"#": "boolean",
    b"!": "error",
    b"=": "verbatim",
    b"(": "bignum",
    b">": "push",
    b"|": "attribute",
}


class Reader:
    """Reads RESP values from a socket, keeping what it has read so far."""

    def __init__(self, sock, sink):
        self.sock = sock
        self.buf = b""
        self.sink = sink  # where every byte read is also sent

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.sink.sendall(data)
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def value(self):
        """One RESP value: (kind, payload) where payload is bytes, a list, or None."""
        line = self.line()
        t, rest = line[:1], line[1:]
        if t in (b"$", b"=", b"!") and rest != b"-1":
            return KINDS[t], self.exact(int(rest))
        if t in (b"*", b"~", b">", b"%", b"|") and rest != b"-1":
            n = int(rest) * (2 if t in (b"%", b"|") else 1)
            items = [self.value() for _ in range(n)]
            if t == b"|":  # an attribute precedes the real reply
                return self.value()
            return KINDS[t], items
        if t in (b"$", b"*"):
            return "null", None
        if t in KINDS:
            return KINDS[t], rest
        # An inline command (no RESP framing): words separated by spaces.
        return "inline", [("bulk", w) for w in line.split()]


def describe_request(value):
    kind, items = value
    if kind not in ("array", "inline") or not items:
        return f"<{kind}>"
    words = [w.decode("utf-8", "replace") for _, w in items]
    name = words[0].upper()
    if name in ("AUTH", "HELLO"):  # never log credentials
        return name + (" " + words[1] if name == "HELLO" and len(words) > 1 else "")
    shown = [name] + [w if len(w) <= 40 else w[:40] + "..." for w in words[1:4]]
    return " ".join(shown) + (" ..." if len(words) > 4 else "")


def describe_reply(value):
    kind, payload = value
    if kind == "error":
        return "error: " + payload.decode("utf-8", "replace")
    return kind


def handle(client, upstream_port, log, lock):
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    requests = Reader(client, upstream)
    replies = Reader(upstream, client)
    pending = []
    pending_ready = threading.Condition()

    def read_replies():
        try:
            while True:
                reply = replies.value()
                with pending_ready:
                    while not pending:
                        pending_ready.wait()
                    request = pending.pop(0)
                with lock:
                    log.write(f"{request} -> {describe_reply(reply)}\n")
                    log.flush()
        except (EOFError, OSError):
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    threading.Thread(target=read_replies, daemon=True).start()
    try:
        while True:
            request = describe_request(requests.value())
            with pending_ready:
                pending.append(request)
                pending_ready.notify()
    except (EOFError, OSError):
        pass
    finally:
        try:
            upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main():
    port_file, upstream_port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    log = open(log_path, "a", encoding="utf-8")
    lock = threading.Lock()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    while True:
        client, _ = server.accept()
        threading.Thread(target=handle, args=(client, upstream_port, log, lock), daemon=True).start()


if __name__ == "__main__":
    main()

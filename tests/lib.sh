# Shared by the test scripts under tests/ (source it): start flockd on a free loopback port,
# stop processes by pid, pick free ports, and count checks as `ok   NAME` / `FAIL NAME`.

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
# fail NAME [DETAIL ...]: each detail line is shown indented under the name.
fail() {
    FAILED=$((FAILED + 1))
    echo "FAIL $1"
    shift
    local line
    for line in "$@"; do printf '%s\n' "$line" | sed 's/^/     | /'; done
}
# Prints the totals; its status is the run's (0 only without failures).
summary() {
    if [[ "${SKIPPED:-0}" != 0 ]]; then
        echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    else
        echo "$PASSED passed, $FAILED failed"
    fi
    [[ "$FAILED" == 0 ]]
}

# stop_pid PID: SIGTERM, up to 10 s to exit, then SIGKILL; reaped either way.
stop_pid() {
    local p="$1"
    [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null || return 0
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_flockd TAG WORK [FLAG ...]: runs $FLOCKD_BIN on 127.0.0.1 with a free port and
# WORK/data, logging to WORK/flockd.log; sets PID and PORT once it is ready (30 s at most) or
# exits 1 with its log.
start_flockd() {
    local tag="$1" work="$2"
    shift 2
    "$FLOCKD_BIN" --bind 127.0.0.1 --port 0 --dir "$work/data" "$@" >"$work/flockd.log" 2>&1 &
    PID=$!
    PORT=""
    for _ in $(seq 1 300); do
        PORT="$(sed -n 's/.*ready to accept connections on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/flockd.log" | head -n1)"
        [[ -n "$PORT" ]] && break
        kill -0 "$PID" 2>/dev/null || { echo "$tag: flockd exited:" >&2; cat "$work/flockd.log" >&2; exit 1; }
        sleep 0.1
    done
    [[ -n "$PORT" ]] || { echo "$tag: flockd never became ready" >&2; cat "$work/flockd.log" >&2; exit 1; }
    echo "$tag: flockd pid $PID on 127.0.0.1:$PORT"
}

#!/usr/bin/env bash
# Compatibility suite: drives a real flockd with redis-cli and redis-py.
# Builds nothing: uses ${FLOCKD_BIN:-target/debug/flockd} (run `cargo build` first).
# Needs redis-cli, python3 with `redis` and `pytest` (python3 -m pip install redis pytest).
set -euo pipefail

cd "$(dirname "$0")/../.."
FLOCKD_BIN="${FLOCKD_BIN:-target/debug/flockd}"
[[ -x "$FLOCKD_BIN" ]] || { echo "compat: $FLOCKD_BIN not found; run cargo build first" >&2; exit 2; }
command -v redis-cli >/dev/null || { echo "compat: redis-cli not found" >&2; exit 2; }

. tests/lib.sh
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-compat.XXXXXX")"
PID=""
cleanup() {
    stop_pid "$PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

start_flockd compat "$WORK" --log-level info

# Its checks compare one value: shown as expected and got.
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1"; printf '  expected: %q\n  got:      %q\n' "$2" "$3"; }

cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>&1; }

# check NAME EXPECTED redis-cli-args...: exact output (non-tty redis-cli prints raw replies).
check() {
    local name="$1" expected="$2"
    shift 2
    local got
    got="$(cli "$@")" || true
    if [[ "$got" == "$expected" ]]; then pass "$name"; else fail "$name" "$expected" "$got"; fi
}

# check_match NAME REGEX redis-cli-args...
check_match() {
    local name="$1" regex="$2"
    shift 2
    local got
    got="$(cli "$@")" || true
    if [[ "$got" =~ $regex ]]; then pass "$name"; else fail "$name" "/$regex/" "$got"; fi
}

# --- (a) redis-cli ---
check "PING" "PONG" PING
check "PING message" "hello" PING hello
# With -3, redis-cli speaks RESP3 and prints map entries as "key value" lines.
check_match "-3 HELLO 3" "^server flockd"$'\n'"version 7\.2\.0"$'\n'"proto 3"$'\n' -3 HELLO 3
check "-3 FLOCK.STATUS is a map" "$(printf '%s\n' 'name compat:free' 'locked 0' 'token ' 'owner ' 'ttl -2' 'holds 0' 'waiters 0' 'last-token 0' 'holdings 0' 'limit 0' 'delay 0' | head -c -1)" -3 FLOCK.STATUS compat:free
check "CLIENT SETNAME" "OK" CLIENT SETNAME x
check_match "INFO has redis_version" "redis_version:7\.2\.0" INFO
check_match "INFO server section" "# Server" INFO server
check_match "COMMAND COUNT is an integer" "^[0-9]+$" COMMAND COUNT
check "FLOCK.ACQUIRE grants token 1" "1" FLOCK.ACQUIRE order:1042 30000
# A nil reply is an empty line for redis-cli when stdout is not a tty.
check "FLOCK.ACQUIRE on a held lock is nil" "" FLOCK.ACQUIRE order:1042 30000
check "FLOCK.TOKEN" "1" FLOCK.TOKEN order:1042
check "FLOCK.RELEASE" "1" FLOCK.RELEASE order:1042 1
check "FLOCK.ACQUIRE grants token 2" "2" FLOCK.ACQUIRE order:1042 30000
check_match "FLOCK.RELEASE with an old token is NOTOWNER" "^NOTOWNER" FLOCK.RELEASE order:1042 1
check_match "unknown command error" "^ERR unknown command 'nosuch'" nosuch arg
check "SELECT 0" "OK" SELECT 0
check "FENCE.SET" "1" FENCE.SET compat:fence 5 five
check "FENCE.SET lower token refused" "0" FENCE.SET compat:fence 4 four
check "FENCE.GET" "five" FENCE.GET compat:fence
# redis-cli --scan walks lock names and fence keys with SCAN.
check "redis-cli --scan --pattern" "order:1042" --scan --pattern 'order:*'
check "TYPE of a fence key" "fence" TYPE compat:fence

# Commands piped through stdin, one per line, as a user would type them.
got="$(printf '%s\n' 'PING' 'ECHO "hello world"' 'FLOCK.ACQUIRE stdin:lock 30000' 'FLOCK.ACQUIRE stdin:lock 30000' \
    'FLOCK.STATUS stdin:lock' 'FLOCK.RELEASE stdin:lock 1' 'FLOCK.TTL stdin:lock' | cli)" || true
expected="$(printf '%s\n' PONG 'hello world' 1 '' name stdin:lock locked 1 token 1 owner '' ttl)"
if [[ "$got" == "$expected"* ]] && [[ "$got" == *$'\n'"1"$'\n'"-2" ]]; then
    pass "redis-cli reading commands from stdin"
else
    fail "redis-cli reading commands from stdin" "$expected ... 1 -2" "$got"
fi
# A pipe of RESP through --pipe (mass insertion mode).
got="$(printf 'PING\r\nFLOCK.ACQUIRE pipe:lock 30000\r\n' | cli --pipe)" || true
if [[ "$got" == *"errors: 0, replies: 2"* ]]; then pass "redis-cli --pipe"; else fail "redis-cli --pipe" "errors: 0, replies: 2" "$got"; fi

# --- (b) redis-py ---
if FLOCKD_URL="redis://127.0.0.1:$PORT" timeout 300 python3 -m pytest -q -p no:cacheprovider tests/compat/test_redis_py.py; then
    pass "redis-py suite (pytest)"
else
    fail "redis-py suite (pytest)" "pytest exit 0" "failures above"
fi

# flockd is still up, then stops cleanly.
check "PING after everything" "PONG" PING
kill -TERM "$PID"
status=0
for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
wait "$PID" || status=$?
PID=""
if [[ "$status" == 0 ]]; then pass "flockd exits 0 on SIGTERM"; else fail "flockd exits 0 on SIGTERM" 0 "$status"; fi

echo "compat: $PASSED passed, $FAILED failed"
[[ "$FAILED" == 0 ]]

#!/usr/bin/env bash
# Debian's prometheus-redis-exporter scrapes a real flockd without errors.
#
#   FLOCKD_BIN=target/debug/flockd bash tests/exporter/run.sh     (cargo build -p flockd first)
#
# Needs prometheus-redis-exporter (apt-get install prometheus-redis-exporter), curl, python3.
# The exporter talks to flockd through tests/exporter/resp_tap.py, a loopback proxy that logs
# every command it sends and the kind of reply it got, so the script can list exactly what the
# exporter asks for and which of it flockd refuses. Prints `ok   NAME` / `FAIL NAME` per check
# and `N passed, M failed`.
set -euo pipefail

cd "$(dirname "$0")/../.."
FLOCKD_BIN="${FLOCKD_BIN:-target/debug/flockd}"
EXPORTER="${EXPORTER:-prometheus-redis-exporter}"
[[ -x "$FLOCKD_BIN" ]] || { echo "exporter: $FLOCKD_BIN not found; run cargo build -p flockd first" >&2; exit 2; }
for tool in "$EXPORTER" curl python3 redis-cli; do
    command -v "$tool" >/dev/null || { echo "exporter: $tool not found" >&2; exit 2; }
done

. tests/lib.sh
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-exporter.XXXXXX")"
PID=""
TAP_PID=""
EXPORTER_PID=""
cleanup() {
    stop_pid "$EXPORTER_PID"
    stop_pid "$TAP_PID"
    stop_pid "$PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- flockd on a free loopback port ---
start_flockd exporter "$WORK"
cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>&1; }

# Some state, so that the lock and fence figures are not all zero.
token="$(cli FLOCK.ACQUIRE exporter:lock 60000)"
cli FENCE.SET exporter:res "$token" value >/dev/null
cli FLOCK.ACQUIRE exporter:other 60000 >/dev/null

# --- the tap between the exporter and flockd ---
python3 tests/exporter/resp_tap.py "$WORK/tap.port" "$PORT" "$WORK/tap.log" 2>"$WORK/tap.err" &
TAP_PID=$!
for _ in $(seq 1 100); do [[ -s "$WORK/tap.port" ]] && break; sleep 0.05; done
[[ -s "$WORK/tap.port" ]] || { echo "exporter: resp_tap.py did not start:" >&2; cat "$WORK/tap.err" >&2; exit 1; }
TAP_PORT="$(cat "$WORK/tap.port")"

# --- the exporter, on a free loopback port (retried if another process takes it first) ---
WEB_PORT=""
for _ in 1 2 3; do
    WEB_PORT="$(free_port)"
    # Everything the exporter can ask a plain Redis for, without key scans or Lua scripts.
    "$EXPORTER" --redis.addr "redis://127.0.0.1:$TAP_PORT" --web.listen-address "127.0.0.1:$WEB_PORT" \
        --ping-on-connect --include-system-metrics --include-config-metrics --export-client-list \
        >"$WORK/exporter.log" 2>&1 &
    EXPORTER_PID=$!
    up=""
    for _ in $(seq 1 100); do
        if curl -fsS -o /dev/null "http://127.0.0.1:$WEB_PORT/"; then up=1; break; fi
        kill -0 "$EXPORTER_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$up" ]] && break
    stop_pid "$EXPORTER_PID"
    EXPORTER_PID=""
done
[[ -n "$EXPORTER_PID" ]] || { echo "exporter: $EXPORTER never listened:" >&2; cat "$WORK/exporter.log" >&2; exit 1; }
echo "exporter: $("$EXPORTER" --version 2>&1 | sed -n 's/.*msg="\([^"]*\)".*/\1/p' | head -n1 | tr -s ' ') on 127.0.0.1:$WEB_PORT"

# Two scrapes: the exporter logs some errors only once, others on every scrape.
curl -fsS "http://127.0.0.1:$WEB_PORT/metrics" >"$WORK/metrics1.txt" || true
curl -fsS "http://127.0.0.1:$WEB_PORT/metrics" >"$WORK/metrics.txt" || true
sleep 0.3 # the tap logs a reply just after forwarding it

metric() { grep -E "^$1( |\{)" "$WORK/metrics.txt" | head -n1 || true; }

# --- what the exporter sent, and what flockd refused ---
echo "exporter: commands sent per scrape (through the tap), with flockd's reply:"
sort "$WORK/tap.log" | uniq -c | sed 's/^ */     /'

got="$(metric redis_up)"
if [[ "$got" == "redis_up 1" ]]; then pass "redis_up 1"; else fail "redis_up 1" "got: $got"; fi

got="$(metric redis_exporter_last_scrape_error)"
if [[ "$got" == *'err=""} 0' ]]; then pass "no scrape error"; else fail "no scrape error" "got: $got"; fi

refused="$(grep -- '-> error' "$WORK/tap.log" | sort -u || true)"
if [[ -z "$refused" ]]; then pass "flockd answers every command the exporter sends"; else fail "flockd answers every command the exporter sends" "$refused"; fi

bad_log="$(grep -Ei 'level=(error|warn|fatal)|unknown command|err:' "$WORK/exporter.log" || true)"
if [[ -z "$bad_log" ]]; then pass "no errors in the exporter's log"; else fail "no errors in the exporter's log" "$bad_log"; fi

for want in redis_connected_clients redis_commands_processed_total redis_uptime_in_seconds redis_memory_used_bytes \
    redis_aof_enabled redis_instance_info redis_commands_total redis_slowlog_length; do
    got="$(metric "$want")"
    if [[ -n "$got" ]]; then pass "metric $want"; else fail "metric $want" "not in /metrics"; fi
done
got="$(grep -E '^redis_commands_total\{cmd="flock\.acquire"' "$WORK/metrics.txt" || true)"
if [[ -n "$got" ]]; then pass "per-command stats include flock.acquire"; else fail "per-command stats include flock.acquire" "no redis_commands_total{cmd=\"flock.acquire\"}"; fi

if cli PING | grep -qx PONG; then pass "flockd still answers"; else fail "flockd still answers" "$(tail -n 20 "$WORK/flockd.log")"; fi

summary

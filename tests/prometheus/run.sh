#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes flockd's metrics port: the target is up with no
# scrape error (Prometheus parses the OpenMetrics text strictly), and its query API returns the
# contract's series with the values the commands caused.
#
#   FLOCKD_BIN=target/debug/flockd bash tests/prometheus/run.sh     (cargo build -p flockd first)
#
# Needs prometheus and promtool (apt-get install prometheus), curl, python3, redis-cli. Prints `ok   NAME` /
# `FAIL NAME` per check and `N passed, M failed`. Both processes are stopped by pid on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
FLOCKD_BIN="${FLOCKD_BIN:-target/debug/flockd}"
PROMETHEUS="${PROMETHEUS:-prometheus}"
[[ -x "$FLOCKD_BIN" ]] || { echo "prometheus: $FLOCKD_BIN not found; run cargo build -p flockd first" >&2; exit 2; }
for tool in "$PROMETHEUS" curl python3 redis-cli; do
    command -v "$tool" >/dev/null || { echo "prometheus: $tool not found" >&2; exit 2; }
done

. tests/lib.sh
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-prometheus.XXXXXX")"
PID=""
PROM_PID=""
cleanup() {
    stop_pid "$PROM_PID"
    stop_pid "$PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- flockd with its metrics port, both on free loopback ports ---
start_flockd prometheus "$WORK" --metrics-port 0
METRICS="$(sed -n 's|.*metrics on http://\(127\.0\.0\.1:[0-9]*\)/metrics.*|\1|p' "$WORK/flockd.log" | head -n1)"
echo "prometheus: metrics on $METRICS"
cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>&1; }

token="$(cli FLOCK.ACQUIRE prom:lock 60000)"
cli FLOCK.ACQUIRE prom:lock 60000 >/dev/null # busy
cli FLOCK.RELEASE prom:lock 99 >/dev/null || true # NOTOWNER
cli FENCE.SET prom:res "$token" v >/dev/null

# --- Prometheus, scraping every second ---
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  # Rules are evaluated every second (the default is a minute: their health is "unknown" until
  # the first evaluation).
  evaluation_interval: 1s
rule_files:
  - "$PWD/config/prometheus/flockd-alerts.yml"
scrape_configs:
  - job_name: flockd
    static_configs:
      - targets: ["$METRICS"]
EOF
WEB=""
for _ in 1 2 3; do
    WEB="127.0.0.1:$(free_port)"
    "$PROMETHEUS" --config.file "$WORK/prometheus.yml" --storage.tsdb.path "$WORK/tsdb" \
        --web.listen-address "$WEB" >"$WORK/prometheus.log" 2>&1 &
    PROM_PID=$!
    up=""
    for _ in $(seq 1 150); do
        if curl -fsS -o /dev/null "http://$WEB/-/ready" 2>/dev/null; then up=1; break; fi
        kill -0 "$PROM_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$up" ]] && break
    stop_pid "$PROM_PID"
    PROM_PID=""
done
[[ -n "$PROM_PID" ]] || { echo "prometheus: never became ready:" >&2; cat "$WORK/prometheus.log" >&2; exit 1; }
echo "prometheus: $("$PROMETHEUS" --version 2>&1 | head -n1) on $WEB"

query() { curl -fsS --get "http://$WEB/api/v1/query" --data-urlencode "query=$1"; }
# The value of the first series a query returns ("" if none), with python3 reading the JSON.
value() {
    query "$1" | python3 -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")'
}

# Wait for two scrapes of the target (bounded: 30 s).
health=""
for _ in $(seq 1 300); do
    health="$(curl -fsS "http://$WEB/api/v1/targets" | python3 -c 'import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
print(t[0]["health"] + " " + repr(t[0]["lastError"]) if t else "none")')"
    [[ "$health" == "up ''" && "$(value 'count_over_time(up{job="flockd"}[1m])')" -ge 2 ]] 2>/dev/null && break
    sleep 0.1
done
if [[ "$health" == "up ''" ]]; then pass "target up, no scrape error"; else fail "target up, no scrape error" "$health" "$(tail -n 5 "$WORK/prometheus.log")"; fi

check() {
    local name="$1" promql="$2" want="$3" got
    got="$(value "$promql")"
    if [[ "$got" == "$want" ]]; then pass "$name = $want"; else fail "$name = $want" "query: $promql" "got: '$got'"; fi
}
check "flockd_build_info" 'flockd_build_info' 1
check "flockd_commands_total{command=flock.acquire}" 'flockd_commands_total{command="flock.acquire"}' 2
check "flockd_command_errors_total NOTOWNER" 'flockd_command_errors_total{command="flock.release",error="NOTOWNER"}' 1
check "flockd_lock_busy_total" 'flockd_lock_busy_total' 1
check "flockd_locks_held" 'flockd_locks_held' 1
check "flockd_fence_writes_total{accepted}" 'flockd_fence_writes_total{result="accepted"}' 1
check "histogram count of flock.acquire durations" 'flockd_command_duration_seconds_count{command="flock.acquire"}' 2
check "records per fsync: one sample per fsync" \
    'flockd_aof_records_per_fsync_count - flockd_aof_fsync_duration_seconds_count' 0
got="$(value 'histogram_quantile(0.5, sum by (le) (flockd_aof_fsync_duration_seconds_bucket))')"
if [[ -n "$got" && "$got" != "NaN" ]]; then pass "histogram_quantile over fsync durations ($got s)"; else fail "histogram_quantile over fsync durations" "got: '$got'"; fi
# Every name of the contract that a single node has.
for name in flockd_build_info flockd_connected_clients flockd_blocked_clients flockd_commands_total \
    flockd_command_errors_total flockd_command_duration_seconds_bucket flockd_lock_names flockd_locks_held \
    flockd_lock_waiters flockd_lock_grants_total flockd_lock_renewals_total flockd_lock_releases_total \
    flockd_lock_expirations_total flockd_lock_force_releases_total flockd_lock_busy_total \
    flockd_lock_wait_seconds_bucket flockd_lock_hold_seconds_bucket flockd_fence_writes_total \
    flockd_token_floor flockd_aof_fsync_duration_seconds_bucket flockd_aof_records_per_fsync_bucket \
    flockd_aof_size_bytes flockd_aof_rewrites_total flockd_aof_write_errors_total; do
    n="$(query "count($name)" | python3 -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else 0)')"
    if [[ "$n" -ge 1 ]]; then pass "series $name"; else fail "series $name" "none in Prometheus"; fi
done

# promtool's own lint of the body. It parses the text format 0.0.4, where a counter's HELP is
# on its `_total` name; OpenMetrics puts it on the family's name. So its one expected complaint
# is "no help text" for `X_total` where the body has `# HELP X` and `# TYPE X counter`; any parse
# error or any other complaint fails.
curl -fsS "http://$METRICS/metrics" >"$WORK/metrics.txt"
lint_rc=0
lint="$(promtool check metrics <"$WORK/metrics.txt" 2>&1)" || lint_rc=$?
verdict="$(LINT="$lint" LINT_RC="$lint_rc" python3 - "$WORK/metrics.txt" <<'PY'
import os, re, sys
body = open(sys.argv[1]).read()
rc, lines = int(os.environ["LINT_RC"]), [l for l in os.environ["LINT"].splitlines() if l.strip()]
counters = set(re.findall(r"^# TYPE (\S+) counter$", body, re.M))
helped = set(re.findall(r"^# HELP (\S+) ", body, re.M))
odd = [l for l in lines
       if not ((m := re.fullmatch(r"(\S+)_total no help text", l)) and m[1] in counters and m[1] in helped)]
if rc not in (0, 3) or odd:
    print("bad: rc %d: %s" % (rc, " | ".join(odd or lines)[:600]))
else:
    print("ok: rc %d, %d counter(s) with their HELP on the OpenMetrics family name" % (rc, len(lines)))
PY
)"
if [[ "$verdict" == ok:* ]]; then pass "promtool check metrics (${verdict#ok: })"; else fail "promtool check metrics" "$verdict"; fi

# The shipped alert rules: valid, and loaded and evaluated by this Prometheus.
if out="$(promtool check rules config/prometheus/flockd-alerts.yml 2>&1)"; then pass "promtool check rules"; else fail "promtool check rules" "$out"; fi
rules=""
for _ in $(seq 1 150); do
    rules="$(curl -fsS "http://$WEB/api/v1/rules" | python3 -c 'import json, sys
g = json.load(sys.stdin)["data"]["groups"]
r = [x for grp in g for x in grp["rules"]]
print(" ".join(sorted(x["name"] + ":" + x["health"] for x in r)))')"
    [[ "$rules" == *FlockdClusterNoLeader:ok* && "$rules" == *FlockdDown:ok* && "$rules" == *FlockdFsyncSlow:ok* && "$rules" == *FlockdLeaderFlapping:ok* && "$rules" == *FlockdLeaseExpirationsSpiking:ok* ]] && break
    sleep 0.1
done
if [[ "$rules" == "FlockdClusterNoLeader:ok FlockdDown:ok FlockdFsyncSlow:ok FlockdLeaderFlapping:ok FlockdLeaseExpirationsSpiking:ok" ]]; then pass "alert rules evaluated: $rules"; else fail "alert rules evaluated" "got: $rules"; fi

if cli PING | grep -qx PONG; then pass "flockd still answers"; else fail "flockd still answers" "$(tail -n 20 "$WORK/flockd.log")"; fi

summary

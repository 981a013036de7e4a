#!/usr/bin/env bash
# Memory per lock name and recovery speed, as reported in docs/benchmarks.md:
#   1. resident bytes per idle name (FLOCK.ADVANCE on random names) at NAMES names;
#   2. resident bytes per held lock (FLOCK.ACQUIRE with a 1 h lease) at HELD locks;
#   3. BIG idle names, BGREWRITEAOF, SIGTERM, restart: time from start to the "ready" line and
#      the "AOF loaded" figures.
# RSS is read SETTLE_S seconds after the load (default 1). Tables that grow by reallocating
# free their old arrays, and jemalloc keeps freed pages for its decay time (10 s): SETTLE_S=15
# reads what stays.
# Needs a release flockd (cargo build --release -p flockd) and redis-benchmark (redis-tools).
# Loopback only; every flockd it starts is stopped by pid, also on error.
#   crates/flockd-bench/memory_recovery.sh [NAMES=1000000] [HELD=300000] [BIG=10000000] [SETTLE_S=1]
set -euo pipefail
cd "$(dirname "$0")/../.."

NAMES=${NAMES:-1000000}
HELD=${HELD:-300000}
BIG=${BIG:-10000000}
FLOCKD=${FLOCKD:-target/release/flockd}
PORT=${PORT:-6479}
[ -x "$FLOCKD" ] || { echo "no $FLOCKD: run cargo build --release -p flockd first" >&2; exit 2; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark missing (Debian package redis-tools)" >&2; exit 2; }

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

start() { # dir, extra flags...
  local dir=$1; shift
  : > "$work/log"
  "$FLOCKD" --port "$PORT" --dir "$dir" --appendfsync no "$@" 2> "$work/log" &
  pid=$!
  for _ in $(seq 1 1200); do grep -q "ready to accept" "$work/log" && return 0; sleep 0.05; done
  echo "flockd did not start:" >&2; cat "$work/log" >&2; exit 1
}
stop() {
  kill -TERM "$pid"; wait "$pid" || true; pid=""
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
info() { redis-cli -p "$PORT" INFO locks | tr -d '\r' | awk -F: -v k="$1" '$1 == k {print $2}'; }
load() { # count, range, command...
  local n=$1 r=$2; shift 2
  redis-benchmark -p "$PORT" -c 50 -P 64 -n "$n" -r "$r" -q "$@" > /dev/null
}

# Resident bytes per counted item: start fresh, load, divide the RSS growth by an INFO field.
per_item() { # label, dir, info field, count, command...
  local label=$1 dir=$2 field=$3 n=$4; shift 4
  echo "== $label"
  start "$work/$dir" --max-idle-names 0
  local before after items
  before=$(rss_kib)
  load "$n" 1000000000 "$@"
  sleep "${SETTLE_S:-1}"
  after=$(rss_kib); items=$(info "$field")
  echo "$field=$items rss_before=${before}KiB rss_after=${after}KiB bytes_each=$(( (after - before) * 1024 / items ))"
  stop
}

per_item "idle names" idle lock_names "$NAMES" FLOCK.ADVANCE __rand_int__ 5
per_item "held locks" held locks_held "$HELD" FLOCK.ACQUIRE __rand_int__ 3600000

echo "== recovery of $BIG names after a rewrite"
start "$work/big" --max-idle-names 0 --auto-aof-rewrite-percentage 0
load "$BIG" 2000000000 FLOCK.ADVANCE __rand_int__ 5
names=$(info lock_names)
redis-cli -p "$PORT" BGREWRITEAOF > /dev/null
for _ in $(seq 1 600); do
  redis-cli -p "$PORT" INFO persistence | grep -q '^aof_rewrite_in_progress:0' && break
  sleep 0.5
done
stop
sleep 2
t0=$(date +%s.%N)
start "$work/big" --max-idle-names 0
t1=$(date +%s.%N)
echo "names=$names aof_bytes=$(stat -c %s "$work/big/flockd.aof") start_to_ready_s=$(echo "$t1 - $t0" | bc)"
grep "AOF loaded" "$work/log" | sed 's/.*AOF loaded/AOF loaded/'
stop

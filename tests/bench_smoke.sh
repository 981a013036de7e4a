#!/usr/bin/env bash
# Smoke run of the benchmark tool (used by .ci/run): starts flockd and redis-server on loopback
# ports, drives every workload for one short round against each with both fsync policies, and
# fails if the tool fails (a server did not start, or replied with an error).
#
# Debug builds on purpose: CI's `cargo test` has already built target/debug/flockd, so this
# costs one small crate instead of a release build of the whole workspace (minutes on 2 cores);
# the smoke run checks that everything works, not how fast. Numbers from it mean nothing.
# Set BENCH_SMOKE_PROFILE=release to smoke-test release binaries instead.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${BENCH_SMOKE_PROFILE:-debug}"
target_dir="${CARGO_TARGET_DIR:-target}"
# the etcd comparison needs etcd-server to run and protoc to build etcd's client
features=()
if command -v etcd >/dev/null 2>&1 && command -v protoc >/dev/null 2>&1; then
  features=(--features flockd-bench/etcd)
fi
if [ "$profile" = release ]; then
  cargo build --release -p flockd -p flockd-bench "${features[@]}"
else
  cargo build -p flockd -p flockd-bench "${features[@]}"
fi

start=$(date +%s)
timeout 120 "$target_dir/$profile/flockd-bench" --smoke --flockd "$target_dir/$profile/flockd" "$@"
# the cluster comparison: a single node, a 3-node flockd cluster and, where Debian's etcd-server
# is installed, a 3-node etcd cluster driven through its lock API
etcd_args=()
if ((${#features[@]})); then
  etcd_args=(--etcd "$(command -v etcd)")
else
  echo "bench smoke: etcd or protoc not installed, the etcd comparison is SKIPPED"
fi
timeout 180 "$target_dir/$profile/flockd-bench" --smoke --flockd "$target_dir/$profile/flockd" \
  --only none --no-sweep --fsync always --cluster "${etcd_args[@]}" "$@"
# the one-feature comparisons: subscribers, the metrics port scraped, TLS
timeout 120 "$target_dir/$profile/flockd-bench" --smoke --flockd "$target_dir/$profile/flockd" \
  --only none --no-sweep --fsync everysec --subscribers 2 --metrics-cost --tls-cost --rounds 2 "$@"
# the floor under a replicated op without flockd (docs/benchmarks.md): its three roles run and
# answer, and it leaves no file behind
floor_dir=$(mktemp -d)
timeout 60 "$target_dir/$profile/replication_floor" --ops 50 --rounds 1 --dir "$floor_dir"
if [ -n "$(ls -A "$floor_dir")" ]; then
  echo "bench smoke: replication_floor left files in $floor_dir: $(ls "$floor_dir")" >&2
  exit 1
fi
rmdir "$floor_dir"
echo "bench smoke: ok in $(( $(date +%s) - start )) s"

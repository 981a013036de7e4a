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
if [ "$profile" = release ]; then
  cargo build --release -p flockd -p flockd-bench
else
  cargo build -p flockd -p flockd-bench
fi

start=$(date +%s)
timeout 120 "$target_dir/$profile/flockd-bench" --smoke --flockd "$target_dir/$profile/flockd" "$@"
echo "bench smoke: ok in $(( $(date +%s) - start )) s"

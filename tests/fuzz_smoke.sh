#!/usr/bin/env bash
# A short run of every fuzz target under fuzz/ (FLOCKD_FUZZ_SECONDS each, default 60), so CI
# catches a target that no longer builds or an input that crashes at once. The long runs
# (10 million executions and more) are done by hand: see docs/operations.md.
# cargo-fuzz needs a nightly compiler: the nightly toolchain if rustup has one, else the stable
# one with RUSTC_BOOTSTRAP=1 (which lets it take the -Z flags). Installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FLOCKD_FUZZ_SECONDS:-60}"

toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
  echo "fuzz: $(rustc +nightly --version)"
else
  export RUSTC_BOOTSTRAP=1
  echo "fuzz: no nightly toolchain, $(rustc --version) with RUSTC_BOOTSTRAP=1"
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --quiet --locked cargo-fuzz

failed=0
for target in $(cargo "${toolchain[@]}" fuzz list); do
  log="$(mktemp)"
  started=$SECONDS
  if cargo "${toolchain[@]}" fuzz run "$target" -- -max_total_time="$secs" -max_len=4096 >"$log" 2>&1; then
    echo "ok   $target: $(grep -E '^Done [0-9]+ runs' "$log" | tail -n1) ($((SECONDS - started)) s with the build)"
  else
    echo "FAIL $target"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|^error' "$log" | head -n 20 | sed 's/^/     | /'
    failed=1
  fi
  rm -f "$log"
done
exit "$failed"

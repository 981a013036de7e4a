#!/usr/bin/env bash
# The instruction-count guard: runs crates/flockd-instructions's benchmarks under valgrind (gungraun)
# and fails (exit 1) when a benchmark's instruction count grew by more than 10% against the
# committed figures in crates/flockd-instructions/baseline.toml, printing benchmark, committed, now and
# ratio. Instruction counts repeat on a noisy machine, so the check needs no retries or slack
# beyond the 10%.
#
#   tests/instruction_guard.sh                                   check
#   GUARD_UPDATE=1 GUARD_REASON='why' tests/instruction_guard.sh  rewrite the figures (commit them
#                                                                 with the change that moved them)
#
# Needs valgrind and gungraun-runner of the same version as the gungraun library in Cargo.lock;
# the runner is installed with cargo when missing or of another version.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null 2>&1 || { echo "instruction guard: valgrind is not installed" >&2; exit 2; }

# The runner must match the library exactly (gungraun refuses to run otherwise).
version=$(awk '/^name = "gungraun"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
[ -n "$version" ] || { echo "instruction guard: no gungraun in Cargo.lock" >&2; exit 2; }
if [ "$(gungraun-runner --version 2>/dev/null | awk '{print $2}')" != "$version" ]; then
  echo "instruction guard: installing gungraun-runner $version"
  timeout 1200 cargo install --quiet --locked gungraun-runner --version "$version"
fi

# Build first (release profile, outside the time bound of the run itself), then run: the
# valgrind part takes well under a minute.
timeout 1800 cargo bench --quiet -p flockd-instructions --bench op_path --no-run

summary=target/gungraun/guard-summary.jsonl
mkdir -p "$(dirname "$summary")"
timeout 600 cargo bench --quiet -p flockd-instructions --bench op_path -- --output-format=json >"$summary"

args=("$summary" crates/flockd-instructions/baseline.toml)
if [ "${GUARD_UPDATE:-}" = 1 ]; then
  args+=(--update --reason "${GUARD_REASON:-}")
fi
python3 tests/instruction_guard.py "${args[@]}"

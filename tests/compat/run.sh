#!/usr/bin/env bash
# Run the ops-driven compatibility suite against a cobble binary.
#
#   COBBLE_BIN=/path/to/cobble tests/compat/run.sh [pytest args...]
#   ADMISSION_WEBHOOK_BIN=/path/to/admission-webhook (optional; the founding case's webhook)
#   COMPAT_FOUNDING_PUSH_AFTER=45 (optional; the charm's real delay before the cert push)
#
# COBBLE_BIN defaults to target/debug/cobble under the repository root; this
# script never builds it. The Python environment lives in $REPO/.venv and is
# (re)provisioned whenever tests/compat/requirements.txt changes, so a fresh
# machine needs only python3.11 (or python3 >= 3.10) and pip.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV="$REPO/.venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.compat-requirements.sha256"

pick_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
    done
    echo "run.sh: no python3.11 or python3 on PATH" >&2
    exit 2
}

provision_venv() {
    local py
    py=$(pick_python)
    if [ ! -x "$VENV/bin/python" ]; then
        echo "run.sh: creating $VENV with $py" >&2
        if ! "$py" -m venv "$VENV" 2>/dev/null; then
            # Debian-style pythons without ensurepip: make a bare venv and
            # drive the system pip at it instead.
            rm -rf "$VENV"
            "$py" -m venv --without-pip "$VENV"
        fi
    fi
    if "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    else
        "$py" -m pip --python "$VENV/bin/python" install -q --disable-pip-version-check -r "$REQ"
    fi
}

want=$(sha256sum "$REQ" | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ ! -x "$VENV/bin/python" ] || [ "$want" != "$have" ]; then
    provision_venv
    echo "$want" > "$STAMP"
fi

COBBLE_BIN=${COBBLE_BIN:-$REPO/target/debug/cobble}
case "$COBBLE_BIN" in
    /*) ;;
    *) COBBLE_BIN="$PWD/$COBBLE_BIN" ;;
esac
if [ ! -x "$COBBLE_BIN" ]; then
    echo "run.sh: cobble binary not found or not executable: $COBBLE_BIN" >&2
    echo "run.sh: build it first (cargo build -p cobble) or set COBBLE_BIN" >&2
    exit 2
fi
export COBBLE_BIN
# The founding case's Rust webhook (crates/admission-webhook); its test skips when the binary
# was not built and ADMISSION_WEBHOOK_BIN is unset.
if [ -n "${ADMISSION_WEBHOOK_BIN:-}" ]; then
    case "$ADMISSION_WEBHOOK_BIN" in
        /*) ;;
        *) ADMISSION_WEBHOOK_BIN="$PWD/$ADMISSION_WEBHOOK_BIN" ;;
    esac
    export ADMISSION_WEBHOOK_BIN
fi
export PYTHONDONTWRITEBYTECODE=1

cd "$REPO"
exec "$VENV/bin/python" -m pytest -q tests/compat "$@"

#!/usr/bin/env bash
# Replays the founding case against a local cobble, as the charm drove Pebble:
#   1. the container starts (`cobble run --hold`, as Juju starts Pebble);
#   2. config-changed adds the charm's layer and replans before the certificates exist:
#      the webhook waits for them instead of exiting 255, so the replan succeeds;
#   3. later hooks re-add the identical layer without replanning;
#   4. pebble-ready pushes the certificates PUSH_AFTER seconds later (45 in the real case);
#   5. an AdmissionReview is answered, and the script prints how long after the push.
# Needs: cobble and admission-webhook (on PATH, or built in target/release or target/debug),
# python3 (a fake API server with one PodDefault), openssl and curl.
#
# Usage: [PUSH_AFTER=45] [SUPERVISOR=/path/to/pebble] examples/admission-webhook/replay.sh
# SUPERVISOR runs the replay under another daemon with Pebble's CLI (real Pebble, for
# instance), which then serves as the daemon and the client alike; by default, cobble.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=/tmp/founding   # the layer's paths point here
PUSH_AFTER=${PUSH_AFTER:-5}
PORT=4443

SUP=${SUPERVISOR:-cobble}
for bin in admission-webhook $([ "$SUP" = cobble ] && echo cobble); do
    if ! command -v "$bin" >/dev/null; then
        for dir in "$REPO/target/release" "$REPO/target/debug"; do
            if [ -x "$dir/$bin" ]; then export PATH="$dir:$PATH"; break; fi
        done
    fi
    command -v "$bin" >/dev/null || { echo "replay: build $bin first (cargo build --release --bin $bin)" >&2; exit 2; }
done

rm -rf "$DIR" && mkdir -p "$DIR"
export PEBBLE="$DIR/pebble"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

python3 "$REPO/tests/compat/fake_apiserver.py" --poddefaults "$HERE/poddefault.json" \
    --kubeconfig "$DIR/kubeconfig" > "$DIR/apiserver.log" 2>&1 &
pids+=($!)
# The charm makes its certificates with openssl; the same, for localhost.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$DIR/key.pem" -out "$DIR/cert.pem" 2>/dev/null

command -v "$SUP" >/dev/null || { echo "replay: no $SUP" >&2; exit 2; }
echo "==> 1. $(basename "$SUP") run --hold (as Juju starts Pebble); logs in $DIR/cobble.log"
"$SUP" run --create-dirs --hold --verbose > "$DIR/cobble.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$PEBBLE/.pebble.socket" ] && [ -f "$DIR/kubeconfig" ] && break; sleep 0.1; done

echo "==> 2. config-changed: add the charm's layer and replan, before the certificates exist"
"$SUP" add admission-webhook "$HERE/layer.yaml"
"$SUP" replan
"$SUP" services

echo "==> 3. later hooks re-add the identical layer for ${PUSH_AFTER}s, never replanning"
end=$((SECONDS + ${PUSH_AFTER%.*}))
while [ "$SECONDS" -lt "$end" ]; do "$SUP" add --combine admission-webhook "$HERE/layer.yaml" >/dev/null; sleep 1; done
if curl -s --max-time 1 --cacert "$DIR/cert.pem" "https://localhost:$PORT/healthz" >/dev/null; then
    echo "replay: something already listens on $PORT" >&2; exit 1
fi
echo "    nothing listens on $PORT yet; the webhook says:"
(grep -m1 "waiting for a valid certificate" "$DIR/cobble.log" || true) | sed 's/^/    /'

echo "==> 4. pebble-ready: push the certificates"
"$SUP" push -p "$DIR/key.pem" "$DIR/certs/key.pem"
"$SUP" push -p "$DIR/cert.pem" "$DIR/certs/cert.pem"
pushed=$(date +%s.%N)
"$SUP" add --combine admission-webhook "$HERE/layer.yaml" >/dev/null

echo "==> 5. an AdmissionReview for a notebook pod"
for _ in $(seq 200); do
    if answer=$(curl -sf --max-time 2 --cacert "$DIR/cert.pem" -H 'Content-Type: application/json' \
        --data @"$HERE/review.json" "https://localhost:$PORT/apply-poddefault"); then
        break
    fi
    answer=""
    sleep 0.05
done
[ -n "$answer" ] || { echo "replay: no answer within 10 s of the push" >&2; exit 1; }
answered=$(date +%s.%N)
python3 - "$answer" "$pushed" "$answered" <<'PY'
import base64, json, sys
answer, pushed, answered = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
response = answer["response"]
print(f"    answered {answered - pushed:.2f}s after the push: allowed={response['allowed']}, uid={response['uid']}")
for op in json.loads(base64.b64decode(response.get("patch", "") or "W10=")):
    print(f"    {op['op']} {op['path']}")
PY

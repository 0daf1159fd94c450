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
# It fails at once when something already holds port 4443, and prints the webhook's own
# words when no answer comes within ANSWER_WITHIN seconds (10) of the push.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=/tmp/founding   # the layer's paths point here
PUSH_AFTER=${PUSH_AFTER:-5}
ANSWER_WITHIN=${ANSWER_WITHIN:-10}
PORT=4443           # the webhook's default -webhookPort, and the layer's check

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }

# What is on $PORT, by a real request: empty when the connection is refused (nothing
# listens), else curl's error or the answer's status. A listener that accepts and never
# answers times out, and so counts as taken.
probe() {
    local out code=0
    out=$(curl -sS -k --max-time 2 -o /dev/null -w '\n%{http_code}' "https://localhost:$PORT/healthz" 2>&1) || code=$?
    case $code in
        0) echo "it answers HTTP ${out##*$'\n'}" ;;
        7) ;;
        *) echo "${out%$'\n'*}" ;;
    esac
}
taken() {
    echo "replay: port $PORT is taken ($1)" >&2
    if command -v ss >/dev/null; then ss -Hltnp "sport = :$PORT" | sed 's/^/    /' >&2 || true; fi
    exit 1
}

SUP=${SUPERVISOR:-cobble}
for bin in admission-webhook $([ "$SUP" = cobble ] && echo cobble); do
    if ! command -v "$bin" >/dev/null; then
        for dir in "$REPO/target/release" "$REPO/target/debug"; do
            if [ -x "$dir/$bin" ]; then export PATH="$dir:$PATH"; break; fi
        done
    fi
    command -v "$bin" >/dev/null || { echo "replay: build $bin first (cargo build --release --bin $bin)" >&2; exit 2; }
done

busy=$(probe)
[ -z "$busy" ] || taken "$busy"

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
if ! [ -S "$PEBBLE/.pebble.socket" ] || ! "$SUP" services >/dev/null 2>&1; then
    echo "replay: the daemon did not come up within 10 s; its log:" >&2
    sed 's/^/    /' "$DIR/cobble.log" >&2
    exit 1
fi

echo "==> 2. config-changed: add the charm's layer and replan, before the certificates exist"
"$SUP" add admission-webhook "$HERE/layer.yaml"
"$SUP" replan
"$SUP" services

echo "==> 3. later hooks re-add the identical layer for ${PUSH_AFTER}s, never replanning"
end=$((SECONDS + ${PUSH_AFTER%.*}))
while [ "$SECONDS" -lt "$end" ]; do "$SUP" add --combine admission-webhook "$HERE/layer.yaml" >/dev/null; sleep 1; done
busy=$(probe)
[ -z "$busy" ] || taken "$busy; the webhook must not listen before its certificates exist"
echo "    nothing listens on $PORT yet; the webhook says:"
(grep -m1 "waiting for a valid certificate" "$DIR/cobble.log" || true) | sed 's/^/    /'

echo "==> 4. pebble-ready: push the certificates"
"$SUP" push -p "$DIR/key.pem" "$DIR/certs/key.pem"
"$SUP" push -p "$DIR/cert.pem" "$DIR/certs/cert.pem"
pushed=$(date +%s.%N)
"$SUP" add --combine admission-webhook "$HERE/layer.yaml" >/dev/null

echo "==> 5. an AdmissionReview for a notebook pod"
deadline=$(( $(now_ms) + ANSWER_WITHIN * 1000 ))
answer="" error=""
while left=$(( deadline - $(now_ms) )); [ "$left" -gt 0 ]; do
    # Each try gets at most 2 s, and never more than what is left of the deadline.
    [ "$left" -le 2000 ] || left=2000
    if answer=$(curl -sS -f --max-time "$((left / 1000)).$(printf %03d $((left % 1000)))" \
        --cacert "$DIR/cert.pem" -H 'Content-Type: application/json' \
        --data @"$HERE/review.json" "https://localhost:$PORT/apply-poddefault" 2>"$DIR/curl.err"); then
        break
    fi
    answer="" error=$(tail -n1 "$DIR/curl.err")
    sleep 0.05
done
if [ -z "$answer" ]; then
    echo "replay: no answer within $ANSWER_WITHIN s of the push (last try: ${error:-none})" >&2
    echo "replay: the webhook's service, and its last words in $DIR/cobble.log:" >&2
    "$SUP" services admission-webhook 2>&1 | sed 's/^/    /' >&2 || true
    grep -E '\[admission-webhook\]|Service "admission-webhook"' "$DIR/cobble.log" | tail -n 10 \
        | sed 's/^/    /' >&2 || true
    exit 1
fi
answered=$(date +%s.%N)
python3 - "$answer" "$pushed" "$answered" <<'PY'
import base64, json, sys
answer, pushed, answered = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
response = answer["response"]
print(f"    answered {answered - pushed:.2f}s after the push: allowed={response['allowed']}, uid={response['uid']}")
for op in json.loads(base64.b64decode(response.get("patch", "") or "W10=")):
    print(f"    {op['op']} {op['path']}")
PY

#!/usr/bin/env bash
# The image test: cobble's static binary as the entrypoint of an image that holds nothing
# else, run as a container runtime would run it, without a container engine.
#
#   tests/image/run.sh STATIC_COBBLE
#
# The root file system is laid out the way an image build (Dockerfile, rockcraft.yaml) lays
# it out: the binary as /usr/bin/pebble and /usr/bin/cobble, a layer in
# /var/lib/pebble/default/layers/, and the test's own workload (one static program, since
# the image has no shell). It has no libc, no /etc/passwd, no /etc at all. As a runtime
# does, the test creates the mount points /proc and /dev and mounts proc and the device
# nodes a runtime provides (null, zero, random, urandom) on them. Each container is a new PID namespace, with a new mount namespace and, where the
# kernel allows it, a new user namespace (root mapped to the caller), entered with chroot.
#
# What it checks:
#   1. `pebble enter exec` as rockcraft's entrypoint (`/usr/bin/pebble enter`) runs it:
#      the command's output and exit status come back, and the daemon stops.
#   2. `pebble run` as PID 1: the services start; an orphan a service leaves behind is
#      re-parented to PID 1 and reaped when it exits (no zombie);
#   3. `exec` and `services` into the running container through its socket; a service or
#      exec as a user the image does not know is refused with an error naming the user, and
#      a check on a host name nothing resolves fails as a check, the daemon unharmed;
#   4. SIGTERM to PID 1 stops everything, the service that ignores SIGTERM by SIGKILL
#      once its kill-delay is up, and PID 1 exits within kill-delay plus a margin.
#
# Skips (exit 0, with the reason) only where unshare is refused.
set -euo pipefail

STATIC=${1:?usage: tests/image/run.sh STATIC_COBBLE}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ldd "$STATIC" 2>&1 | grep -q "=>"; then
    echo "image test: $STATIC is a dynamic executable; build it with scripts/build-static" >&2
    exit 1
fi

SCRATCH=$(mktemp -d /tmp/cobble-image.XXXXXX)
pids=()
pid1=""
cleanup() {
    # PID 1 of a container first: killing it ends everything in its namespace.
    [ -n "$pid1" ] && kill -KILL "$pid1" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

fail() { echo "image test: FAIL: $*" >&2; [ -f "$SCRATCH/pid1.log" ] && sed 's/^/    | /' "$SCRATCH/pid1.log" >&2; exit 1; }

# Namespaces: a user namespace where allowed (rootless CI), else without one if we are root.
CHROOT=$(command -v chroot) || { echo "image test: no chroot on PATH" >&2; exit 1; }
export CHROOT
ns_flags=""
for flags in "--user --map-root-user --mount --pid --fork" "--mount --pid --fork"; do
    if unshare $flags true 2>/dev/null; then ns_flags=$flags; break; fi
done
if [ -z "$ns_flags" ]; then
    reason=$(unshare --user --map-root-user --mount --pid --fork true 2>&1 || true)
    echo "image test: SKIPPED: unshare refused new mount and PID namespaces: ${reason:-no reason given}"
    exit 0
fi
echo "image test: namespaces: unshare $ns_flags"

# The root file system, as an image build leaves it.
ROOT="$SCRATCH/rootfs"
mkdir -p "$ROOT/usr/bin" "$ROOT/var/lib/pebble/default/layers"
cp "$STATIC" "$ROOT/usr/bin/pebble"
cp "$STATIC" "$ROOT/usr/bin/cobble"
cc -static -O2 -o "$ROOT/usr/bin/workload" "$HERE/workload.c"
cp "$HERE/layer.yaml" "$ROOT/var/lib/pebble/default/layers/001-image.yaml"
SOCKET="$ROOT/var/lib/pebble/default/.pebble.socket"

# What the runtime adds at run time: mount points, proc and devices, and the environment a
# runtime gives an image that sets none (PATH, and HOME=/ for a user /etc/passwd does not
# name). Then chroot into the image and exec its entrypoint, so that the entrypoint is PID 1
# of the namespace.
# Called in a subshell (`$(...)`, `(...)` or `&`), which it replaces with unshare.
container() {
    exec unshare $ns_flags --mount-proc="$ROOT/proc" /bin/sh -c '
        root=$1; shift
        for dev in null zero random urandom; do
            touch "$root/dev/$dev" && mount --bind "/dev/$dev" "$root/dev/$dev" || exit 125
        done
        exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/ \
            "$CHROOT" "$root" "$@"' container "$ROOT" "$@"
}
mkdir -p "$ROOT/proc" "$ROOT/dev"

echo "==> the image holds nothing else"
listing=$(cd "$ROOT" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$listing" = "./dev ./proc ./usr ./usr/bin ./usr/bin/cobble ./usr/bin/pebble ./usr/bin/workload ./var ./var/lib ./var/lib/pebble ./var/lib/pebble/default ./var/lib/pebble/default/layers ./var/lib/pebble/default/layers/001-image.yaml " ] \
    || fail "unexpected root file system: $listing"

echo "==> 1. enter exec, as rockcraft's entrypoint runs it"
out=$(container /usr/bin/pebble enter exec /usr/bin/workload echo hello from the image 2>"$SCRATCH/enter.log") \
    || fail "enter exec failed: $(cat "$SCRATCH/enter.log")"
[ "$out" = "hello from the image" ] || fail "enter exec printed: $out"
set +e
(container /usr/bin/pebble enter exec /usr/bin/workload exit 3 2>>"$SCRATCH/enter.log")
status=$?
set -e
[ "$status" = 3 ] || fail "enter exec gave status $status, not the command's 3"
out=$(container /usr/bin/pebble enter exec /usr/bin/workload ls / 2>>"$SCRATCH/enter.log")
[ "$(echo $out)" = "dev proc usr var" ] || fail "the command did not run in the image: / holds $out"
echo "    ok: output, exit status 3, and / is the image's"

echo "==> 2. pebble run as PID 1"
rm -f "$ROOT/var/lib/pebble/default/.pebble.state"*
container /usr/bin/pebble run --verbose > "$SCRATCH/pid1.log" 2>&1 &
runner=$!
pids+=("$runner")
for _ in $(seq 200); do [ -S "$SOCKET" ] && break; sleep 0.05; done
[ -S "$SOCKET" ] || fail "no socket at $SOCKET"
# The daemon's pid on the host: the process whose root is the image and which is pid 1 of
# its namespace (unshare forked it; it exec'd through sh, env and chroot into the entrypoint).
for proc in /proc/[0-9]*; do
    [ "$(readlink "$proc/root" 2>/dev/null)" = "$ROOT" ] || continue
    [ "$(awk '/^NSpid:/ {print $NF}' "$proc/status" 2>/dev/null)" = 1 ] || continue
    pid1=${proc#/proc/}
done
[ -n "$pid1" ] || fail "cannot find the container's PID 1 (unshare is $runner)"
[ "$(cat "/proc/$pid1/comm")" = pebble ] || fail "PID 1 is $(cat "/proc/$pid1/comm"), not pebble"
echo "    ok: the daemon is PID 1 of its namespace (host pid $pid1)"

export PEBBLE_SOCKET="$SOCKET"
wait_log() {
    for _ in $(seq 200); do grep -q "$1" "$SCRATCH/pid1.log" && return 0; sleep 0.05; done
    fail "no line with '$1' in the daemon's log"
}
wait_log "orphan [0-9]* has parent 1"
orphan=$(grep -o "orphan [0-9]* has parent 1" "$SCRATCH/pid1.log" | head -1 | awk '{print $2}')
echo "    ok: the orphan (pid $orphan in the container) was re-parented to PID 1"
# The orphan exits two seconds after that line; PID 1 must reap it: no zombie child of PID 1.
zombies=1
for _ in $(seq 100); do
    zombies=0
    for child in $(pgrep -P "$pid1" || true); do
        state=$(awk '/^State:/ {print $2}' "/proc/$child/status" 2>/dev/null || echo gone)
        nschild=$(awk '/^NSpid:/ {print $NF}' "/proc/$child/status" 2>/dev/null || echo 0)
        if [ "$nschild" = "$orphan" ] || [ "$state" = Z ]; then zombies=$((zombies + 1)); fi
    done
    [ "$zombies" = 0 ] && break
    sleep 0.05
done
[ "$zombies" = 0 ] || fail "the orphan is still a child (or a zombie) of PID 1"
echo "    ok: the orphan exited and was reaped"

echo "==> 3. exec and services through the socket"
out=$("$STATIC" exec -- /usr/bin/workload echo exec inside) || fail "exec through the socket failed"
[ "$out" = "exec inside" ] || fail "exec printed: $out"
out=$("$STATIC" exec -- /usr/bin/workload ls /)
[ "$(echo $out)" = "dev proc usr var" ] || fail "exec did not run in the image: / holds $out"
services=$("$STATIC" services)
echo "$services" | grep -q '^orphans  *enabled  *active' || fail "services: $services"
echo "$services" | grep -q '^stubborn  *enabled  *active' || fail "services: $services"
echo "    ok: exec ran in the image; services are active"

echo "==> 3b. users and host names with no /etc at all"
printf 'services:\n  as-alice:\n    override: replace\n    command: /usr/bin/workload sleep\n    user: alice\n' \
    > "$SCRATCH/alice.yaml"
"$STATIC" add alice "$SCRATCH/alice.yaml" > "$SCRATCH/alice.log" 2>&1 || true
"$STATIC" start as-alice >> "$SCRATCH/alice.log" 2>&1 && fail "a service as alice started with no /etc/passwd"
grep -q 'unknown user alice' "$SCRATCH/alice.log" || fail "starting as alice said: $(cat "$SCRATCH/alice.log")"
"$STATIC" exec --user alice -- /usr/bin/workload echo x > "$SCRATCH/alice.log" 2>&1 \
    && fail "exec as alice ran with no /etc/passwd"
grep -q 'alice' "$SCRATCH/alice.log" || fail "exec as alice said: $(cat "$SCRATCH/alice.log")"
for _ in $(seq 100); do
    "$STATIC" checks | grep -q '^resolve .* down' && break
    sleep 0.1
done
"$STATIC" checks | grep -q '^resolve .* down' || fail "the localhost check: $("$STATIC" checks)"
"$STATIC" services | grep -q '^orphans  *enabled  *active' || fail "the daemon is not serving"
echo "    ok: an unknown user is refused by name; a name that cannot resolve fails its check"

echo "==> 4. SIGTERM to PID 1"
# The stubborn service ignores SIGTERM; its kill-delay (layer.yaml) is 2s.
kill_delay=2
start=$(date +%s.%N)
kill -TERM "$pid1"
set +e
wait "$runner"
status=$?
set -e
end=$(date +%s.%N)
took=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }')
echo "    PID 1 exited $took s after SIGTERM"
awk -v t="$took" -v d="$kill_delay" 'BEGIN { exit !(t >= d - 0.2 && t < d + 5) }' \
    || fail "PID 1 took $took s; expected kill-delay ($kill_delay s) plus a margin"
[ "$status" = 0 ] || fail "PID 1 exited with status $status after SIGTERM"
for line in 'Stopping all running services.' 'Service "orphans" stopped' 'Service "stubborn" stopped'; do
    grep -qF "$line" "$SCRATCH/pid1.log" || fail "no '$line' in the daemon's log"
done
[ ! -S "$SOCKET" ] || fail "the socket is still there after PID 1 exited"
echo "    ok: everything stopped within kill-delay"

echo "image test: PASS"

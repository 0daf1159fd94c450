#!/usr/bin/env bash
# The image test under runc: the root file system of tests/image/run.sh, with a static
# busybox beside it, run as an OCI bundle by runc, the runtime Kubernetes uses, started as
# containerd starts a pod's container.
#
#   tests/image/runc.sh STATIC_COBBLE
#
# As containerd's shim does, a subreaper runs `runc create` (no terminal, standard input
# from /dev/null, output to a log), then `runc start`, and waits for the container's first
# process to exit. The bundle's configuration is a pod's: containerd's default capabilities,
# new PID, mount, IPC and UTS namespaces, /proc, /dev, /sys and cgroups mounted by runc, and
# /etc/hosts, /etc/hostname and /etc/resolv.conf mounted as the kubelet mounts them. It
# shares the host's network namespace (a pod with hostNetwork), so that this script probes
# the daemon's `--http` address as the kubelet does, over loopback. The image has no
# /etc/passwd and no certificates.
#
# For each entrypoint, `pebble run --http ADDR --https ADDR` and rockcraft's `pebble enter
# --verbose --http ADDR --https ADDR`, it checks:
#   1. the daemon is the container's PID 1 and its services start;
#   2. an http and a tcp check on a service's port go up (the http check needs no
#      certificates), and an https check on the daemon's own --https fails alone, in Go's
#      words (its certificate names no host, and Go checks the name before the authority);
#   3. `runc exec` of `pebble services` and of `pebble exec` works, and the exec's user,
#      whom no /etc/passwd names, is noted in Pebble's words;
#   4. the liveness probe, GET /v1/health?level=alive as the kubelet sends it, answers 200,
#      then 502 once the service behind the alive check is stopped, then 200 again once it
#      is started;
#   5. `cobble reexec`: a binary that is missing, one that exits at once and an older build
#      that cannot read the handover are refused with the reason and change nothing; the
#      daemon's own binary takes over in place (run again as it was started, `enter`
#      included), PID 1 stays PID 1, every service keeps its process, and the probe still
#      answers;
#   6. `runc kill` SIGTERM stops everything, the service that ignores SIGTERM by SIGKILL
#      once its kill-delay is up, and PID 1 exits 0 within kill-delay plus a margin; no
#      process of the container is left.
#
# Needs root. Installs Debian's runc (and busybox-static) with apt-get when they are missing.
# Skips (exit 0, with the reason) only where runc cannot create a container at all.
set -euo pipefail

STATIC=${1:?usage: tests/image/runc.sh STATIC_COBBLE}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ldd "$STATIC" 2>&1 | grep -q "=>"; then
    echo "runc image test: $STATIC is a dynamic executable; build it with scripts/build-static" >&2
    exit 1
fi
skip() { echo "runc image test: SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "runc creates containers as root and this is uid $(id -u)"

# Debian's runc and a static busybox, installed when missing.
is_static() { [ -x "$1" ] && ! ldd "$1" 2>&1 | grep -q "=>"; }
BUSYBOX=/bin/busybox
missing=()
command -v runc >/dev/null || missing+=(runc)
is_static "$BUSYBOX" || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || skip "no ${missing[*]} and no apt-get to install them"
    echo "runc image test: installing ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=600 install -y "${missing[@]}" >/dev/null 2>&1 || {
        apt-get -o DPkg::Lock::Timeout=600 update >/dev/null 2>&1
        apt-get -o DPkg::Lock::Timeout=600 install -y "${missing[@]}" >/dev/null
    }
fi
RUNC=$(command -v runc)
is_static "$BUSYBOX" || { echo "runc image test: $BUSYBOX is not a static executable" >&2; exit 1; }
echo "runc image test: $("$RUNC" --version | head -1)"

SCRATCH=$(mktemp -d /tmp/cobble-runc.XXXXXX)
STATE="$SCRATCH/runc"
containers=()
cleanup() {
    for id in "${containers[@]}"; do
        "$RUNC" --root "$STATE" kill "$id" KILL >/dev/null 2>&1 || true
        "$RUNC" --root "$STATE" delete --force "$id" >/dev/null 2>&1 || true
    done
    wait 2>/dev/null || true
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
LOG=""
fail() {
    echo "runc image test: FAIL: $*" >&2
    [ -n "$LOG" ] && [ -f "$LOG" ] && sed 's/^/    | /' "$LOG" >&2
    exit 1
}

# Three free loopback ports: the service's, and the daemon's --http and --https.
read -r WEB_PORT HTTP_PORT HTTPS_PORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

# The root file system, as an image build leaves it (see run.sh), and busybox.
ROOT="$SCRATCH/bundle/rootfs"
mkdir -p "$ROOT/usr/bin" "$ROOT/bin" "$ROOT/var/lib/pebble/default/layers"
cp "$STATIC" "$ROOT/usr/bin/pebble"
cp "$STATIC" "$ROOT/usr/bin/cobble"
cp "$BUSYBOX" "$ROOT/bin/busybox"
cc -static -O2 -o "$ROOT/usr/bin/workload" "$HERE/workload.c"
cp "$HERE/layer.yaml" "$ROOT/var/lib/pebble/default/layers/001-image.yaml"
cat > "$ROOT/var/lib/pebble/default/layers/002-probes.yaml" <<EOF
summary: |
  a service with an http and a tcp check, the http one for the liveness probe; and an
  https check on the daemon's own --https, whose certificate names no host
services:
  web:
    override: replace
    command: /usr/bin/workload http $WEB_PORT
    startup: enabled
checks:
  web-alive:
    override: replace
    level: alive
    period: 200ms
    timeout: 5s
    threshold: 1
    http:
      url: http://127.0.0.1:$WEB_PORT/
  web-port:
    override: replace
    level: ready
    period: 200ms
    timeout: 5s
    threshold: 1
    tcp:
      host: 127.0.0.1
      port: $WEB_PORT
  secure:
    override: replace
    level: ready
    period: 200ms
    timeout: 5s
    threshold: 1
    http:
      url: https://127.0.0.1:$HTTPS_PORT/v1/health
EOF
SOCKET="$ROOT/var/lib/pebble/default/.pebble.socket"

# What the kubelet mounts into every container of a pod.
KUBELET="$SCRATCH/kubelet"
mkdir -p "$KUBELET"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$KUBELET/hosts"
echo pod > "$KUBELET/hostname"
echo "options ndots:5" > "$KUBELET/resolv.conf"

# The bundle's configuration: runc's own template, made a pod's container.
"$RUNC" spec --bundle "$SCRATCH/bundle"
bundle_config() {
    python3 - "$SCRATCH/bundle/config.json" "$KUBELET" "$@" <<'EOF'
import json, sys
path, kubelet, args = sys.argv[1], sys.argv[2], sys.argv[3:]
c = json.load(open(path))
c["root"] = {"path": "rootfs", "readonly": False}
c["hostname"] = "pod"
p = c["process"]
p["terminal"] = False
p["args"] = args
p["cwd"] = "/"
p["env"] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOSTNAME=pod",
    "KUBERNETES_SERVICE_HOST=10.96.0.1",
    "KUBERNETES_SERVICE_PORT=443",
]
p.pop("rlimits", None)
caps = ["CAP_" + n for n in (
    "CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP "
    "NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE").split()]
p["capabilities"] = {k: caps for k in ("bounding", "effective", "permitted")}
p["noNewPrivileges"] = False
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
for name in ("hosts", "hostname", "resolv.conf"):
    c["mounts"].append({"destination": "/etc/" + name, "type": "bind",
                        "source": kubelet + "/" + name, "options": ["rbind", "rprivate", "rw"]})
json.dump(c, open(path, "w"), indent=1)
EOF
}

# Starts container $1 with the bundle as it is, as containerd's shim does; the shim writes
# the first process's exit status (128+N for signal N) to $SCRATCH/$1.status and exits.
start_container() {
    local id=$1
    containers+=("$id")
    rm -f "$SCRATCH/$id.status"
    python3 - "$RUNC" "$STATE" "$SCRATCH/bundle" "$id" "$SCRATCH/$id.log" \
        "$SCRATCH/$id.status" <<'EOF' &
import ctypes, os, subprocess, sys
runc, state, bundle, cid, log, status_file = sys.argv[1:]
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("shim: cannot become a subreaper")
pidfile = os.path.join(os.path.dirname(log), cid + ".pid")
with open(log, "ab") as out, open(os.devnull, "rb") as null:
    subprocess.run([runc, "--root", state, "create", "--bundle", bundle,
                    "--pid-file", pidfile, cid], stdin=null, stdout=out, stderr=out,
                   check=True)
init = int(open(pidfile).read())
subprocess.run([runc, "--root", state, "start", cid], check=True)
while True:
    pid, status = os.waitpid(-1, 0)
    if pid == init:
        break
code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
with open(status_file + ".tmp", "w") as f:
    f.write(f"{code}\n")
os.rename(status_file + ".tmp", status_file)
EOF
    SHIM=$!
}

# Can runc create a container here at all? A busybox that prints its PID.
bundle_config /bin/busybox sh -c 'echo pid $$'
probe=probe-$$
start_container "$probe"
for _ in $(seq 100); do kill -0 "$SHIM" 2>/dev/null || break; sleep 0.1; done
if [ "$(cat "$SCRATCH/$probe.status" 2>/dev/null)" != 0 ] || ! grep -qx "pid 1" "$SCRATCH/$probe.log"; then
    skip "runc cannot create a container here: $(tr '\n' ' ' < "$SCRATCH/$probe.log")"
fi
"$RUNC" --root "$STATE" delete "$probe"
echo "runc image test: runc creates containers; the service on port $WEB_PORT, --http on $HTTP_PORT"

in_container() { "$RUNC" --root "$STATE" exec "$ID" "$@"; }
wait_until() { # what, condition...: polls the condition for up to 20 s
    local what=$1 deadline=$((SECONDS + 20)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting until $what"
        sleep 0.05
    done
}
has_log() { grep -qF -- "$1" "$LOG"; }
# The liveness probe as the kubelet sends it: its user agent, Accept, a one-second timeout.
probe_status() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
        -H 'User-Agent: kube-probe/1.31' -H 'Accept: */*' \
        "http://127.0.0.1:$HTTP_PORT/v1/health?level=alive" || true
}
probe_is() { [ "$(probe_status)" = "$1" ]; }
check_is() { in_container /usr/bin/pebble checks 2>/dev/null | grep -q "^$1 .* $2 "; }
# A check that is up and has succeeded (a check is up before its first run).
check_succeeds() {
    in_container /usr/bin/pebble checks 2>/dev/null \
        | awk -v n="$1" '$1 == n && $4 == "up" && $5 > 0 { found = 1 } END { exit !found }'
}

scenario() { # name, entrypoint...
    local name=$1; shift
    ID="cobble-$name-$$"
    LOG="$SCRATCH/$ID.log"
    echo "==> $name: $*"
    rm -f "$ROOT/var/lib/pebble/default/.pebble.state"*
    bundle_config "$@"
    start_container "$ID"
    wait_until "the daemon's socket is there" test -S "$SOCKET"

    # 1. PID 1 and services.
    local init
    init=$(cat "$SCRATCH/$ID.pid")
    [ "$(awk '/^NSpid:/ {print $NF}' "/proc/$init/status")" = 1 ] || fail "host pid $init is not PID 1 of the container"
    [ "$(cat "/proc/$init/comm")" = pebble ] || fail "PID 1 is $(cat "/proc/$init/comm"), not pebble"
    local pidns
    pidns=$(readlink "/proc/$init/ns/pid")
    services_active() {
        local out
        out=$(in_container /usr/bin/pebble services 2>&1) || return 1
        for svc in orphans stubborn web; do
            echo "$out" | grep -q "^$svc  *enabled  *active" || return 1
        done
    }
    wait_until "orphans, stubborn and web are active (runc exec pebble services)" services_active
    echo "    ok: pebble is PID 1 (host pid $init); runc exec pebble services: all active"

    # 2. The http and tcp checks.
    wait_until "web-alive (http) succeeds" check_succeeds web-alive
    wait_until "web-port (tcp) succeeds" check_succeeds web-port
    ! has_log "cannot build client" || fail "an http check could not build its client"
    wait_until "secure (https) is down" check_is secure down
    # Any failure of it: the first run may come before the --https listener is up.
    wait_until "a failure of secure in Go's words in the log" grep -q "Check \"secure\" failure [0-9]*/1: Get \"https://127.0.0.1:$HTTPS_PORT/v1/health\": tls: failed to verify certificate: x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs" "$LOG"
    wait_until "web-alive (http) succeeds with secure down" check_succeeds web-alive
    echo "    ok: the http and tcp checks are up with no certificates in the image; the https check alone is down, in Go's words"

    # 3. runc exec of pebble exec, as root, whom no /etc/passwd names.
    local out
    out=$(in_container /usr/bin/pebble exec -- /usr/bin/workload echo exec inside) \
        || fail "runc exec pebble exec failed"
    [ "$out" = "exec inside" ] || fail "pebble exec printed: $out"
    out=$(in_container /usr/bin/pebble exec -- /bin/busybox cat /etc/hostname)
    [ "$out" = pod ] || fail "pebble exec did not run in the container: /etc/hostname is $out"
    wait_until "the unknown user is noted in Pebble's words" \
        has_log "Cannot look up user 0: open /etc/passwd: no such file or directory"
    echo "    ok: runc exec pebble exec ran in the container; the unknown user 0 was noted as Pebble notes it"

    # 4. The liveness probe follows the http check.
    wait_until "the probe answers 200" probe_is 200
    in_container /usr/bin/pebble stop web >/dev/null || fail "pebble stop web failed"
    wait_until "the probe answers 502 with web stopped" probe_is 502
    check_is web-alive down || fail "web-alive is not down: $(in_container /usr/bin/pebble checks)"
    has_log "Check \"web-alive\" failure 1/1: Get \"http://127.0.0.1:$WEB_PORT/\": dial tcp 127.0.0.1:$WEB_PORT: connect: connection refused" \
        || fail "no failure of web-alive in Go's words in the log"
    in_container /usr/bin/pebble start web >/dev/null || fail "pebble start web failed"
    wait_until "the probe answers 200 again" probe_is 200
    echo "    ok: /v1/health?level=alive answered 200, then 502 with web stopped, then 200"

    # 5. Re-execution in place.
    children() { cat /proc/"$init"/task/*/children | tr ' ' '\n' | grep . | sort -n | tr '\n' ' '; }
    printf '#!/bin/busybox sh\nexit 0\n' > "$ROOT/usr/bin/exits"
    printf '#!/bin/busybox sh\necho '"'"'{"cobble-version":"0.0.1","handover-formats":[1]}'"'"'\n' \
        > "$ROOT/usr/bin/older"
    chmod 755 "$ROOT/usr/bin/exits" "$ROOT/usr/bin/older"
    local before
    before=$(children)
    for bad in "missing:no such file or directory" "exits:it did not answer as cobble does" \
        "older:reads handover formats [1]"; do
        out=$(in_container /usr/bin/cobble reexec --binary "/usr/bin/${bad%%:*}" 2>&1) \
            && fail "reexec into ${bad%%:*} succeeded: $out"
        echo "$out" | tr '\n' ' ' | tr -s ' ' | grep -qF -- "${bad#*:}" || fail "reexec into ${bad%%:*} said: $out"
        [ "$(children)" = "$before" ] || fail "reexec into ${bad%%:*} changed the services: $before -> $(children)"
    done
    out=$(in_container /usr/bin/cobble reexec 2>&1) || fail "reexec failed: $out"
    echo "$out" | grep -q "^Re-executed daemon (pid 1) as /usr/bin/pebble: cobble " \
        || fail "reexec said: $out"
    [ "$(children)" = "$before" ] || fail "the services' processes changed across reexec: $before -> $(children)"
    [ "$(awk '/^NSpid:/ {print $NF}' "/proc/$init/status")" = 1 ] || fail "PID 1 is gone after reexec"
    wait_until "orphans, stubborn and web are active after reexec" services_active
    wait_until "the probe answers 200 after reexec" probe_is 200
    has_log "Re-executed daemon: cobble" || fail "the new program did not log its take-over"
    echo "    ok: bad binaries refused with the reason, nothing changed; reexec in place kept PID 1 and the services' processes ($before)"

    # 6. runc kill SIGTERM.
    local kill_delay=2 start end took status
    start=$(date +%s.%N)
    "$RUNC" --root "$STATE" kill "$ID" TERM
    for _ in $(seq 300); do kill -0 "$SHIM" 2>/dev/null || break; sleep 0.05; done
    end=$(date +%s.%N)
    [ -f "$SCRATCH/$ID.status" ] || fail "PID 1 did not exit within 15 s of SIGTERM"
    wait "$SHIM" || true
    status=$(cat "$SCRATCH/$ID.status")
    took=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }')
    echo "    PID 1 exited with status $status $took s after SIGTERM"
    [ "$status" = 0 ] || fail "PID 1 exited with status $status after SIGTERM"
    awk -v t="$took" -v d="$kill_delay" 'BEGIN { exit !(t >= d - 0.2 && t < d + 5) }' \
        || fail "PID 1 took $took s; expected kill-delay ($kill_delay s) plus a margin"
    for line in 'Exiting on terminated signal.' 'Service "web" stopped' 'Service "stubborn" stopped'; do
        has_log "$line" || fail "no '$line' in the daemon's log"
    done
    for proc in /proc/[0-9]*; do
        if [ "$(readlink "$proc/ns/pid" 2>/dev/null)" = "$pidns" ]; then
            fail "a process of the container is left: ${proc#/proc/} $(tr '\0' ' ' < "$proc/cmdline")"
        fi
    done
    "$RUNC" --root "$STATE" delete "$ID" || fail "runc delete $ID failed"
    echo "    ok: everything stopped within kill-delay; exit status 0; nothing left"
}

listen=(--http "127.0.0.1:$HTTP_PORT" --https "127.0.0.1:$HTTPS_PORT")
scenario run /usr/bin/pebble run "${listen[@]}"
scenario enter /usr/bin/pebble enter --verbose "${listen[@]}"

echo "runc image test: PASS"

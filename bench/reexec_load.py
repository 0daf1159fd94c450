#!/usr/bin/env python3
"""`cobble reexec` under load: requests answered through the swaps, and what the services see.

    python3 bench/reexec_load.py [--cobble PATH] [--other PATH] [--reexecs N] [--rate R]
                                 [--lines N]

A fresh temporary $PEBBLE, `run --hold`, two services started: `counter` writes `n 1` to
`n N` (`--lines`, 10000), a line about every millisecond, then sleeps, with `persist-logs: true`
(more lines than its ring holds: `cobble logs` reads the older ones back from the file); `slowstop` ignores
SIGTERM and has a kill-delay of 2 s. A client thread sends `--rate` requests a second (200),
each on a new connection as ops makes them, `GET /v1/services` and `GET /v1/changes` in
turn, and times each from its connect to the end of its answer. Meanwhile `cobble reexec`
runs `--reexecs` times (20), 0.5 s apart, alternating between `--cobble` and `--other` (a
second build; by default `--cobble` again), and before the first the stop of `slowstop` is
sent, so the first swap meets a stop waiting out its kill-delay, which it hands over (the
stop is still in progress once it has answered) and a later program completes. Between swaps
the changes and notices (but the stop's) are compared with what they were before it.

Prints: requests sent, failed (refused, cut or not 200) and the latency p50 / p99 / max
(nearest-rank), the swaps' own times, whether the daemon's pid and `counter`'s pid stayed
the same, whether every numbered line is in `cobble logs` exactly once, whether the stop's
change was still in progress after the first swap and completed, and whether changes and
notices were the same after every swap. Exits 1 if any of those fails.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

LAYER = """services:
  counter:
    override: replace
    command: sh -c 'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "n $i"; sleep 0.001; done; exec sleep 100000'
    persist-logs: true
  slowstop:
    override: replace
    command: sh -c 'trap "" TERM; exec sleep 100000'
    kill-delay: 2s
"""


def request(sock_path: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a new connection; the status and the body."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(sock_path)
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        s.sendall(head.encode() + b"\r\n" + (body or b""))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    parts = status_line.split()
    if len(parts) < 2:
        raise ConnectionError(f"no answer: {data[:80]!r}")
    return int(parts[1]), rest.partition(b"\r\n\r\n")[2]


def cli(cobble: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([cobble, *args], env=env, capture_output=True, text=True, timeout=120)


def children(pid: int) -> list[int]:
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return sorted(out)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cobble", default=str(REPO / "target/debug/cobble"))
    parser.add_argument("--other", help="a second build to alternate with")
    parser.add_argument("--reexecs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--lines", type=int, default=10000)
    args = parser.parse_args()
    cobble = os.path.abspath(args.cobble)
    other = os.path.abspath(args.other) if args.other else cobble

    root = pathlib.Path(tempfile.mkdtemp(prefix="cobble-reexec-bench-"))
    daemon = None
    try:
        pebble = root / "pebble"
        (pebble / "layers").mkdir(parents=True)
        (pebble / "layers/001-bench.yaml").write_text(LAYER.format(lines=args.lines))
        env = dict(os.environ, PEBBLE=str(pebble))
        env.pop("PEBBLE_SOCKET", None)
        sock = str(pebble / ".pebble.socket")
        log = open(root / "daemon.log", "w")
        daemon = subprocess.Popen([cobble, "run", "--hold"], env=env, stdout=log, stderr=log)
        deadline = time.time() + 60
        while not os.path.exists(sock):
            if time.time() > deadline:
                raise SystemExit("the daemon did not start")
            time.sleep(0.02)
        for name in ("counter", "slowstop"):
            started = cli(cobble, env, "start", name)
            if started.returncode:
                raise SystemExit(started.stderr)
        counter_pids = None
        for _ in range(100):
            kids = children(daemon.pid)
            if len(kids) == 2:
                counter_pids = kids
                break
            time.sleep(0.02)

        latencies: list[float] = []
        failures: list[str] = []
        stop = threading.Event()

        def client() -> None:
            interval = 1.0 / args.rate
            next_at = time.monotonic()
            n = 0
            while not stop.is_set():
                path = "/v1/services" if n % 2 == 0 else "/v1/changes?select=all"
                n += 1
                begun = time.monotonic()
                try:
                    status, _ = request(sock, "GET", path)
                    if status != 200:
                        failures.append(f"{path}: {status}")
                except OSError as e:
                    failures.append(f"{path}: {e}")
                latencies.append(time.monotonic() - begun)
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

        thread = threading.Thread(target=client)
        thread.start()
        time.sleep(0.5)

        def state() -> tuple[str, str]:
            changes = json.loads(request(sock, "GET", "/v1/changes?select=all")[1])["result"]
            notices = json.loads(request(sock, "GET", "/v1/notices?users=all")[1])["result"]
            # The stop in progress at the first swap completes under a later program when its
            # kill-delay ends, whichever swap that falls in: its change and notice are left out.
            changes = sorted((c for c in changes if c["id"] != stop_change),
                             key=lambda c: int(c["id"]))
            notices = [n for n in notices
                       if not (n["type"] == "change-update" and n["key"] == stop_change)]
            return json.dumps(changes, sort_keys=True), json.dumps(notices, sort_keys=True)

        def stop_status() -> str:
            return json.loads(request(sock, "GET", f"/v1/changes/{stop_change}")[1])["result"]["status"]

        # The stop of `slowstop` waits out its kill-delay across the first swap.
        status, body = request(sock, "POST", "/v1/services",
                               json.dumps({"action": "stop", "services": ["slowstop"]}).encode())
        stop_change = json.loads(body)["change"]
        swaps = []
        stop_handed = False
        same_state = True
        for i in range(args.reexecs):
            before = state() if i > 0 else None
            binary = cobble if i % 2 else other
            begun = time.monotonic()
            done = cli(cobble, env, "reexec", "--binary", binary)
            swaps.append(time.monotonic() - begun)
            if done.returncode:
                failures.append(f"reexec {i}: {done.stderr.strip()}")
            if i == 0:
                # Answered without waiting out the kill-delay: the stop goes on.
                stop_handed = stop_status() == "Doing"
            if before is not None and state() != before:
                same_state = False
            time.sleep(0.5)
        stop.set()
        thread.join()

        deadline = time.time() + 30
        while stop_status() == "Doing" and time.time() < deadline:
            time.sleep(0.1)
        stop_done = stop_handed and stop_status() == "Done"
        kids = children(daemon.pid)
        counter_kept = counter_pids is not None and all(p in kids for p in counter_pids[:1])
        # Every numbered line once: wait for the last.
        deadline = time.time() + 120
        numbers: list[int] = []
        while time.time() < deadline:
            out = cli(cobble, env, "logs", "counter", "-n", "all").stdout
            numbers = [int(line.rsplit(" ", 1)[1]) for line in out.splitlines()
                       if line.rsplit(" ", 1)[-1].isdigit()]
            if numbers and numbers[-1] == args.lines:
                break
            time.sleep(0.2)
        lines_once = numbers == list(range(1, args.lines + 1))
        daemon_kept = daemon.poll() is None

        ms = [x * 1000 for x in latencies]
        print(f"requests: {len(latencies)} at {args.rate:g}/s, failed: {len(failures)}")
        for f in failures[:10]:
            print(f"  {f}")
        print(f"latency ms: p50 {percentile(ms, 0.5):.2f}, p99 {percentile(ms, 0.99):.2f}, "
              f"max {max(ms):.2f}")
        print(f"reexecs: {args.reexecs} ({'alternating with ' + other if other != cobble else 'same build'}), "
              f"each ms: median {percentile([s * 1000 for s in swaps], 0.5):.1f}, "
              f"max {max(swaps) * 1000:.1f}")
        print(f"daemon pid kept: {daemon_kept}; service pid kept: {counter_kept}")
        print(f"numbered lines 1..{args.lines} each once in cobble logs: {lines_once} "
              f"({len(numbers)} lines, {len(set(numbers))} distinct)")
        print(f"the stop in progress at the first swap handed over and completed: {stop_done}")
        print(f"changes and notices the same after every swap: {same_state}")
        ok = not failures and daemon_kept and counter_kept and lines_once and stop_done and same_state
        return 0 if ok else 1
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

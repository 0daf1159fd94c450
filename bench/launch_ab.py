#!/usr/bin/env python3
"""Launch times of two cobble builds, interleaved so that both see the same load.

    python3 bench/launch_ab.py BUILD_A BUILD_B [ROUNDS]

For each round and each build, in turn: `run --hold` on a fresh temporary $PEBBLE, timed from
just before the spawn until a unix-socket connect to .pebble.socket succeeds (retried every
0.2 ms), then SIGTERM and wait; and `version --client`, timed from the spawn to its exit.
Prints the median, p10 and p90 of each series. Launch time depends on the machine's load;
interleaving makes the comparison fair, not the figures quiet.
"""
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def daemon_launch(binary):
    pebble = tempfile.mkdtemp(prefix="cobble-launch-")
    sock = os.path.join(pebble, ".pebble.socket")
    env = dict(os.environ, PEBBLE=pebble)
    start = time.perf_counter()
    proc = subprocess.Popen([binary, "run", "--hold"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock)
                return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{binary} exited with {proc.returncode}")
                if time.perf_counter() - start > 10:
                    raise RuntimeError(f"{binary} did not listen within 10 s")
                time.sleep(0.0002)
            finally:
                s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        shutil.rmtree(pebble, ignore_errors=True)


def client_launch(binary):
    start = time.perf_counter()
    subprocess.run([binary, "version", "--client"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def summary(samples):
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return (f"median {statistics.median(ordered) * 1000:.3f} ms, "
            f"p10 {pick(0.1) * 1000:.3f} ms, p90 {pick(0.9) * 1000:.3f} ms, n {len(ordered)}")


def main():
    builds = sys.argv[1:3]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    daemon = {b: [] for b in builds}
    client = {b: [] for b in builds}
    for _ in range(rounds):
        for b in builds:
            daemon[b].append(daemon_launch(b))
            client[b].append(client_launch(b))
    print(f"load average after: {os.getloadavg()}")
    for b in builds:
        print(f"{b}")
        print(f"  run --hold → socket accepts: {summary(daemon[b])}")
        print(f"  version --client → exit:     {summary(client[b])}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`GET /v1/services` with a large plan, through Python's http.client, as ops reads it.

    python3 bench/listing_py.py BINARY [SERVICES] [REQUESTS]

Starts `BINARY run --hold` on a fresh temporary $PEBBLE with SERVICES services (3000 by
default) in the plan, not started, then sends REQUESTS (2000) `GET /v1/services` one after
another, each on a new unix-socket connection with `http.client`, reading the whole body as
ops' client does. Prints the body size, the median and p99 latency, and the daemon's CPU time
per request (utime + stime from /proc, in clock ticks of 10 ms, across all the requests).
Works on any daemon that speaks Pebble's API on `$PEBBLE/.pebble.socket`.
"""
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    binary = sys.argv[1]
    services = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    requests = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    pebble = tempfile.mkdtemp(prefix="cobble-listing-")
    os.makedirs(os.path.join(pebble, "layers"))
    with open(os.path.join(pebble, "layers", "001-many.yaml"), "w") as f:
        f.write("services:\n")
        for i in range(services):
            f.write(f"  svc-{i:04}:\n    override: replace\n    command: sleep 100000\n")
    sock = os.path.join(pebble, ".pebble.socket")
    proc = subprocess.Popen([binary, "run", "--hold"], env=dict(os.environ, PEBBLE=pebble),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the daemon did not listen")
            time.sleep(0.01)

        def get():
            conn = UnixConnection(sock)
            conn.request("GET", "/v1/services")
            response = conn.getresponse()
            body = response.read()
            conn.close()
            if response.status != 200:
                raise RuntimeError(f"answered {response.status}")
            return body

        for _ in range(50):
            size = len(get())
        before = cpu_ticks(proc.pid)
        samples = []
        for _ in range(requests):
            start = time.perf_counter()
            get()
            samples.append(time.perf_counter() - start)
        ticks = cpu_ticks(proc.pid) - before
        samples.sort()
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        tick = 1 / os.sysconf("SC_CLK_TCK")
        print(f"services {services}, body {size} bytes, {requests} requests: "
              f"median {statistics.median(samples) * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms, "
              f"daemon CPU {ticks * tick / requests * 1000:.3f} ms/request")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(pebble, ignore_errors=True)


if __name__ == "__main__":
    main()

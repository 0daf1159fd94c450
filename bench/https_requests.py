#!/usr/bin/env python3
"""The cost of a request over `--https`: latency and the daemon's CPU, build against build.

    bench/https_requests.py [--requests 5000] [--rounds 2] BINARY [BINARY ...]

For each round, each BINARY in turn runs `run --hold --https 127.0.0.1:PORT` on a fresh
$PEBBLE; one keep-alive TLS 1.3 connection (Python's ssl, OpenSSL) with a throwaway client
certificate (the server requires one at the handshake, whoever it names) sends
`GET /v1/health` REQUESTS times. Prints the median and p99 latency and the daemon's CPU per
request (utime + stime from /proc, at the clock tick's resolution: ~0.002 ms over 5000
requests). Alternating the builds round by round is what makes the comparison fair on a
shared machine.
"""

import argparse
import http.client
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_cert(directory):
    """A self-signed client certificate and its key, made with openssl."""
    cert, key = os.path.join(directory, "client.crt"), os.path.join(directory, "client.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=bench",
         "-addext", "extendedKeyUsage=clientAuth"],
        check=True, capture_output=True,
    )
    return cert, key


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(binary, requests, cert, key):
    pebble = tempfile.mkdtemp(prefix="cobble-https-")
    os.makedirs(os.path.join(pebble, "layers"))
    port = free_port()
    daemon = subprocess.Popen(
        [binary, "run", "--hold", "--https", f"127.0.0.1:{port}"],
        env={**os.environ, "PEBBLE": pebble},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(cert, key)
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=context)
                conn.request("GET", "/v1/health")
                conn.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        latencies = []
        before = cpu_seconds(daemon.pid)
        for _ in range(requests):
            start = time.perf_counter()
            conn.request("GET", "/v1/health")
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - start)
            assert response.status == 200, response.status
        cpu = cpu_seconds(daemon.pid) - before
        latencies.sort()
        return (
            statistics.median(latencies) * 1e3,
            latencies[int(len(latencies) * 0.99)] * 1e3,
            cpu / requests * 1e3,
        )
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(pebble, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="cobble-https-cert-")
    try:
        cert, key = client_cert(scratch)
        print(f"load average before {os.getloadavg()}")
        for round_ in range(1, args.rounds + 1):
            for binary in args.binaries:
                median, p99, cpu = measure(binary, args.requests, cert, key)
                print(f"round {round_} {binary}: median {median:.3f} ms, p99 {p99:.3f} ms, "
                      f"daemon CPU per request {cpu:.4f} ms")
        print(f"load average after {os.getloadavg()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

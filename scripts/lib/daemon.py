"""A cobble daemon on a temporary $PEBBLE and HTTP requests to it over its unix socket, for
the Python scripts under scripts/ (mem-profile, gen-symbol-order).

Requests open a new connection each, as the Python `ops` client does. WARM_PATHS and
WARM_ROUNDS are the harness's (bench/src/main.rs): the requests a charm typically sends.
"""

import http.client
import os
import socket
import subprocess
import time

WARM_PATHS = [
    "/v1/system-info",
    "/v1/services",
    "/v1/services?names={service}",
    "/v1/plan?format=yaml",
    "/v1/checks",
    "/v1/health",
    "/v1/changes?select=all",
    "/v1/files?action=list&path={dir}",
]
WARM_ROUNDS = 50


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def sleepers_layer(count):
    """`count` services that sleep for a day, named svc-000..., as the harness's layer (with
    a variable in each one's environment, as the harness's marker)."""
    yaml = "summary: sleepers\nservices:\n"
    for i in range(count):
        yaml += (
            f"  svc-{i:03d}:\n    override: replace\n    summary: sleeper {i}\n"
            "    command: sleep 100000\n    startup: enabled\n"
            "    environment:\n      COBBLE_SLEEPER: sleeper\n"
        )
    return yaml


class Daemon:
    """`BINARY run --hold` on `pebble` (a directory with a layers/ directory), with
    `wrapper` (e.g. valgrind and its flags) in front of it."""

    def __init__(self, binary, pebble, wrapper=(), log=None):
        self.pebble = pebble
        self.socket = os.path.join(pebble, ".pebble.socket")
        self.env = dict(os.environ, PEBBLE=pebble, PEBBLE_SOCKET=self.socket)
        self.log = open(log or os.path.join(pebble, "daemon.log"), "w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [*wrapper, binary, "run", "--hold"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        self.pid = self.process.pid

    def request(self, method, path, body=None, timeout=60):
        """One request on a new connection; returns (status, body bytes)."""
        conn = UnixConnection(self.socket, timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def wait_answer(self, timeout=10, poll=0.0002):
        """Polls GET /v1/system-info until it answers 200; returns seconds since spawn."""
        while True:
            try:
                if self.request("GET", "/v1/system-info")[0] == 200:
                    return time.monotonic() - self.started
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited: see {self.log.name}")
            if time.monotonic() - self.started > timeout:
                raise RuntimeError(f"the daemon did not answer: see {self.log.name}")
            time.sleep(poll)

    def warm_up(self, rounds=WARM_ROUNDS, service="svc-000"):
        paths = [
            p.replace("{service}", service).replace("{dir}", self.pebble) for p in WARM_PATHS
        ]
        for _ in range(rounds):
            for path in paths:
                self.request("GET", path)

    def stop(self, timeout=60):
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=timeout)
        self.log.close()

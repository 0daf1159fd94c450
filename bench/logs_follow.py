"""Follows GET /v1/logs?follow=true for one service over the daemon's unix socket, as a
Python client would, and counts the numbered lines it gets and the lines the truncation
markers say were lost. Prints `ready` once the response head has arrived, then one JSON
object when TOTAL lines are accounted for (or nothing came for 10 s)."""

import http.client
import json
import socket
import sys
import time

sock_path, service, total = sys.argv[1], sys.argv[2], int(sys.argv[3])


class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock_path)
        self.sock.settimeout(10)


conn = UnixConnection("localhost")
conn.request("GET", "/v1/logs?follow=true&n=0&services=" + service)
resp = conn.getresponse()
assert resp.status == 200, resp.status
print("ready", flush=True)
received = lost = markers = 0
started = None
try:
    while received + lost < total:
        raw = resp.readline()
        if not raw:
            break
        if started is None:
            started = time.monotonic()
        message = json.loads(raw)["message"]
        if message.startswith("(... output truncated"):
            markers += 1
            lost += int(message.split()[3])
        else:
            received += 1
except socket.timeout:
    pass
elapsed = time.monotonic() - started if started else 0.0
print(json.dumps({"received": received, "lost": lost, "markers": markers, "secs": elapsed}), flush=True)

"""Small helpers shared by the compatibility tests: bounded polling, process
checks and a minimal raw HTTP client. Nothing here sleeps without a deadline."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = 'condition',
) -> Any:
    """Poll `predicate` until it returns a truthy value, at most `timeout` s.

    Returns that value; fails the test with the last value seen otherwise.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f'timed out after {timeout}s waiting for {what} (last value: {last!r})')
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    # The state field follows the parenthesised command name.
    state = stat.rsplit(')', 1)[1].split()[0]
    return state != 'Z'


def read_pid(path: Path, timeout: float = 5.0) -> int:
    """Wait for a service to write its PID to `path` and return it."""

    def get() -> int | None:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    return wait_for(get, timeout, what=f'pid file {path}')


def kill_process_group(pid: int) -> None:
    """SIGKILL a service's process group (services run as group leaders)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def current(client: Any, name: str) -> Any:
    """The `current` status ops reports for one service (enum or raw str)."""
    infos = client.get_services([name])
    assert [i.name for i in infos] == [name]
    return infos[0].current


@dataclass
class RawResponse:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def request_head(method: str, path: str, body: bytes | None, headers: dict[str, str] | None) -> bytes:
    """The request line and headers, as ops' urllib would send them."""
    hdrs = {'Host': 'localhost', 'Accept': 'application/json', 'Connection': 'close'}
    if body is not None:
        hdrs['Content-Type'] = 'application/json'
        hdrs['Content-Length'] = str(len(body))
    hdrs.update(headers or {})
    lines = [f'{method} {path} HTTP/1.1'] + [f'{k}: {v}' for k, v in hdrs.items()]
    return ('\r\n'.join(lines) + '\r\n\r\n').encode()


def read_response(sock: socket.socket, method: str) -> RawResponse:
    resp = http.client.HTTPResponse(sock, method=method)
    resp.begin()
    return RawResponse(resp.status, resp.reason, resp.headers, resp.read())


def unix_socket(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    return sock

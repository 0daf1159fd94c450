"""Fixtures for the black-box compatibility suite.

Each test gets its own `cobble run --create-dirs` daemon, started exactly the
way Juju starts Pebble: `PEBBLE` points at a fresh directory and
`PEBBLE_SOCKET` at a socket inside it. Tests talk to it with the real
`ops.pebble.Client` from PyPI, the same way a charm does, and with a tiny raw
HTTP helper for the few wire details ops hides (status codes of unknown
endpoints, garbage bodies, the TCP listener).

Everything waits with bounded polling (`wait_for`); nothing sleeps and hopes.
The daemon's combined stdout/stderr goes to a file that is attached to the
report of any failing test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import ops
import pytest

from helpers import RawResponse, pid_alive, read_response, request_head, unix_socket

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 15.0
# Environment marker inherited by every service process the daemon spawns, so
# teardown can find and kill anything a buggy daemon leaves behind.
MARKER_VAR = 'COBBLE_COMPAT_MARKER'


def cobble_bin() -> str:
    path = os.environ.get('COBBLE_BIN') or str(REPO_ROOT / 'target' / 'debug' / 'cobble')
    if not os.access(path, os.X_OK):
        pytest.exit(f'cobble binary not found or not executable: {path} (set COBBLE_BIN)', 2)
    return path


def _raw_request(
    sock: socket.socket,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str] | None,
    tolerate_early_close: bool = False,
) -> RawResponse:
    """Send one request in a single write and read the reply.

    One write keeps these tests deterministic; the separate problem of a
    server hanging up before it has read the body is pinned on its own in
    test_misc (ops' urllib writes the body separately and trips over it).
    """
    with sock:
        try:
            sock.sendall(request_head(method, path, body, headers) + (body or b''))
        except (BrokenPipeError, ConnectionResetError):
            # Only callers sending huge bodies may accept an answer that
            # comes before the server read it all.
            if not tolerate_early_close:
                raise
        return read_response(sock, method)


@dataclass
class Daemon:
    """One running `cobble run` process and the paths it uses."""

    dir: Path  # scratch dir: holds the daemon dir, the log and test files
    pebble_dir: Path
    socket_path: Path
    log_path: Path
    args: list[str]
    http_address: str | None = None
    proc: subprocess.Popen | None = None
    _log_file: Any = None

    @property
    def client(self) -> ops.pebble.Client:
        return ops.pebble.Client(socket_path=str(self.socket_path))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors='replace')
        except FileNotFoundError:
            return '<no daemon log>'

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith('PEBBLE')}
        env['PEBBLE'] = str(self.pebble_dir)
        env['PEBBLE_SOCKET'] = str(self.socket_path)
        env[MARKER_VAR] = str(self.dir)
        self._log_file = open(self.log_path, 'ab')
        self.proc = subprocess.Popen(
            [cobble_bin(), 'run', '--create-dirs', *self.args],
            env=env,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(
                    f'cobble exited with code {self.proc.returncode} during startup\n'
                    f'--- daemon log ---\n{self.log()}'
                )
            try:
                self.client.get_system_info()
                return
            except (ops.pebble.Error, OSError) as e:
                last_err = e
            time.sleep(0.05)
        self.kill()
        pytest.fail(
            f'cobble did not answer get_system_info within {STARTUP_TIMEOUT}s '
            f'(last error: {last_err!r})\n--- daemon log ---\n{self.log()}'
        )

    def terminate(self, timeout: float = SHUTDOWN_TIMEOUT) -> int | None:
        """SIGTERM the daemon and wait (bounded). Returns the exit code, or
        None if it had to be SIGKILLed."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def leftover_pids(self) -> list[int]:
        """Processes still alive that were spawned by this daemon."""
        needle = f'{MARKER_VAR}={self.dir}'.encode()
        found = []
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f'/proc/{pid}/environ', 'rb') as f:
                    environ = f.read().split(b'\0')
            except OSError:
                continue
            if needle in environ and pid_alive(pid):
                found.append(pid)
        return found

    def reap_leftovers(self) -> list[int]:
        pids = self.leftover_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def close(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def raw(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        tolerate_early_close: bool = False,
    ) -> RawResponse:
        """One HTTP request over the unix socket, bypassing ops."""
        return _raw_request(
            unix_socket(str(self.socket_path), timeout),
            method,
            path,
            body,
            headers,
            tolerate_early_close,
        )

    def raw_tcp(self, method: str, path: str, body: bytes | None = None) -> RawResponse:
        """One HTTP request to the --http listener."""
        assert self.http_address is not None, 'daemon was not started with --http'
        host, port = self.http_address.rsplit(':', 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        return _raw_request(sock, method, path, body, None)

    def write_layer(self, filename: str, text: str) -> None:
        """Write a layer file into $PEBBLE/layers (before start)."""
        layers = self.pebble_dir / 'layers'
        layers.mkdir(parents=True, exist_ok=True)
        (layers / filename).write_text(text)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, daemon in enumerate(getattr(item, '_cobble_daemons', [])):
            report.sections.append((f'cobble daemon {i} log ({daemon.args})', daemon.log()))


@pytest.fixture
def make_daemon(request: pytest.FixtureRequest) -> Iterator[Callable[..., Daemon]]:
    """Factory: make_daemon(hold=False, http=False, layers={name: yaml}, start=True)."""
    daemons: list[Daemon] = []
    request.node._cobble_daemons = daemons

    def make(
        hold: bool = False,
        http: bool = False,
        layers: dict[str, str] | None = None,
        start: bool = True,
    ) -> Daemon:
        # Short paths: a unix socket path must fit in 108 bytes.
        scratch = Path(tempfile.mkdtemp(prefix='cobble-compat-'))
        args = []
        if hold:
            args.append('--hold')
        http_address = None
        if http:
            http_address = f'127.0.0.1:{_free_port()}'
            args += ['--http', http_address]
        daemon = Daemon(
            dir=scratch,
            pebble_dir=scratch / 'pebble',
            socket_path=scratch / 'pebble' / '.pebble.socket',
            log_path=scratch / 'daemon.log',
            args=args,
            http_address=http_address,
        )
        daemons.append(daemon)
        for name, text in (layers or {}).items():
            daemon.write_layer(name, text)
        if start:
            daemon.start()
        return daemon

    yield make

    problems = []
    for daemon in daemons:
        code = daemon.terminate()
        if daemon.proc is not None and code is None:
            problems.append(
                f'cobble did not exit within {SHUTDOWN_TIMEOUT}s of SIGTERM; SIGKILLed it'
            )
        leaked = daemon.reap_leftovers()
        if leaked and code is not None:
            problems.append(f'service processes outlived the daemon: {leaked}')
        daemon.close()
    try:
        if problems:
            logs = '\n'.join(f'--- daemon log {d.args} ---\n{d.log()}' for d in daemons)
            pytest.fail('teardown: ' + '; '.join(problems) + '\n' + logs)
    finally:
        for daemon in daemons:
            shutil.rmtree(daemon.dir, ignore_errors=True)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    """A plain `cobble run --create-dirs` daemon."""
    return make_daemon()


@pytest.fixture
def held_daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    """`cobble run --create-dirs --hold`."""
    return make_daemon(hold=True)


@pytest.fixture
def http_daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    """`cobble run --create-dirs --http 127.0.0.1:<free port>`."""
    return make_daemon(http=True)


@pytest.fixture
def client(daemon: Daemon) -> ops.pebble.Client:
    return daemon.client


@pytest.fixture
def scratch(daemon: Daemon) -> Path:
    """A short directory for files that services write."""
    d = daemon.dir / 'work'
    d.mkdir()
    return d

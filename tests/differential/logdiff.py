#!/usr/bin/env python3
"""Log differential: the daemon log of cobble against a real Pebble's, scenario by scenario.

Juju shows the daemon's output as the container's log, and operators and scripts read it.
Each scenario starts cobble and Pebble side by side, the way Juju starts Pebble
(`run --create-dirs --hold --http 127.0.0.1:PORT --verbose`) or as plain `run`, drives both
through the same steps (each step waits, bounded, for an event on that daemon: a line in its
log, a change that is ready, a process that exited), stops them, and compares what each
wrote on stderr (its log) and on stdout (service output under `--verbose`), line by line,
after the normalisation below (see README.md next to this file).

    logdiff.py --cobble BIN --pebble BIN [--only NAME,...] [--keep] [--list]

Every line Pebble writes must be in cobble's log, in Pebble's words and in Pebble's order,
except where a scenario names the order a race (those lines are then compared as a set).
Lines only cobble writes are accepted when `COBBLE_ONLY` lists them (each with the place
the documentation describes it); anything else cobble adds is a difference.

Python 3.11 standard library only. Exit status: 0 when every scenario's logs agree, 1 when
some differ, 2 when a run could not be completed (a daemon did not start, a step's event
did not come).
"""

from __future__ import annotations

import argparse
import difflib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff import (  # noqa: E402  (the API differential's transport helpers)
    MARKER_VAR, Websocket, http_request, kill_leftovers, multipart_body)

# --------------------------------------------------------------------------------------
# What cobble may add, explicitly.
# --------------------------------------------------------------------------------------

# Lines only cobble writes, about what it does beyond Pebble. Each: a pattern matched
# against the whole normalised line, and where the line is documented.
COBBLE_ONLY: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'Check "[^"]+" still failing after \d+ failures, triggering action again'),
     'docs/extensions.md: a check that stays down fires its action again'),
]

PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
START_TIMEOUT = 30.0
EVENT_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0

# --------------------------------------------------------------------------------------
# Normalisation.
# --------------------------------------------------------------------------------------

LOG_PREFIX_RE = re.compile(r'^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z ')
JSON_TIME_RE = re.compile(r'"datetime":"[^"]*"')
# A request line: [REMOTE ]METHOD TARGET DURATION STATUS (TRANSPORT)
REQUEST_RE = re.compile(
    r'^(\[pebble\] (?:\S+ )?(?:GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) \S+ )'
    r'\S+( \d{3} \((?:http\+unix|http|https)\))$')
PID_RE = re.compile(r'\b(pid|PID|process) \d+\b')
TCP_PEER_RE = re.compile(r'^\[pebble\] (127\.0\.0\.1|\[::1\]):\d+ ')


def normalise_log(text: str, root: str, port: int | None) -> list[str]:
    """The daemon log's lines without what differs between any two runs: the time stamp,
    the security event's time, a request's duration, pids, the daemon's own directory and
    port, the client's port."""
    out = []
    for line in text.splitlines():
        line = LOG_PREFIX_RE.sub('', line)
        line = line.replace(root, '<root>')
        if port is not None:
            line = line.replace(f':{port}', ':<port>')
        line = JSON_TIME_RE.sub('"datetime":"<time>"', line)
        line = REQUEST_RE.sub(r'\1<duration>\2', line)
        line = TCP_PEER_RE.sub(r'[pebble] \1:<client> ', line)
        line = PID_RE.sub(r'\1 <pid>', line)
        out.append(line)
    return out


def normalise_output(text: str, root: str) -> list[str]:
    """Service output under --verbose: `TIME [service] line`, without the time."""
    return [LOG_PREFIX_RE.sub('', line).replace(root, '<root>') for line in text.splitlines()]


# --------------------------------------------------------------------------------------
# One daemon, driven by a scenario.
# --------------------------------------------------------------------------------------

class StepFailed(Exception):
    """An event a step waits for did not come."""


class Daemon:
    def __init__(self, name: str, binary: str, workdir: str, marker: str):
        self.name = name
        self.binary = os.path.abspath(binary)
        self.marker = marker
        self.root = tempfile.mkdtemp(prefix=f'{name}-', dir=workdir)
        self.pebble_dir = os.path.join(self.root, 'pebble')
        self.scratch = os.path.join(self.root, 'scratch')
        self.socket = os.path.join(self.pebble_dir, '.pebble.socket')
        self.stderr_path = os.path.join(self.root, 'stderr.log')
        self.stdout_path = os.path.join(self.root, 'stdout.log')
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        os.makedirs(os.path.join(self.pebble_dir, 'layers'))
        os.makedirs(self.scratch)

    # Set-up and process control.

    def write_layer(self, text: str) -> None:
        with open(os.path.join(self.pebble_dir, 'layers', '001-base.yaml'), 'w') as f:
            f.write(self.fill(text))

    def fill(self, text: str) -> str:
        return text.replace('@SCRATCH@', self.scratch)

    def start(self, args: list[str], wait_socket: bool = True) -> None:
        env = {'PATH': PATH, 'HOME': os.environ.get('HOME', '/root'), 'LANG': 'C.UTF-8',
               'PEBBLE': self.pebble_dir, MARKER_VAR: self.marker}
        args = [a.replace('@PORT@', str(self.port)) for a in args]
        with open(self.stderr_path, 'wb') as err, open(self.stdout_path, 'wb') as out:
            self.proc = subprocess.Popen([self.binary, *args], env=env, cwd=self.root,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        if wait_socket:
            self.wait(lambda: os.path.exists(self.socket) and http_request(
                self.socket, 'GET', '/v1/system-info', timeout=2.0).get('status') == 200,
                'the API socket to answer', START_TIMEOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StepFailed(f'{self.name} did not exit within {timeout:g}s')

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    # Events.

    def wait(self, cond: Callable[[], bool], what: str, timeout: float = EVENT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if cond():
                return
            if time.monotonic() > deadline:
                raise StepFailed(f'{self.name}: no {what} within {timeout:g}s')
            if self.proc is not None and self.proc.poll() is not None and what != 'exit':
                if cond():
                    return
                raise StepFailed(f'{self.name} exited ({self.proc.returncode}) waiting for {what}')
            time.sleep(0.02)

    def log(self) -> str:
        with open(self.stderr_path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')

    def output(self) -> str:
        with open(self.stdout_path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')

    def wait_log(self, pattern: str, count: int = 1) -> None:
        """Waits until `count` lines of the log contain `pattern` (a regex)."""
        regex = re.compile(pattern)
        self.wait(lambda: sum(1 for line in self.log().splitlines() if regex.search(line))
                  >= count, f'log line /{pattern}/ x{count}')

    # The API.

    def req(self, method: str, url: str, body: object = None,
            headers: dict[str, str] | None = None) -> dict:
        raw = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        hdrs = dict(headers or {})
        if raw is not None and 'Content-Type' not in hdrs:
            hdrs['Content-Type'] = 'application/json'
        rsp = http_request(self.socket, method, url, body=raw, headers=hdrs)
        if 'error' in rsp:
            raise StepFailed(f'{self.name}: {method} {url}: {rsp["error"]}')
        try:
            rsp['json'] = json.loads(rsp['raw'])
        except ValueError:
            rsp['json'] = None
        return rsp

    def tcp_req(self, method: str, url: str) -> int:
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=10)
        try:
            conn.request(method, url)
            rsp = conn.getresponse()
            rsp.read()
            return rsp.status
        finally:
            conn.close()

    def change_ready(self, change: str) -> bool:
        rsp = http_request(self.socket, 'GET', f'/v1/changes/{change}', timeout=5.0)
        if rsp.get('status') != 200:
            return False
        return bool(json.loads(rsp['raw'])['result'].get('ready'))

    def wait_change(self, change: str) -> None:
        """Waits, by polling (which Pebble does not log), until the change is ready."""
        self.wait(lambda: self.change_ready(change), f'change {change} ready')

    def act(self, method: str, url: str, body: object = None) -> str:
        """An async request; returns its change once ready."""
        rsp = self.req(method, url, body)
        change = rsp['json'].get('change') if rsp['json'] else None
        if rsp['status'] != 202 or not change:
            raise StepFailed(f'{self.name}: {method} {url} answered {rsp["status"]}: '
                             f'{rsp["raw"][:300]!r}')
        self.wait_change(change)
        return change

    def exec(self, body: dict) -> None:
        """Runs a command through exec and its websockets, to the command's end."""
        rsp = self.req('POST', '/v1/exec', body)
        if rsp['status'] != 202:
            raise StepFailed(f'{self.name}: exec answered {rsp["status"]}: {rsp["raw"][:300]!r}')
        task = rsp['json']['result']['task-id']
        change = rsp['json']['change']
        socks = []
        try:
            control = Websocket(self.socket, f'/v1/tasks/{task}/websocket/control')
            socks.append(control)
            stdio = Websocket(self.socket, f'/v1/tasks/{task}/websocket/stdio')
            socks.append(stdio)
            stdio.send(Websocket.TEXT, b'{"command":"end"}')
            while True:
                msg = stdio.recv()
                if msg is None or msg[0] == Websocket.CLOSE:
                    break
                if msg[0] == Websocket.TEXT and b'"end"' in msg[1]:
                    break
            while True:
                msg = control.recv()
                if msg is None or msg[0] == Websocket.CLOSE:
                    break
        finally:
            for ws in socks:
                ws.close()
        self.wait_change(change)


# --------------------------------------------------------------------------------------
# The scenarios.
# --------------------------------------------------------------------------------------

JUJU = ['run', '--create-dirs', '--hold', '--http', ':@PORT@', '--verbose']
PLAIN = ['run']


@dataclass
class Scenario:
    name: str
    what: str
    args: list[str]
    layer: str
    drive: Callable[[Daemon], None]
    # Lines (patterns) whose order among themselves is a race in Pebble: compared as a
    # multiset, apart from the ordered comparison of the rest.
    racy: list[str] = field(default_factory=list)
    # Whether the daemon stops by itself (else the harness sends SIGTERM at the end).
    stops_itself: bool = False


def stop_daemon(d: Daemon) -> None:
    d.send_signal(signal.SIGTERM)
    d.wait_exit()


AUTOSTART_LAYER = """
services:
  quick:
    override: replace
    command: /bin/sh -c 'echo quick says goodbye; exit 3'
    startup: enabled
    on-failure: restart
    backoff-delay: 1m
  once:
    override: replace
    command: /bin/sh -c 'echo once and done'
    startup: enabled
    on-success: ignore
  web:
    override: replace
    command: /bin/sh -c 'echo web up; exec sleep 1000'
    startup: enabled
"""


def drive_autostart(d: Daemon) -> None:
    # Plain `run` starts the enabled services itself; change 1 is their start.
    d.wait_change('1')
    d.wait_log(r'Started default services with change 1\.')
    stop_daemon(d)


STOP_LAYER = """
services:
  polite:
    override: replace
    command: /bin/sh -c 'echo polite up; exec sleep 1000'
  stubborn:
    override: replace
    command: /bin/sh -c 'trap "echo ignoring TERM" TERM; echo stubborn up; while true; do sleep 0.1; done'
    kill-delay: 1s
"""


def drive_stop(d: Daemon) -> None:
    d.act('POST', '/v1/services', {'action': 'start', 'services': ['polite']})
    d.act('POST', '/v1/services', {'action': 'start', 'services': ['stubborn']})
    d.act('POST', '/v1/services', {'action': 'stop', 'services': ['polite']})
    d.act('POST', '/v1/services', {'action': 'stop', 'services': ['stubborn']})
    stop_daemon(d)


CHECK_LAYER = """
services:
  svc:
    override: replace
    command: /bin/sh -c 'echo svc up; exec sleep 1000'
    on-check-failure:
      chk: restart
checks:
  chk:
    override: replace
    period: 4s
    threshold: 1
    exec:
      command: /bin/sh -c 'test ! -e @SCRATCH@/broken'
"""


def drive_check(d: Daemon) -> None:
    # Polled through what Pebble does not log: /v1/health and /v1/changes/{id}.
    # The period leaves time for the restart before the recover change's first run, so
    # that run is the first to pass: a slower machine is not another log.
    d.act('POST', '/v1/services', {'action': 'start', 'services': ['svc']})
    open(os.path.join(d.scratch, 'broken'), 'w').close()
    d.wait_log(r'Check "chk" threshold 1 hit')
    d.wait_log(r'Service "svc" starting', count=2)
    os.remove(os.path.join(d.scratch, 'broken'))
    # Recovered: the recover change (3) is done and the check is up again.
    d.wait_change('3')
    d.wait(lambda: healthy(d, 'chk'), 'chk healthy again')
    stop_daemon(d)


def healthy(d: Daemon, name: str) -> bool:
    rsp = http_request(d.socket, 'GET', f'/v1/health?names={name}', timeout=5.0)
    return rsp.get('status') == 200


def drive_exec(d: Daemon) -> None:
    d.exec({'command': ['/bin/echo', 'hello'], 'environment': {}})
    d.exec({'command': ['/bin/sh', '-c', 'exit 2']})
    d.exec({'command': ['/bin/sleep', '10'], 'timeout': '1s'})
    d.req('POST', '/v1/exec', {'command': ['/nonexistent/command']})
    stop_daemon(d)


def drive_files(d: Daemon) -> None:
    path = os.path.join(d.scratch, 'pushed.txt')
    meta = json.dumps({'action': 'write', 'files': [{'path': path, 'permissions': '600'}]})
    boundary = '0123456789abcdef0123456789abcdef'
    body = multipart_body(boundary, [
        ([('Content-Disposition', 'form-data; name="request"')], meta.encode()),
        ([('Content-Disposition', 'form-data; name="files"; filename="' + path + '"')],
         b'pushed content\n'),
    ])
    rsp = d.req('POST', '/v1/files', body,
                {'Content-Type': f'multipart/form-data; boundary={boundary}'})
    if rsp['status'] != 200:
        raise StepFailed(f'{d.name}: push answered {rsp["status"]}: {rsp["raw"][:300]!r}')
    pull = {'Accept': 'multipart/form-data'}
    d.req('GET', f'/v1/files?action=read&path={path}', headers=pull)
    d.req('GET', f'/v1/files?action=read&path={d.scratch}/missing.txt', headers=pull)
    d.req('GET', f'/v1/files?action=list&path={d.scratch}')
    d.req('POST', '/v1/files', {'action': 'make-dirs',
                                'dirs': [{'path': f'{d.scratch}/a/b', 'make-parents': True}]})
    stop_daemon(d)


def drive_notices(d: Daemon) -> None:
    d.req('POST', '/v1/notices', {'action': 'add', 'type': 'custom', 'key': 'example.com/thing',
                                  'data': {'k': 'v'}})
    d.req('POST', '/v1/notices', {'action': 'add', 'type': 'custom', 'key': 'not a domain'})
    d.req('GET', '/v1/notices?types=custom')
    d.req('GET', '/v1/notices/1')
    d.req('GET', '/v1/notices?types=custom&after=2099-01-01T00:00:00Z&timeout=100ms')
    stop_daemon(d)


def drive_identities(d: Daemon) -> None:
    alice = {'access': 'admin', 'local': {'user-id': 1000}}
    d.req('POST', '/v1/identities', {'action': 'add', 'identities': {'alice': alice}})
    d.req('POST', '/v1/identities', {'action': 'update', 'identities': {
        'alice': {'access': 'read', 'local': {'user-id': 1000}}}})
    d.req('POST', '/v1/identities', {'action': 'replace', 'identities': {'alice': alice}})
    d.req('POST', '/v1/identities', {'action': 'replace', 'identities': {
        'alice': None, 'carol': {'access': 'read', 'local': {'user-id': 1001}}}})
    d.req('POST', '/v1/identities', {'action': 'add', 'identities': {
        'bob': {'access': 'metrics', 'basic': {'password': '$6$salt$hash'}}}})
    d.req('POST', '/v1/identities', {'action': 'remove', 'identities': {'bob': None}})
    d.req('POST', '/v1/identities', {'action': 'remove', 'identities': {'nobody': None}})
    d.req('GET', '/v1/identities')
    stop_daemon(d)


def drive_layers(d: Daemon) -> None:
    good = 'services:\n  extra:\n    override: replace\n    command: sleep 1000\n'
    d.req('POST', '/v1/layers', {'action': 'add', 'label': 'good', 'format': 'yaml',
                                 'layer': good})
    d.req('POST', '/v1/layers', {'action': 'add', 'label': 'bad', 'format': 'yaml',
                                 'layer': 'services:\n  x:\n    override: sideways\n'})
    d.req('POST', '/v1/layers', {'action': 'add', 'label': 'good', 'format': 'yaml',
                                 'layer': good})
    d.req('POST', '/v1/layers', {'action': 'add', 'label': 'broken', 'format': 'yaml',
                                 'layer': 'services: [\n'})
    d.req('GET', '/v1/plan?format=yaml')
    stop_daemon(d)


def drive_http(d: Daemon) -> None:
    for method, url in (('GET', '/v1/health'), ('GET', '/v1/system-info'),
                        ('GET', '/v1/services'), ('GET', '/v1/changes?select=all'),
                        ('POST', '/v1/services'), ('GET', '/v1/metrics')):
        d.tcp_req(method, url)
    stop_daemon(d)


SHUTDOWN_LAYER = """
services:
  main:
    override: replace
    command: /bin/sh -c 'echo main up; exec sleep 1000'
    startup: enabled
  finisher:
    override: replace
    command: /bin/sh -c 'echo finisher waiting; while [ ! -e @SCRATCH@/done ]; do sleep 0.05; done; echo finisher done'
    startup: enabled
    on-success: shutdown
"""


def drive_shutdown(d: Daemon) -> None:
    d.wait_change('1')
    d.wait_log(r'Started default services with change 1\.')
    open(os.path.join(d.scratch, 'done'), 'w').close()
    d.wait_exit()


SCENARIOS = [
    Scenario('autostart', 'plain run: a failing, a quickly exiting and a running service',
             PLAIN, AUTOSTART_LAYER, drive_autostart,
             racy=[r'Service "(quick|once|web)" starting: ',
                   r'Service "(quick|once)" stopped unexpectedly',
                   r'Service "(quick|once)" on-(success|failure) action',
                   r'Change 1 task \(Start service "(quick|once)"\) failed']),
    Scenario('stop', 'stop with SIGTERM, and with SIGKILL after the kill-delay',
             JUJU, STOP_LAYER, drive_stop),
    Scenario('check', 'a failing and recovering exec check with on-check-failure: restart',
             JUJU, CHECK_LAYER, drive_check),
    Scenario('exec', 'exec: a command, a non-zero exit, a timeout, a missing command',
             JUJU, '', drive_exec,
             # Each websocket's request is logged when its connection ends.
             racy=[r'GET /v1/tasks/\d+/websocket/']),
    Scenario('files', 'push, pull, list and make-dirs', JUJU, '', drive_files),
    Scenario('notices', 'notices added, refused and read', JUJU, '', drive_notices),
    Scenario('identities', 'identities added, updated, replaced and removed',
             JUJU, '', drive_identities,
             # Pebble logs a request's identities in Go's map order (random).
             racy=[r'"event":"user_(deleted:0,alice|updated:0,carol,read)"']),
    Scenario('layers', 'a layer added, refused twice, then the plan', JUJU, '', drive_layers),
    Scenario('http', 'unauthenticated requests over --http', JUJU, '', drive_http),
    Scenario('shutdown', 'plain run: a service whose on-success is shutdown',
             PLAIN, SHUTDOWN_LAYER, drive_shutdown, stops_itself=True,
             racy=[r'Service "(main|finisher)" starting: ']),
]


# --------------------------------------------------------------------------------------
# Running and comparing.
# --------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@dataclass
class Run:
    log: list[str]
    output: list[str]
    code: int | None
    error: str = ''


def run_one(sc: Scenario, d: Daemon) -> Run:
    error = ''
    try:
        if sc.layer:
            d.write_layer(sc.layer)
        d.port = free_port()
        d.start(sc.args, wait_socket=True)
        sc.drive(d)
    except StepFailed as e:
        error = str(e)
    except Exception as e:  # a harness failure is reported, not raised into a thread
        error = f'{d.name}: {type(e).__name__}: {e}'
    finally:
        if d.alive():
            d.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                d.kill()
    code = d.proc.returncode if d.proc else None
    return Run(normalise_log(d.log(), d.root, d.port) if d.proc else [],
               normalise_output(d.output(), d.root) if d.proc else [], code, error)


def split_racy(lines: list[str], racy: list[str]) -> tuple[list[str], list[str]]:
    patterns = [re.compile(p) for p in racy]
    ordered, unordered = [], []
    for line in lines:
        (unordered if any(p.search(line) for p in patterns) else ordered).append(line)
    return ordered, sorted(unordered)


def cobble_only(line: str) -> bool:
    text = line.removeprefix('[pebble] ')
    return any(p.fullmatch(text) for p, _ in COBBLE_ONLY)


def compare_lines(pebble: list[str], cobble: list[str], racy: list[str]) -> list[str]:
    """The differences, as unified-diff lines ('-' Pebble only, '+' cobble only); empty when
    cobble writes every line of Pebble's in its order, plus only lines COBBLE_ONLY accepts."""
    p_ord, p_set = split_racy(pebble, racy)
    c_ord, c_set = split_racy(cobble, racy)
    c_ord = [line for line in c_ord if not cobble_only(line)]
    out = []
    for a, b, title in ((p_ord, c_ord, 'in order'), (p_set, c_set, 'as a set (racy order)')):
        if a != b:
            out.append(f'@@ {title}')
            out.extend(line for line in difflib.unified_diff(a, b, 'pebble', 'cobble', n=2,
                                                               lineterm='')
                       if not line.startswith(('---', '+++')))
    return out


def run_scenario(sc: Scenario, pebble_bin: str, cobble_bin: str, workdir: str,
                 marker: str) -> dict:
    daemons = {'pebble': Daemon('pebble', pebble_bin, workdir, marker),
               'cobble': Daemon('cobble', cobble_bin, workdir, marker)}
    runs: dict[str, Run] = {}

    def go(name: str) -> None:
        runs[name] = run_one(sc, daemons[name])

    threads = [threading.Thread(target=go, args=(n,)) for n in daemons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p, c = runs['pebble'], runs['cobble']
    errors = [r.error for r in (p, c) if r.error]
    log_diff = compare_lines(p.log, c.log, sc.racy)
    out_diff = compare_lines(sorted(p.output), sorted(c.output), [])
    code_diff = [] if p.code == c.code else [f'exit code: pebble {p.code}, cobble {c.code}']
    return {'name': sc.name, 'what': sc.what, 'errors': errors, 'log_diff': log_diff,
            'output_diff': out_diff, 'code_diff': code_diff,
            'identical': not (errors or log_diff or out_diff or code_diff),
            'pebble_log': p.log, 'cobble_log': c.log,
            'dirs': {n: d.root for n, d in daemons.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cobble', required=False)
    ap.add_argument('--pebble', required=False)
    ap.add_argument('--only', default='', help='comma-separated scenario names')
    ap.add_argument('--keep', action='store_true', help="keep the daemons' directories")
    ap.add_argument('--list', action='store_true', help='list the scenarios and exit')
    ap.add_argument('--show-logs', action='store_true',
                    help="print both normalised logs of every scenario that differs")
    ap.add_argument('--report', help='write the results as JSON to this file')
    args = ap.parse_args(argv)
    if args.list:
        for sc in SCENARIOS:
            print(f'{sc.name:12} {" ".join(sc.args):62} {sc.what}')
        return 0
    if not args.cobble or not args.pebble:
        ap.error('--cobble and --pebble are required')
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(',')]
    workdir = tempfile.mkdtemp(prefix='logdiff-')
    marker = f'logdiff-{os.getpid()}-{time.time_ns()}'
    results = []
    try:
        for sc in chosen:
            try:
                res = run_scenario(sc, args.pebble, args.cobble, workdir, marker)
            finally:
                kill_leftovers(marker)
            results.append(res)
            state = 'identical' if res['identical'] else 'DIFFERENT'
            print(f'{sc.name:12} {state}', flush=True)
            for line in res['errors'] + res['code_diff']:
                print(f'    {line}')
            if res['log_diff']:
                print('    log (- pebble only, + cobble only):')
                print('\n'.join(f'      {line}' for line in res['log_diff']))
            if res['output_diff']:
                print('    service output (- pebble only, + cobble only):')
                print('\n'.join(f'      {line}' for line in res['output_diff']))
            if args.show_logs and not res['identical']:
                for who in ('pebble', 'cobble'):
                    print(f'    --- {who} log')
                    print('\n'.join(f'      {line}' for line in res[f'{who}_log']))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f'kept: {workdir}')
    same = sum(1 for r in results if r['identical'])
    print(f'{same}/{len(results)} scenarios identical')
    if args.report:
        with open(args.report, 'w') as f:
            json.dump({'identical': same, 'total': len(results), 'scenarios': results}, f,
                      indent=1)
    if any(r['errors'] for r in results):
        return 2
    return 0 if same == len(results) else 1


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Random differential test: cobble against real Pebble over the unix socket.

Both daemons are started side by side (`PEBBLE=<fresh dir> BIN run --create-dirs --hold`),
a seeded random sequence of API requests is sent to both in lockstep, and their answers are
compared after a small, explicit normalisation (see README.md next to this file). The
sequence is a pure function of the seed: the generator keeps its own model of what it asked
for and never looks at an answer, so the same seed gives the same requests whatever the
daemons answer.

    diff.py --cobble BIN --pebble BIN [--seed N] [--count N] [--min-identical PCT]
            [--report FILE] [--verbose]

Python 3.11 standard library only. Exit status: 0 when the identical share is at least
--min-identical, 1 when below, 2 when the run itself failed (a daemon did not start, the
time limit was hit).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import difflib
import email.message
import email.utils
import fnmatch
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------------------
# What may differ, explicitly.
# --------------------------------------------------------------------------------------

# Keys only cobble sends. Each entry: (endpoint glob, path glob in the normalised answer).
# A key listed here is ignored when cobble has it and Pebble does not; when both have it,
# it is compared like any other. Everything not listed counts as a difference.
ALLOWED_EXTRA: dict[tuple[str, str], str] = {
    ('GET /v1/system-info', 'body.result.cobble-version'):
        "cobble's own version, beside the Pebble version it implements (docs/extensions.md)",
    ('GET /v1/services', 'body.result[].reason'):
        'why a service is not simply running, the Notes column of `cobble services`; '
        "Pebble's clients ignore it (docs/reference/api.md)",
    ('GET /v1/metrics', 'metrics.cobble_*'):
        'cobble-only metric families (memory, CPU, processes, fds, check actions, log '
        'forwarding) documented in docs/reference/api.md',
    ('GET /v1/metrics', 'metrics.# * cobble_*'):
        'cobble-only metric families (memory, CPU, processes, fds, check actions, log '
        'forwarding) documented in docs/reference/api.md',
}

# Counters that move with the wall clock (a check runs every period), compared with a
# tolerance of one: the two daemons get the same request a few milliseconds apart, so a
# check may have run once more on one of them when the answer is taken.
TOLERANT_COUNTERS = [
    re.compile(r'\.(successes|failures)$'),
    re.compile(r'^metrics\.pebble_check_(success|failure)_count\{'),
]

RFC3339_RE = re.compile(
    r'\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})')
# A measured duration inside a task log line (a fraction: "1.002345s", "12.5ms"). Whole
# durations ("10s", a configured timeout) are left alone.
MEASURED_DURATION_RE = re.compile(r'\b\d+\.\d+(?:ns|us|µs|ms|s|m|h)\b|\b\d+m\d+(?:\.\d+)?s\b')
PID_RE = re.compile(r'\b(pid|PID|process) (\d+)\b')
# The temporary file of an atomic write: "<path>.<random number>~".
ATOMIC_TMP_RE = re.compile(r'(\S)\.\d{3,}~')
# IDs inside messages: `cannot find change with id "5"`, `cannot abort change 5 with ...`,
# `cannot find task "7"`, `exec 7: timeout ...`, `cannot find notice with ID "3"`.
ID_IN_TEXT_RE = re.compile(r'\b(change|task|notice|exec)( with (?:id|ID))? ("?)(\d+)("?)')

MARKER_VAR = 'PEBBLE_DIFF_MARKER'
SETTLE_WAIT_TIMEOUT = '10s'
HTTP_TIMEOUT = 25.0
CHECK_SETTLE_LIMIT = 16.0


# --------------------------------------------------------------------------------------
# HTTP over a unix socket.
# --------------------------------------------------------------------------------------

class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client connection whose transport is a unix socket."""

    def __init__(self, socket_path: str, timeout: float = HTTP_TIMEOUT):
        super().__init__('localhost', timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def http_request(socket_path: str, method: str, url: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None,
                 timeout: float = HTTP_TIMEOUT) -> dict[str, Any]:
    """One request on a fresh connection: {'status', 'ctype', 'headers', 'raw'} or
    {'error': text} when the request could not be made or answered in time."""
    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request(method, url, body=body, headers=headers or {})
        rsp = conn.getresponse()
        raw = rsp.read()
        return {'status': rsp.status, 'ctype': rsp.getheader('Content-Type', ''),
                'headers': {k.lower(): v for k, v in rsp.getheaders()}, 'raw': raw}
    except socket.timeout:
        return {'error': f'no answer within {timeout:g}s'}
    except (OSError, http.client.HTTPException) as e:
        return {'error': f'{type(e).__name__}: {e}'}
    finally:
        conn.close()


def json_get(socket_path: str, url: str, timeout: float = HTTP_TIMEOUT) -> Any:
    """GET and decode an envelope's result; None when that fails (hidden bookkeeping)."""
    rsp = http_request(socket_path, 'GET', url, timeout=timeout)
    if 'error' in rsp or rsp['status'] != 200:
        return None
    try:
        return json.loads(rsp['raw']).get('result')
    except (ValueError, AttributeError):
        return None


# --------------------------------------------------------------------------------------
# A minimal websocket client (RFC 6455), enough for exec's control/stdio/stderr.
# --------------------------------------------------------------------------------------

class WebsocketRefused(Exception):
    def __init__(self, status: int, ctype: str, raw: bytes):
        super().__init__(f'websocket refused with {status}')
        self.status, self.ctype, self.raw = status, ctype, raw


class Websocket:
    TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10

    def __init__(self, socket_path: str, path: str, timeout: float = 10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(socket_path)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            f'GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n'
            f'Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n'
            'Sec-WebSocket-Version: 13\r\n\r\n').encode())
        buf = b''
        while b'\r\n\r\n' not in buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, rest = buf.partition(b'\r\n\r\n')
        lines = head.decode('latin-1').split('\r\n')
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            self.sock.close()
            raise WebsocketRefused(0, '', buf)
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(':')
            hdrs[k.strip().lower()] = v.strip()
        if status != 101:
            length = int(hdrs.get('content-length', '0') or 0)
            try:
                while len(rest) < length:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
            except OSError:
                pass
            self.sock.close()
            raise WebsocketRefused(status, hdrs.get('content-type', ''), rest)
        self.buf = rest

    def _read(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> tuple[int, bytes] | None:
        """One whole message (fragments joined); None at end of stream."""
        opcode, payload = None, b''
        while True:
            head = self._read(2)
            if head is None:
                return None
            fin, op = head[0] & 0x80, head[0] & 0x0F
            length = head[1] & 0x7F
            if length == 126:
                ext = self._read(2)
                if ext is None:
                    return None
                length = struct.unpack('!H', ext)[0]
            elif length == 127:
                ext = self._read(8)
                if ext is None:
                    return None
                length = struct.unpack('!Q', ext)[0]
            mask = self._read(4) if head[1] & 0x80 else None
            data = self._read(length) if length else b''
            if data is None:
                return None
            if mask:
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
            if op == self.PING:
                self.send(self.PONG, data)
                continue
            if op >= 8:
                return op, data
            if opcode is None:
                opcode = op
            payload += data
            if fin:
                return opcode, payload

    def send(self, opcode: int, payload: bytes) -> None:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack('!H', n)
        else:
            head += bytes([0x80 | 127]) + struct.pack('!Q', n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))

    def close(self) -> None:
        try:
            self.send(self.CLOSE, struct.pack('!H', 1000))
        except OSError:
            pass
        self.sock.close()


# --------------------------------------------------------------------------------------
# Multipart.
# --------------------------------------------------------------------------------------

def multipart_body(boundary: str, parts: list[tuple[list[tuple[str, str]], bytes]],
                   close: bool = True) -> bytes:
    out = b''
    for headers, data in parts:
        out += b'--' + boundary.encode() + b'\r\n'
        for k, v in headers:
            out += f'{k}: {v}\r\n'.encode()
        out += b'\r\n' + data + b'\r\n'
    if close:
        out += b'--' + boundary.encode() + b'--\r\n'
    return out


def header_param(value: str, header: str, param: str) -> str | None:
    msg = email.message.Message()
    msg[header] = value
    got = msg.get_param(param, header=header)
    if isinstance(got, tuple):
        got = email.utils.collapse_rfc2231_value(got)
    return got


def parse_multipart(ctype: str, raw: bytes) -> list[dict[str, Any]] | None:
    boundary = header_param(ctype, 'content-type', 'boundary')
    if not boundary:
        return None
    delim = b'--' + boundary.encode()
    chunks = raw.split(delim)
    parts = []
    for chunk in chunks[1:]:
        if chunk.startswith(b'--'):
            break
        chunk = chunk[2:] if chunk.startswith(b'\r\n') else chunk
        chunk = chunk[:-2] if chunk.endswith(b'\r\n') else chunk
        head, _, data = chunk.partition(b'\r\n\r\n')
        hdrs = {}
        for line in head.decode('latin-1').split('\r\n'):
            k, _, v = line.partition(':')
            hdrs[k.strip().lower()] = v.strip()
        disp = hdrs.get('content-disposition', '')
        part: dict[str, Any] = {
            'name': header_param(disp, 'content-disposition', 'name'),
            'filename': header_param(disp, 'content-disposition', 'filename'),
            'ctype': media_type(hdrs.get('content-type', '')),
        }
        if part['ctype'] == 'application/json':
            try:
                part['json'] = json.loads(data)
            except ValueError:
                part['data'] = data.decode('utf-8', 'replace')
        else:
            part['data'] = data.decode('utf-8', 'replace')
        parts.append(part)
    return parts


def media_type(ctype: str) -> str:
    return ctype.split(';', 1)[0].strip().lower()


# --------------------------------------------------------------------------------------
# A tiny YAML emitter for the layers (block style, strings quoted when not plain-safe).
# --------------------------------------------------------------------------------------

PLAIN_RE = re.compile(r'^[A-Za-z0-9/@._-][A-Za-z0-9/@._ -]*$')
YAML_SPECIAL = {'true', 'false', 'yes', 'no', 'on', 'off', 'null', '~', 'y', 'n'}


def yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if v is None:
        return 'null'
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    if (PLAIN_RE.match(s) and s.lower() not in YAML_SPECIAL and not s.endswith(' ')
            and not re.match(r'^[-+]?[0-9.]+$', s)):
        return s
    return json.dumps(s)


def to_yaml(obj: Any, indent: int = 0) -> str:
    pad = '  ' * indent
    out = ''
    if isinstance(obj, dict):
        if not obj:
            return pad + '{}\n'
        for k, v in obj.items():
            key = yaml_scalar(k)
            if isinstance(v, dict) and v:
                out += f'{pad}{key}:\n' + to_yaml(v, indent + 1)
            elif isinstance(v, list) and v:
                out += f'{pad}{key}:\n' + to_yaml(v, indent + 1)
            elif isinstance(v, dict):
                out += f'{pad}{key}: {{}}\n'
            elif isinstance(v, list):
                out += f'{pad}{key}: []\n'
            else:
                out += f'{pad}{key}: {yaml_scalar(v)}\n'
        return out
    if isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                inner = to_yaml(v, indent + 1).lstrip()
                out += f'{pad}- {inner}'
            else:
                out += f'{pad}- {yaml_scalar(v)}\n'
        return out
    return pad + yaml_scalar(obj) + '\n'


# --------------------------------------------------------------------------------------
# Requests.
# --------------------------------------------------------------------------------------

@dataclass
class Req:
    """One generated request. Strings may hold placeholders, resolved per daemon:
    @SCRATCH@ (the daemon's scratch dir), @CHG#k@ (the k-th change Pebble has, in order
    of first appearance; cobble gets its change with the same label), @CHGNC#k@ (the same
    among changes that are not a check's), @TASK#k@, @CHKCHG:name@ (a check's current change),
    @EXECTASK:rN@ (the task of the exec sent as request N), @NOTICE:rN@ (the notice
    added by request N) and @NOTICETIME:rN@ (its last-repeated time)."""

    endpoint: str
    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    mode: str = 'json'  # json | logs | files-read | metrics | exec
    note: str = ''
    settle_checks: bool = False
    exec_opts: dict[str, Any] | None = None
    index: int = -1

    def url_template(self) -> str:
        if not self.query:
            return self.path
        return self.path + '?' + '&'.join(f'{k}={v}' for k, v in self.query)

    def desc(self) -> str:
        s = f'{self.method} {self.url_template()}'
        if self.body is not None:
            text = self.body.decode('utf-8', 'replace')
            if len(text) > 240:
                text = text[:240] + f'...(+{len(text) - 240} chars)'
            s += f' body={text!r}'
        if self.note:
            s += f' [{self.note}]'
        return s

    def to_json(self) -> dict[str, Any]:
        return {
            'index': self.index, 'endpoint': self.endpoint, 'method': self.method,
            'path': self.path, 'query': [list(q) for q in self.query],
            'headers': self.headers,
            'body': None if self.body is None else self.body.decode('utf-8', 'surrogateescape'),
            'mode': self.mode, 'note': self.note, 'settle_checks': self.settle_checks,
            'exec_opts': self.exec_opts,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> 'Req':
        body = d.get('body')
        return cls(
            endpoint=d.get('endpoint') or f"{d['method']} {d['path']}", method=d['method'],
            path=d['path'], query=[tuple(q) for q in d.get('query', [])],
            body=None if body is None else body.encode('utf-8', 'surrogateescape'),
            headers=d.get('headers', {}), mode=d.get('mode', 'json'),
            note=d.get('note', ''), settle_checks=d.get('settle_checks', False),
            exec_opts=d.get('exec_opts'), index=d.get('index', -1))


def jb(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# --------------------------------------------------------------------------------------
# The generator: a model of what it asked for, never of what was answered.
# --------------------------------------------------------------------------------------

# Each service name always has the same command, so a merge never turns a long-running
# service into a quick one. "long": keeps running until stopped.
SERVICES: dict[str, dict[str, Any]] = {
    'sleeper': {'command': 'sleep 1000', 'long': True},
    'quick': {'command': "/bin/sh -c 'echo out; exit 1'", 'long': False},
    'truthy': {'command': 'true', 'long': False},
    'dependent': {'command': 'sleep 1000', 'long': True,
                  'requires': ['sleeper'], 'after': ['sleeper']},
    # Ignores SIGHUP and SIGUSR1 (ignored dispositions survive exec), so that those
    # signals can be sent without making it exit and restart on a timer.
    'trapper': {'command': """/bin/sh -c 'trap "" HUP USR1; exec sleep 1000'""", 'long': True},
    'talker': {'command': "/bin/sh -c 'echo hello from talker; exec sleep 1000'", 'long': True},
}
SERVICE_NAMES = list(SERVICES)

# Check names say whether the check passes ("ok") or fails, which the settle step uses.
CHECKS: dict[str, dict[str, Any]] = {
    'chk-ok': {'exec': {'command': 'true'}},
    'chk-fail': {'exec': {'command': 'false'}},
    'chk-fail-tcp': {'tcp': {'port': 1, 'host': '127.0.0.1'}},
    'chk-fail-http': {'http': {'url': 'http://127.0.0.1:1/health'}},
}
CHECK_NAMES = list(CHECKS)

# Signals that do nothing to a sleep (ignored or harmless by default) ...
HARMLESS_SIGNALS = ['SIGCONT', 'SIGWINCH', 'SIGURG']
# ... and those only `trapper` survives; names a daemon might read as SIGHUP go there too.
TRAPPED_SIGNALS = ['SIGHUP', 'SIGUSR1', 'HUP', 'hup', 'sighup', '1', '10']

CERT_PEM = """-----BEGIN CERTIFICATE-----
MIIBfzCCASWgAwIBAgIUHRR8GrsIuBPaDD96tleEE9qK7gIwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJZGlmZi10ZXN0MCAXDTI2MTIwMzExNTYyMFoYDzIxMjYxMTA5
MTE1NjIwWjAUMRIwEAYDVQQDDAlkaWZmLXRlc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAATihXki6/DNAkRMOfCZchefHacpVL+PVxzxvpFa8IJnvwevgSLpYcQb
UdN6cOC2Fb7yIvjNkVGzIqFzaGEwzUYFo1MwUTAdBgNVHQ4EFgQUo4eBFiXOwiU4
0yq7OPaWkSkI0OwwHwYDVR0jBBgwFoAUo4eBFiXOwiU40yq7OPaWkSkI0OwwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAlhVZ26cpSvCesToGeA6U
imv9pSKHe8O4ETcA2fIHKkECIFna2lrNlOr3k98GiR0XqQ7FiojyaSzXN53H3+ij
zPG0
-----END CERTIFICATE-----
"""
PASSWORD_HASH = '$6$F9cFSVEKyO4gB1Wh$8S1BSKsNkF.jBAixGc4W7l80OpfCNk65LZBDHBng3NAmbcHuMj4RIm7992rrJ8YA.SJ0hvm.vGk2z483am4Ym1'
IDENTITY_NAMES = ['alice', 'bob', 'carol', 'dave']

WEIGHTS: list[tuple[str, int]] = [
    ('layers', 10), ('plan', 3), ('services_get', 6), ('services_post', 10),
    ('service_name', 1), ('changes_list', 5), ('change_get', 4), ('change_abort', 2),
    ('change_wait', 3), ('task_ws', 1), ('checks_get', 4), ('checks_post', 4),
    ('checks_refresh', 2), ('health', 3), ('signals', 3), ('notices_get', 4),
    ('notices_post', 4), ('notice_get', 2), ('identities_get', 2), ('identities_post', 4),
    ('files_get', 4), ('files_post', 6), ('logs', 3), ('exec', 4), ('system_info', 1),
    ('metrics', 2), ('bad_route', 3), ('pairing', 1),
]


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.n = 0
        self.labels: list[str] = []
        self.services: set[str] = set()
        self.checks: set[str] = set()
        self.async_count = 0
        self.exec_reqs: list[int] = []
        self.notice_reqs: list[int] = []
        self.notice_keys: list[str] = []
        self.files = ['existing.txt', 'sub/a.txt', 'sub/b.log']
        self.new_files = 0
        self.new_dirs = 0
        self.identities: set[str] = set()
        self.layer_seq = 0
        names = [name for name, _ in WEIGHTS]
        self.coverage = names[:]
        self.rng.shuffle(self.coverage)

    # ---- helpers ---------------------------------------------------------------------

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def service_names(self, allow_unknown: bool = True) -> list[str]:
        known = sorted(self.services) or ['sleeper']
        k = 1 if self.chance(0.7) else 2
        names = self.rng.sample(known, min(k, len(known)))
        if allow_unknown and self.chance(0.1):
            names = ['ghost']
        return names

    def check_names(self) -> list[str]:
        known = sorted(self.checks) or ['chk-ok']
        names = self.rng.sample(known, min(self.rng.randint(1, 2), len(known)))
        if self.chance(0.1):
            names = ['ghost-check']
        return names

    def change_ref(self, checks_too: bool = True) -> str:
        r = self.rng.random()
        if not checks_too:
            if r < 0.8:
                return f'@CHGNC#{self.rng.randint(1, max(3, self.async_count + 2))}@'
            return self.pick(['99999', 'abc', '0'])
        if r < 0.6:
            return f'@CHG#{self.rng.randint(1, max(3, self.async_count + len(self.checks) + 2))}@'
        if r < 0.8 and self.checks:
            return f'@CHKCHG:{self.pick(sorted(self.checks))}@'
        return self.pick(['99999', 'abc', '0'])

    def bad_body(self, good: dict[str, Any]) -> tuple[bytes, str]:
        enc = jb(good)
        keys = list(good)
        options: list[tuple[bytes, str]] = [
            (b'', 'empty body'),
            (enc[:max(1, len(enc) // 2)], 'truncated JSON'),
            (b'[1, 2]', 'JSON array, not an object'),
            (b'"just a string"', 'JSON string, not an object'),
            (b'42', 'JSON number, not an object'),
            (b'null', 'JSON null'),
            (b'{not json}', 'not JSON'),
            (enc + b' trailing', 'trailing garbage after the object'),
            (jb({**good, 'bogus-field': 1}), 'unknown field'),
        ]
        if keys:
            k = self.pick(keys)
            wrong = self.pick([5, True, {'x': 1}, [1], 'text'])
            if isinstance(good[k], str) and isinstance(wrong, str):
                wrong = 7
            options.append((jb({**good, k: wrong}), f'wrong type for "{k}"'))
            options.append((jb({kk: v for kk, v in good.items() if kk != k}), f'missing "{k}"'))
        return self.pick(options)

    # ---- the sequence ----------------------------------------------------------------

    def next(self) -> Req:
        i = self.n
        self.n += 1
        if i == 0:
            req = self.base_layer()
        else:
            if self.coverage:
                name = self.coverage.pop(0)
            else:
                total = sum(w for _, w in WEIGHTS)
                r = self.rng.uniform(0, total)
                for name, w in WEIGHTS:
                    r -= w
                    if r <= 0:
                        break
            req = getattr(self, 'gen_' + name)()
        req.index = i
        return req

    # ---- layers ----------------------------------------------------------------------

    def service_spec(self, name: str, merge_ok: bool = True) -> dict[str, Any]:
        cat = SERVICES[name]
        override = 'merge' if self.chance(0.7) else 'replace'
        spec: dict[str, Any] = {'override': override}
        if override == 'replace' or name not in self.services or not merge_ok or self.chance(0.6):
            spec['command'] = cat['command']
        if self.chance(0.4):
            spec['summary'] = f'{name} service'
        if self.chance(0.6):
            spec['startup'] = self.pick(['enabled', 'disabled'])
        for rel in ('requires', 'after'):
            if rel in cat and (override == 'replace' or self.chance(0.5)):
                spec[rel] = cat[rel]
        if self.chance(0.3):
            spec['environment'] = {'DIFF_VAR': f'{name}-{self.layer_seq}', 'OTHER': 'x y'}
        if self.chance(0.15):
            spec['working-dir'] = '@SCRATCH@'
        if not cat['long']:
            # A quick service that is restarted exits again and again on a backoff timer,
            # and its state, start count and output lines at any moment are a matter of
            # timing; left down after its first exit, it answers the same on both daemons.
            spec['on-success'] = 'ignore'
            spec['on-failure'] = 'ignore'
        elif self.chance(0.3):
            spec[self.pick(['on-success', 'on-failure'])] = self.pick(
                ['restart', 'ignore', 'shutdown'])
        if self.chance(0.25):
            spec['backoff-delay'] = self.pick(['500ms', '1s', '2s'])
        if self.chance(0.15):
            spec['backoff-factor'] = self.pick([1.5, 2, 1])
        if self.chance(0.15):
            spec['backoff-limit'] = self.pick(['10s', '1m'])
        if self.chance(0.1):
            spec['kill-delay'] = self.pick(['2s', '500ms'])
        if self.chance(0.1) and self.checks:
            spec['on-check-failure'] = {self.pick(sorted(self.checks)): 'ignore'}
        if self.chance(0.05):
            spec['description'] = f'The {name} service,\nover two lines.'
        return spec

    def check_spec(self, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = {'override': 'merge' if self.chance(0.6) else 'replace'}
        if self.chance(0.6):
            spec['level'] = self.pick(['alive', 'ready'])
        if self.chance(0.3):
            spec['startup'] = self.pick(['enabled', 'disabled'])
        spec['period'] = self.pick(['1s', '2s', '3s', '1500ms'])
        if self.chance(0.5):
            spec['timeout'] = self.pick(['500ms', '900ms'])
        spec['threshold'] = self.pick([1, 2, 3])
        spec.update(json.loads(json.dumps(CHECKS[name])))
        return spec

    def valid_layer(self) -> dict[str, Any]:
        layer: dict[str, Any] = {}
        if self.chance(0.3):
            layer['summary'] = f'layer {self.layer_seq}'
        if self.chance(0.1):
            layer['description'] = 'a layer from the differential test'
        names = self.rng.sample(SERVICE_NAMES, self.rng.randint(0, 3))
        if names:
            layer['services'] = {n: self.service_spec(n) for n in names}
        cnames = self.rng.sample(CHECK_NAMES, self.rng.randint(0, 2))
        if cnames:
            layer['checks'] = {n: self.check_spec(n) for n in cnames}
        if self.chance(0.08):
            layer['log-targets'] = {'tgt': {
                'override': 'merge', 'type': 'loki',
                'location': 'http://127.0.0.1:1/loki/api/v1/push', 'services': ['all']}}
        return layer

    def base_layer(self) -> Req:
        layer = {
            'summary': 'base layer',
            'services': {n: {**self.service_spec(n, merge_ok=False), 'override': 'replace'}
                         for n in SERVICE_NAMES},
            'checks': {n: self.check_spec(n) for n in CHECK_NAMES},
        }
        for n in SERVICE_NAMES:
            layer['services'][n]['command'] = SERVICES[n]['command']
        self.labels.append('base')
        self.services.update(SERVICE_NAMES)
        self.checks.update(CHECK_NAMES)
        body = {'action': 'add', 'label': 'base', 'combine': False, 'format': 'yaml',
                'layer': to_yaml(layer)}
        return Req('POST /v1/layers', 'POST', '/v1/layers', body=jb(body),
                   note='base layer', settle_checks=True)

    def invalid_layer(self) -> tuple[str, str]:
        s = self.pick(SERVICE_NAMES)
        cmd = SERVICES[s]['command']
        variants: list[tuple[str, str]] = [
            ('services:\n  sleeper: [unclosed\n', 'YAML syntax error'),
            (to_yaml({'services': {s: {'override': 'merge', 'command': cmd}}}) + 'frobnicate: {}\n',
             'unknown top-level field'),
            (to_yaml({'services': {s: {'override': 'merge', 'command': cmd, 'colour': 'blue'}}}),
             'unknown service field'),
            (to_yaml({'services': {s: {'override': 'merge', 'command': cmd,
                                       'backoff-delay': '1x'}}}), 'bad duration'),
            (to_yaml({'services': {s: {'override': 'merge', 'kill-delay': 'forever'}}}),
             'bad duration'),
            (to_yaml({'checks': {'chk-ok': {'override': 'merge', 'period': 'soon',
                                            'exec': {'command': 'true'}}}}), 'bad check period'),
            (to_yaml({'services': {s: {'override': 'sideways', 'command': cmd}}}), 'bad override'),
            (to_yaml({'services': {s: {'command': cmd}}}), 'missing override'),
            (to_yaml({'services': {'nocmd': {'override': 'merge', 'summary': 'no command'}}}),
             'service without command'),
            (to_yaml({'services': {'pebble': {'override': 'replace', 'command': 'sleep 1'}}}),
             'reserved service name'),
            (to_yaml({'services': {'-dash': {'override': 'replace', 'command': 'sleep 1'}}}),
             'service name starting with a dash'),
            ('services:\n  sleeper: null\n', 'null service'),
            (to_yaml({'checks': {'chk-two': {'override': 'replace', 'exec': {'command': 'true'},
                                             'tcp': {'port': 1}}}}), 'check with two types'),
            (to_yaml({'checks': {'chk-none': {'override': 'replace', 'period': '1s'}}}),
             'check without a type'),
            (to_yaml({'checks': {'chk-ok': {'override': 'merge', 'period': '0s',
                                            'exec': {'command': 'true'}}}}), 'zero period'),
            (to_yaml({'services': {s: {'override': 'merge', 'command': cmd,
                                       'backoff-factor': 0.5}}}), 'backoff-factor below 1'),
            (to_yaml({'services': {s: {'override': 'merge', 'command': cmd,
                                       'on-failure': 'explode'}}}), 'bad on-failure action'),
            (to_yaml({'checks': {'chk-ok': {'override': 'merge', 'level': 'medium',
                                            'exec': {'command': 'true'}}}}), 'bad check level'),
            (to_yaml({'checks': {'chk-ok': {'override': 'merge', 'startup': 'sometimes',
                                            'exec': {'command': 'true'}}}}), 'bad check startup'),
            (to_yaml({'services': {'sleeper': {'override': 'merge', 'after': ['ghost']}}}),
             'after an unknown service'),
            (to_yaml({'services': {'sleeper': {'override': 'merge', 'after': ['talker']},
                                   'talker': {'override': 'merge', 'after': ['sleeper']}}}),
             'before/after loop'),
            ('services: 5\n', 'services not a map'),
            ('services:\n  sleeper:\n    override: merge\n  sleeper:\n    override: merge\n',
             'duplicate key'),
            (to_yaml({'checks': {'chk-ctx': {'override': 'replace', 'period': '2s',
                                             'exec': {'command': 'true', 'service-context': 'ghost'}}}}),
             'check context names an unknown service'),
            (to_yaml({'log-targets': {'tgt': {'override': 'merge', 'type': 'carrier-pigeon',
                                              'location': 'x'}}}), 'bad log target type'),
            (to_yaml({'checks': {'chk-ok': {'override': 'merge', 'threshold': 'many',
                                            'exec': {'command': 'true'}}}}), 'threshold not a number'),
            (to_yaml({'services': {'broken': {'override': 'replace',
                                              'command': "sleep 'unterminated"}}}), 'bad command quoting'),
            (to_yaml({'services': {s: {'override': 'merge', 'startup': 'sometimes',
                                       'command': cmd}}}), 'bad startup value'),
            ('\tservices: {}\n', 'tab indentation'),
        ]
        return self.pick(variants)

    def gen_layers(self) -> Req:
        self.layer_seq += 1
        if self.labels and self.chance(0.4):
            label = self.pick(self.labels)
        else:
            label = f'layer-{self.layer_seq}'
        combine = self.chance(0.6)
        note = ''
        valid = self.chance(0.72)
        if valid:
            layer = self.valid_layer()
            text = to_yaml(layer) if layer else ''
            note = 'valid layer'
            if combine or label not in self.labels:
                if label not in self.labels:
                    self.labels.append(label)
                self.services.update(layer.get('services', {}))
                self.checks.update(layer.get('checks', {}))
            else:
                note = 'existing label without combine'
        else:
            text, note = self.invalid_layer()
        body: dict[str, Any] = {'action': 'add', 'label': label, 'combine': combine,
                                'format': 'yaml', 'layer': text}
        if self.chance(0.05):
            body['inner'] = True
            note += ', inner'
        raw = jb(body)
        r = self.rng.random()
        if r < 0.04:
            raw, note = jb({**body, 'action': 'remove'}), 'bad action'
        elif r < 0.07:
            raw, note = jb({**body, 'format': 'json'}), 'bad format'
        elif r < 0.09:
            raw, note = jb({**body, 'label': ''}), 'empty label'
        elif r < 0.11:
            raw, note = jb({**body, 'label': 'pebble-reserved'}), 'reserved label'
        elif r < 0.13:
            raw, note = jb({**body, 'combine': 'yes'}), 'combine not a bool'
        elif r < 0.15:
            raw, note = jb({**body, 'layer': 5}), 'layer not a string'
        elif r < 0.19:
            raw, note = self.bad_body(body)
        return Req('POST /v1/layers', 'POST', '/v1/layers', body=raw, note=note,
                   settle_checks=True)

    def gen_plan(self) -> Req:
        fmt = self.pick(['yaml'] * 6 + ['json', '', None])
        q = [] if fmt is None else [('format', fmt)]
        return Req('GET /v1/plan', 'GET', '/v1/plan', query=q)

    # ---- services --------------------------------------------------------------------

    def gen_services_get(self) -> Req:
        r = self.rng.random()
        if r < 0.4:
            q = []
        elif r < 0.75:
            q = [('names', ','.join(self.service_names()))]
        elif r < 0.85:
            q = [('names', 'sleeper'), ('names', 'talker')]
        elif r < 0.92:
            q = [('names', 'sleeper,,talker')]
        else:
            q = [('names', '')]
        return Req('GET /v1/services', 'GET', '/v1/services', query=q)

    def gen_services_post(self) -> Req:
        action = self.pick(['start', 'start', 'stop', 'stop', 'restart', 'autostart',
                            'replan', 'bogus'])
        body: dict[str, Any] = {'action': action}
        if action in ('start', 'stop', 'restart', 'bogus'):
            body['services'] = self.service_names()
        elif self.chance(0.1):
            body['services'] = ['sleeper']
        note = ''
        r = self.rng.random()
        if r < 0.06:
            body = {'action': action}
            note = 'no services'
        elif r < 0.10:
            body = {'action': action, 'services': []}
            note = 'empty services'
        raw = jb(body)
        if self.chance(0.12):
            raw, note = self.bad_body({'action': action, 'services': body.get('services', ['sleeper'])})
        else:
            self.async_count += 1
        return Req('POST /v1/services', 'POST', '/v1/services', body=raw, note=note,
                   settle_checks=action == 'replan')

    def gen_service_name(self) -> Req:
        name = self.pick(['sleeper', 'ghost'])
        if self.chance(0.5):
            return Req('GET /v1/services/{name}', 'GET', f'/v1/services/{name}')
        return Req('POST /v1/services/{name}', 'POST', f'/v1/services/{name}',
                   body=jb({'action': 'start'}))

    # ---- changes ---------------------------------------------------------------------

    def gen_changes_list(self) -> Req:
        q = []
        sel = self.pick(['all', 'all', 'in-progress', 'ready', None, 'bogus'])
        if sel is not None:
            q.append(('select', sel))
        if self.chance(0.35):
            q.append(('for', self.pick(sorted(self.services) + ['ghost'])))
        return Req('GET /v1/changes', 'GET', '/v1/changes', query=q)

    def gen_change_get(self) -> Req:
        ref = self.change_ref()
        return Req('GET /v1/changes/{id}', 'GET', f'/v1/changes/{ref}')

    def gen_change_abort(self) -> Req:
        # Not a check's change: Pebble v1.32.1 leaves an aborted check change in Abort
        # status, and the next stop of that check (POST /v1/checks, a layer changing it)
        # aborts it again and panics ("change N unexpectedly became unready"), which ends
        # the reference daemon and the run. README.md has the reproduction.
        ref = self.change_ref(checks_too=False)
        body: dict[str, Any] = {'action': 'abort'}
        note = ''
        r = self.rng.random()
        if r < 0.15:
            body, note = {'action': 'bogus'}, 'bad action'
        raw = jb(body)
        if r > 0.85:
            raw, note = self.bad_body(body)
        return Req('POST /v1/changes/{id}', 'POST', f'/v1/changes/{ref}', body=raw, note=note,
                   settle_checks=True)

    def gen_change_wait(self) -> Req:
        ref = self.change_ref()
        timeout = self.pick(['1ms', '100ms', '300ms', '1s', 'soon', '5'])
        return Req('GET /v1/changes/{id}/wait', 'GET', f'/v1/changes/{ref}/wait',
                   query=[('timeout', timeout)])

    def gen_task_ws(self) -> Req:
        r = self.rng.random()
        if r < 0.4 and self.exec_reqs:
            task = f'@EXECTASK:r{self.pick(self.exec_reqs)}@'
        elif r < 0.7:
            task = f'@TASK#{self.rng.randint(1, max(3, self.async_count))}@'
        else:
            task = '99999'
        ws = self.pick(['control', 'stdio', 'stderr', 'bogus'])
        return Req('GET /v1/tasks/{id}/websocket/{ws}', 'GET', f'/v1/tasks/{task}/websocket/{ws}')

    # ---- checks and health -----------------------------------------------------------

    def gen_checks_get(self) -> Req:
        q = []
        if self.chance(0.4):
            q.append(('level', self.pick(['alive', 'ready', 'bogus'])))
        if self.chance(0.4):
            q.append(('names', ','.join(self.check_names())))
        return Req('GET /v1/checks', 'GET', '/v1/checks', query=q)

    def gen_checks_post(self) -> Req:
        action = self.pick(['start', 'stop', 'stop', 'start', 'bogus'])
        body: dict[str, Any] = {'action': action, 'checks': self.check_names()}
        note = ''
        if self.chance(0.08):
            body = {'action': action}
            note = 'no checks'
        raw = jb(body)
        if self.chance(0.12):
            raw, note = self.bad_body(body)
        return Req('POST /v1/checks', 'POST', '/v1/checks', body=raw, note=note,
                   settle_checks=True)

    def gen_checks_refresh(self) -> Req:
        name = self.pick(sorted(self.checks) + ['ghost-check'])
        body: dict[str, Any] = {'name': name}
        raw, note = jb(body), ''
        r = self.rng.random()
        if r < 0.1:
            raw, note = jb({}), 'no name'
        elif r < 0.2:
            raw, note = self.bad_body(body)
        return Req('POST /v1/checks/refresh', 'POST', '/v1/checks/refresh', body=raw, note=note,
                   settle_checks=True)

    def gen_health(self) -> Req:
        q = []
        if self.chance(0.5):
            q.append(('level', self.pick(['alive', 'ready', 'bogus'])))
        if self.chance(0.4):
            q.append(('names', ','.join(self.check_names())))
        return Req('GET /v1/health', 'GET', '/v1/health', query=q)

    # ---- signals ---------------------------------------------------------------------

    def gen_signals(self) -> Req:
        r = self.rng.random()
        if r < 0.5:
            body: dict[str, Any] = {'signal': self.pick(HARMLESS_SIGNALS),
                                    'services': self.service_names()}
        elif r < 0.75:
            body = {'signal': self.pick(TRAPPED_SIGNALS), 'services': ['trapper']}
        elif r < 0.85:
            body = {'signal': self.pick(['SIGFOO', '', 'SIG', 'KILLME']),
                    'services': self.service_names()}
        else:
            body = {'signal': 'SIGCONT', 'services': []}
        raw, note = jb(body), ''
        if self.chance(0.12):
            raw, note = self.bad_body(body)
        return Req('POST /v1/signals', 'POST', '/v1/signals', body=raw, note=note)

    # ---- notices ---------------------------------------------------------------------

    def gen_notices_get(self) -> Req:
        options: list[list[tuple[str, str]]] = [
            [], [('types', 'custom')], [('types', 'change-update')], [('types', 'bogus')],
            [('types', 'custom,warning')], [('types', 'custom'), ('types', 'change-update')],
            [('after', '2000-01-01T00:00:00Z')], [('after', '3000-01-01T00:00:00Z')],
            [('after', 'yesterday')],
            [('types', 'custom'), ('keys', 'example.com/none'), ('timeout', '10ms')],
            [('timeout', 'soon')], [('user-id', '0')], [('user-id', 'abc')],
            [('user-id', '1,2')], [('users', 'all')], [('users', 'some')],
            [('users', 'all'), ('user-id', '0')], [('keys', f'@CHG#{self.rng.randint(1, 4)}@')],
            [('types', 'custom'), ('timeout', '-1s')],
        ]
        if self.notice_keys:
            options.append([('keys', self.pick(self.notice_keys))])
            options.append([('types', 'custom'), ('keys', ','.join(self.notice_keys[:3]))])
        if self.notice_reqs:
            options.append([('after', f'@NOTICETIME:r{self.pick(self.notice_reqs)}@')])
        return Req('GET /v1/notices', 'GET', '/v1/notices', query=self.pick(options))

    def gen_notices_post(self) -> Req:
        if self.notice_keys and self.chance(0.3):
            key = self.pick(self.notice_keys)
        else:
            key = f'example.com/diff/k{len(self.notice_keys) + 1}'
        body: dict[str, Any] = {'action': 'add', 'type': 'custom', 'key': key}
        if self.chance(0.5):
            body['data'] = {'reason': f'r{self.n}', 'other': 'value'}
        if self.chance(0.2):
            body['repeat-after'] = self.pick(['1h', '1ms'])
        valid = True
        note = ''
        r = self.rng.random()
        variants = [
            ({**body, 'key': 'not-a-key'}, 'key not in example.com/path form'),
            ({**body, 'key': 'Example.com/Upper'}, 'upper-case key'),
            ({**body, 'key': 'example.com/' + 'a' * 260}, 'key too long'),
            ({**body, 'type': 'warning'}, 'type warning'),
            ({k: v for k, v in body.items() if k != 'type'}, 'no type'),
            ({**body, 'action': 'remove'}, 'bad action'),
            ({**body, 'data': {'n': 1}}, 'data values not strings'),
            ({**body, 'data': [1, 2]}, 'data not an object'),
            ({**body, 'data': {'big': 'x' * 5000}}, 'data too large'),
            ({**body, 'repeat-after': 'soon'}, 'bad repeat-after'),
        ]
        if r < 0.3:
            body, note = self.pick(variants)
            valid = False
        raw = jb(body)
        if valid and self.chance(0.1):
            raw, note = self.bad_body(body)
            valid = False
        if valid:
            self.notice_reqs.append(self.n - 1)
            if key not in self.notice_keys:
                self.notice_keys.append(key)
        return Req('POST /v1/notices', 'POST', '/v1/notices', body=raw, note=note)

    def gen_notice_get(self) -> Req:
        if self.notice_reqs and self.chance(0.7):
            ref = f'@NOTICE:r{self.pick(self.notice_reqs)}@'
        else:
            # (not a small literal number: Pebble numbers notices recorded in the same
            # instant in map order, so "1" is not the same notice on both daemons)
            ref = self.pick(['99999', 'abc'])
        return Req('GET /v1/notices/{id}', 'GET', f'/v1/notices/{ref}')

    # ---- identities ------------------------------------------------------------------

    def identity(self, name: str) -> dict[str, Any]:
        access = self.pick(['read', 'metrics', 'untrusted', 'admin'])
        kind = self.pick(['local', 'local', 'basic', 'cert', 'local+basic'])
        ident: dict[str, Any] = {'access': access}
        if 'local' in kind:
            ident['local'] = {'user-id': 1001 + IDENTITY_NAMES.index(name)}
        if 'basic' in kind:
            ident['basic'] = {'password': PASSWORD_HASH}
        if kind == 'cert':
            ident['cert'] = {'pem': CERT_PEM}
        return ident

    def gen_identities_get(self) -> Req:
        return Req('GET /v1/identities', 'GET', '/v1/identities')

    def gen_identities_post(self) -> Req:
        r = self.rng.random()
        known = sorted(self.identities)
        note = ''
        if r < 0.3 or not known:
            fresh = [n for n in IDENTITY_NAMES if n not in self.identities]
            if fresh:
                names = self.rng.sample(fresh, min(len(fresh), self.rng.randint(1, 2)))
                body: dict[str, Any] = {'action': 'add',
                                        'identities': {n: self.identity(n) for n in names}}
                self.identities.update(names)
                note = 'add new'
            else:
                body = {'action': 'add', 'identities': {known[0]: self.identity(known[0])}}
                note = 'add existing'
        elif r < 0.45:
            n = self.pick(known)
            body = {'action': 'update', 'identities': {n: self.identity(n)}}
            note = 'update existing'
        elif r < 0.55:
            n = self.pick(known)
            body = {'action': 'replace', 'identities': {n: self.identity(n)}}
            if self.chance(0.5):
                gone = self.pick(known)
                body['identities'][gone] = None
                self.identities.discard(gone)
            note = 'replace'
        elif r < 0.65:
            n = self.pick(known)
            body = {'action': 'remove', 'identities': {n: None}}
            self.identities.discard(n)
            note = 'remove existing'
        else:
            local = {'access': 'read', 'local': {'user-id': 1099}}
            body, note = self.pick([
                ({'action': 'remove', 'identities': {'nobody-here': None}}, 'remove missing'),
                ({'action': 'update', 'identities': {'nobody-here': local}}, 'update missing'),
                ({'action': 'remove', 'identities': {'alice': local}}, 'remove with a value'),
                ({'action': 'add', 'identities': {'erin': None}}, 'add null'),
                ({'action': 'delete', 'identities': {'erin': local}}, 'bad action'),
                ({'action': 'add', 'identities': {'1bad': local}}, 'bad name'),
                ({'action': 'add', 'identities': {'erin': {'access': 'superuser',
                                                           'local': {'user-id': 1099}}}}, 'bad access'),
                ({'action': 'add', 'identities': {'erin': {'local': {'user-id': 1099}}}}, 'no access'),
                ({'action': 'add', 'identities': {'erin': {'access': 'read'}}}, 'no type'),
                ({'action': 'add', 'identities': {'erin': {'access': 'read', 'local': {}}}},
                 'local without user-id'),
                ({'action': 'add', 'identities': {'erin': {'access': 'read',
                                                           'local': {'user-id': -1}}}}, 'negative uid'),
                ({'action': 'add', 'identities': {'erin': {'access': 'read',
                                                           'cert': {'pem': 'not a pem'}}}}, 'bad PEM'),
                ({'action': 'add', 'identities': {'erin': {'access': 'read',
                                                           'basic': {'password': ''}}}}, 'empty password'),
                ({'action': 'add', 'identities': ['alice']}, 'identities not an object'),
                ({'action': 'add'}, 'no identities'),
            ])
        raw = jb(body)
        if self.chance(0.08):
            raw, note = self.bad_body({'action': 'add', 'identities': {}})
        return Req('POST /v1/identities', 'POST', '/v1/identities', body=raw, note=note)

    # ---- files -----------------------------------------------------------------------

    def some_path(self) -> str:
        r = self.rng.random()
        if r < 0.55:
            return '@SCRATCH@/' + self.pick(self.files)
        if r < 0.7:
            return '@SCRATCH@/' + self.pick(['sub', '', 'sub/nested'])
        if r < 0.85:
            return '@SCRATCH@/missing/' + self.pick(['x.txt', 'y'])
        return self.pick(['relative/path.txt', '/etc/hostname', '@SCRATCH@/sub/../existing.txt'])

    def gen_files_get(self) -> Req:
        if self.chance(0.5):
            q = [('action', 'read'), ('path', self.some_path())]
            if self.chance(0.3):
                q.append(('path', self.some_path()))
            headers = {'Accept': 'multipart/form-data'}
            note = ''
            r = self.rng.random()
            if r < 0.1:
                headers, note = {}, 'no Accept header'
            elif r < 0.15:
                q, note = [('action', 'read')], 'no path'
            return Req('GET /v1/files', 'GET', '/v1/files', query=q, headers=headers,
                       mode='files-read', note=note)
        q = [('action', 'list'), ('path', self.pick(['@SCRATCH@', '@SCRATCH@/sub',
                                                     self.some_path()]))]
        if self.chance(0.3):
            q.append(('pattern', self.pick(['*.txt', '*', '[', 'a*', 'nomatch'])))
        if self.chance(0.25):
            q.append(('itself', self.pick(['true', 'false', 'maybe'])))
        r = self.rng.random()
        if r < 0.07:
            q = [('action', 'list')]
        elif r < 0.12:
            q = [('action', self.pick(['bogus', '']))]
        elif r < 0.15:
            q = []
        return Req('GET /v1/files', 'GET', '/v1/files', query=q)

    def boundary(self) -> tuple[str, str, str]:
        """(boundary used in the body, Content-Type header, note)."""
        r = self.rng.random()
        token = ''.join(self.rng.choice('0123456789abcdef') for _ in range(32))
        if r < 0.55:
            return token, f'multipart/form-data; boundary={token}', 'boundary 32 hex'
        if r < 0.65:
            b = 'short' + token[:5]
            return b, f'multipart/form-data; boundary={b}', 'boundary shorter than 32'
        if r < 0.72:
            b = "'()+_,-./:=?" + token
            return b, f'multipart/form-data; boundary="{b}"', 'quoted boundary with specials'
        if r < 0.77:
            b = "'()+_,-./:=?" + token
            return b, f'multipart/form-data; boundary={b}', 'unquoted boundary with specials'
        if r < 0.82:
            b = 'with spaces ' + token
            return b, f'multipart/form-data; boundary="{b}"', 'boundary with spaces'
        if r < 0.87:
            b = (token * 3)[:70]
            return b, f'multipart/form-data; boundary={b}', 'boundary of 70 chars'
        if r < 0.91:
            b = (token * 3)[:80]
            return b, f'multipart/form-data; boundary={b}', 'boundary of 80 chars'
        if r < 0.95:
            return token, 'multipart/form-data', 'no boundary parameter'
        return token, f'multipart/mixed; boundary={token}', 'multipart/mixed'

    def gen_files_post(self) -> Req:
        r = self.rng.random()
        if r < 0.5:
            return self.files_write()
        if r < 0.72:
            self.new_dirs += 1
            d: dict[str, Any] = {'path': f'@SCRATCH@/dir{self.new_dirs}'}
            note = 'make a new dir'
            v = self.rng.random()
            if v < 0.2:
                d = {'path': f'@SCRATCH@/deep{self.new_dirs}/a/b', 'make-parents': True}
                note = 'make parents'
            elif v < 0.3:
                d = {'path': f'@SCRATCH@/deep{self.new_dirs}x/a/b'}
                note = 'missing parents'
            elif v < 0.4:
                d = {'path': '@SCRATCH@/sub'}
                note = 'existing dir'
            elif v < 0.5:
                d = {'path': 'relative/dir'}
                note = 'relative path'
            elif v < 0.6:
                d['permissions'] = self.pick(['700', '99', 'rwx', '0755'])
                note = 'permissions ' + d['permissions']
            elif v < 0.65:
                d['user'] = 'nosuchuser'
                note = 'unknown user'
            elif v < 0.7:
                d = {'path': '@SCRATCH@/existing.txt'}
                note = 'a file exists there'
            body = {'action': 'make-dirs', 'dirs': [d]}
            raw = jb(body)
            if self.chance(0.1):
                raw, note = self.bad_body(body)
            return Req('POST /v1/files', 'POST', '/v1/files', body=raw,
                       headers={'Content-Type': 'application/json'}, note=note)
        if r < 0.9:
            v = self.rng.random()
            if v < 0.3 and len(self.files) > 3:
                f = self.files.pop(self.rng.randrange(3, len(self.files)))
                p, note = {'path': '@SCRATCH@/' + f}, 'remove a written file'
            elif v < 0.45:
                p, note = {'path': '@SCRATCH@/missing.txt'}, 'remove missing'
            elif v < 0.6:
                p, note = {'path': '@SCRATCH@/sub'}, 'non-empty dir, not recursive'
            elif v < 0.7:
                p, note = {'path': f'@SCRATCH@/dir{self.new_dirs}', 'recursive': True}, 'recursive'
            elif v < 0.8:
                p, note = {'path': 'relative.txt'}, 'relative path'
            else:
                p, note = {'path': '@SCRATCH@/missing-dir/x', 'recursive': True}, 'recursive missing'
            body = {'action': 'remove', 'paths': [p]}
            raw = jb(body)
            if self.chance(0.1):
                raw, note = self.bad_body(body)
            return Req('POST /v1/files', 'POST', '/v1/files', body=raw,
                       headers={'Content-Type': 'application/json'}, note=note)
        body, note, ctype = self.pick([
            ({'action': 'write', 'files': []}, 'write as JSON', 'application/json'),
            ({'action': 'bogus'}, 'bad action', 'application/json'),
            ({'action': 'remove', 'paths': []}, 'text/plain', 'text/plain'),
            ({'action': 'remove', 'paths': []}, 'no content type', None),
            ({'action': 'remove', 'paths': []}, 'unparsable content type', 'application/json; ;='),
        ])
        headers = {} if ctype is None else {'Content-Type': ctype}
        return Req('POST /v1/files', 'POST', '/v1/files', body=jb(body), headers=headers,
                   note=note)

    def files_write(self) -> Req:
        boundary, ctype, note = self.boundary()
        self.new_files += 1
        name = f'written{self.new_files}.txt'
        item: dict[str, Any] = {'path': f'@SCRATCH@/{name}'}
        content = f'content {self.new_files}\nline two\n'.encode()
        v = self.rng.random()
        extra = ''
        parts_kind = 'normal'
        if v < 0.15:
            item = {'path': f'@SCRATCH@/newdir{self.new_files}/{name}', 'make-dirs': True}
            extra = 'make-dirs'
        elif v < 0.22:
            item = {'path': f'@SCRATCH@/nodir{self.new_files}/{name}'}
            extra = 'missing parent'
        elif v < 0.32:
            item['permissions'] = self.pick(['600', '755', '9999', 'abc'])
            extra = 'permissions ' + item['permissions']
        elif v < 0.36:
            item = {'path': 'relative.txt'}
            extra = 'relative path'
        elif v < 0.40:
            item['user'] = 'nosuchuser'
            item['group'] = 'nosuchgroup'
            extra = 'unknown user'
        elif v < 0.45:
            parts_kind, extra = 'no file part', 'no file part'
        elif v < 0.50:
            parts_kind, extra = 'unlisted file', 'file part without metadata'
        elif v < 0.54:
            parts_kind, extra = 'wrong metadata name', 'metadata named "req"'
        elif v < 0.58:
            parts_kind, extra = 'wrong action', 'metadata action "remove"'
        elif v < 0.61:
            parts_kind, extra = 'no files', 'metadata with no files'
        elif v < 0.64:
            parts_kind, extra = 'truncated', 'no closing boundary'
        elif v < 0.67:
            parts_kind, extra = 'bad json', 'metadata not JSON'
        elif v < 0.70:
            parts_kind, extra = 'empty', 'empty body'
        elif v < 0.74:
            item = {'path': '@SCRATCH@/existing.txt'}
            extra = 'overwrite existing'
        elif v < 0.78:
            item = {'path': '@SCRATCH@/sub'}
            extra = 'a directory is there'
        meta = {'action': 'write', 'files': [item]}
        meta_hdr = [('Content-Disposition', 'form-data; name="request"'),
                    ('Content-Type', 'application/json')]
        file_hdr = [('Content-Disposition', f'form-data; name="files"; filename="{item["path"]}"')]
        parts = [(meta_hdr, jb(meta)), (file_hdr, content)]
        close = True
        if parts_kind == 'no file part':
            parts = parts[:1]
        elif parts_kind == 'unlisted file':
            parts.append(([('Content-Disposition',
                            'form-data; name="files"; filename="@SCRATCH@/unlisted.txt"')], b'x'))
        elif parts_kind == 'wrong metadata name':
            parts[0] = ([('Content-Disposition', 'form-data; name="req"')], jb(meta))
        elif parts_kind == 'wrong action':
            parts[0] = (meta_hdr, jb({**meta, 'action': 'remove'}))
        elif parts_kind == 'no files':
            parts = [(meta_hdr, jb({'action': 'write', 'files': []}))]
        elif parts_kind == 'truncated':
            close = False
        elif parts_kind == 'bad json':
            parts[0] = (meta_hdr, b'{"action": "wri')
        raw = b'' if parts_kind == 'empty' else multipart_body(boundary, parts, close)
        if parts_kind == 'normal' and item['path'].startswith('@SCRATCH@/') and not extra:
            self.files.append(item['path'][len('@SCRATCH@/'):])
        return Req('POST /v1/files', 'POST', '/v1/files', body=raw,
                   headers={'Content-Type': ctype}, note=f'multipart write, {note}'
                   + (f', {extra}' if extra else ''))

    # ---- logs, exec, the rest --------------------------------------------------------

    def gen_logs(self) -> Req:
        q = []
        n = self.pick([None, '0', '1', '3', '-1', '30', 'abc', '-2'])
        if n is not None:
            q.append(('n', n))
        s = self.pick([None, None, 'talker', 'quick', 'talker,quick', 'ghost', 'sleeper'])
        if s is not None:
            q.append(('services', s))
        if self.chance(0.1):
            q.append(('follow', self.pick(['false', 'maybe'])))
        return Req('GET /v1/logs', 'GET', '/v1/logs', query=q, mode='logs')

    def gen_exec(self) -> Req:
        split = self.chance(0.3)
        body: dict[str, Any]
        body, note = self.pick([
            ({'command': ['echo', 'hi']}, 'echo'),
            ({'command': ['echo', 'hi']}, 'echo'),
            ({'command': ['/bin/sh', '-c', 'echo out; echo err >&2; exit 3']}, 'exit 3 with stderr'),
            ({'command': ['pwd'], 'working-dir': '@SCRATCH@'}, 'working-dir'),
            ({'command': ['pwd']}, 'default working-dir'),
            ({'command': ['printenv', 'DIFF_X', 'LANG'], 'environment': {'DIFF_X': 'from exec'}},
             'environment'),
            ({'command': ['cat']}, 'stdin closed'),
            ({'command': ['true']}, 'true'),
            ({'command': ['false']}, 'false'),
            ({'command': ['sleep', '5'], 'timeout': '300ms'}, 'timeout'),
            ({'command': ['ls', '@SCRATCH@']}, 'ls scratch'),
            ({'command': ['id', '-u'], 'user-id': 0, 'group-id': 0}, 'as uid 0'),
            ({'command': ['printenv', 'DIFF_VAR'], 'service-context': 'talker'}, 'service context'),
            ({'command': ['echo', 'x'], 'service-context': 'ghost'}, 'unknown service context'),
            ({'command': ['/nonexistent/cmd']}, 'missing executable'),
            ({'command': ['echo', 'x'], 'user': 'nosuchuser'}, 'unknown user'),
            ({'command': ['echo', 'x'], 'interactive': True}, 'interactive without terminal'),
            ({'command': ['echo', 'tty'], 'terminal': True, 'width': 80, 'height': 24},
             'terminal'),
            ({'command': []}, 'empty command'),
            ({'command': 'echo hi'}, 'command not a list'),
            ({}, 'no command'),
            ({'command': ['echo', 'x'], 'timeout': 'soon'}, 'bad timeout'),
            ({'command': ['echo', 'x'], 'user-id': 0}, 'user-id without group-id'),
        ])
        body = dict(body)
        if split:
            body['split-stderr'] = True
            note += ', split stderr'
        connect = not self.chance(0.04)
        if not connect:
            note += ', websockets never connected'
        raw = jb(body)
        if self.chance(0.06):
            raw, note = self.bad_body({'command': ['echo', 'x']})
        self.exec_reqs.append(self.n - 1)
        self.async_count += 1
        return Req('POST /v1/exec', 'POST', '/v1/exec', body=raw, note=note, mode='exec',
                   exec_opts={'connect': connect, 'split': split})

    def gen_system_info(self) -> Req:
        return Req('GET /v1/system-info', 'GET', '/v1/system-info')

    def gen_metrics(self) -> Req:
        return Req('GET /v1/metrics', 'GET', '/v1/metrics', mode='metrics')

    def gen_pairing(self) -> Req:
        body = self.pick([b'{}', b'', b'{"action": "pair"}'])
        if self.chance(0.3):
            return Req('GET /v1/pairing', 'GET', '/v1/pairing')
        return Req('POST /v1/pairing', 'POST', '/v1/pairing', body=body)

    def gen_bad_route(self) -> Req:
        method, path = self.pick([
            ('GET', '/v1/nope'), ('GET', '/v2/services'), ('GET', '/'), ('GET', '/v1'),
            ('GET', '/v1/services/'), ('GET', '/v1/changes/1/wait/extra'), ('GET', '/v1/tasks'),
            ('GET', '/v1/tasks/1'), ('GET', '/v1/tasks/1/websocket'), ('GET', '/V1/services'),
            ('PUT', '/v1/services'), ('DELETE', '/v1/plan'), ('POST', '/v1/health'),
            ('PATCH', '/v1/changes'), ('GET', '/v1/layers'), ('GET', '/v1/signals'),
            ('GET', '/v1/exec'), ('POST', '/v1/system-info'), ('PUT', '/v1/files'),
            ('DELETE', '/v1/notices/1'), ('POST', '/v1/logs'), ('HEAD', '/v1/system-info'),
            ('OPTIONS', '/v1/services'), ('POST', '/v1/metrics'), ('PUT', '/v1/identities'),
            ('POST', '/v1/changes/1/wait'), ('POST', '/v1/notices/1'), ('POST', '/v1/plan'),
            ('DELETE', '/v1/changes/1'), ('GET', '/v1/checks/refresh'),
        ])
        body = b'{}' if method in ('POST', 'PUT', 'PATCH') else None
        return Req(f'{method} (unknown route or method)', method, path, body=body)


# --------------------------------------------------------------------------------------
# The daemons.
# --------------------------------------------------------------------------------------

class Daemon:
    def __init__(self, name: str, binary: str, workdir: str, marker: str):
        self.name = name
        self.binary = binary
        self.marker = marker
        self.root = tempfile.mkdtemp(prefix=f'{name}-', dir=workdir)
        self.pebble_dir = os.path.join(self.root, 'pebble')
        self.scratch = os.path.join(self.root, 'scratch')
        self.socket = os.path.join(self.pebble_dir, '.pebble.socket')
        self.log_path = os.path.join(self.root, 'daemon.log')
        self.proc: subprocess.Popen | None = None
        self.log_file = None
        # Bookkeeping, per daemon. A change is labelled by its summary and the order of
        # first appearance among changes with that summary ("<chg Start service "x" #2>"),
        # its tasks by the change's label and their place in it: a change only one daemon
        # makes then shifts no other change's label.
        self.changes: list[str] = []  # raw IDs, in order of first appearance
        self.chg_label: dict[str, str] = {}
        self.chg_raw: dict[str, str] = {}
        self.summary_count: dict[str, int] = {}
        self.tasks: list[str] = []
        self.task_label: dict[str, str] = {}
        self.task_raw: dict[str, str] = {}
        self.notice_labels: dict[str, str] = {}
        self.req_change: dict[int, str] = {}
        self.req_exec_task: dict[int, str] = {}
        self.req_notice: dict[int, str] = {}
        self.exited_note = ''

    def seed_scratch(self) -> None:
        os.makedirs(os.path.join(self.scratch, 'sub', 'nested'))
        for rel, text in (('existing.txt', 'hello\n'), ('sub/a.txt', 'A\n'), ('sub/b.log', 'B\n')):
            with open(os.path.join(self.scratch, rel), 'w') as f:
                f.write(text)
        stamp = 1577836800  # 2020-01-01T00:00:00Z
        for dirpath, dirnames, filenames in os.walk(self.scratch):
            for n in dirnames + filenames:
                os.utime(os.path.join(dirpath, n), (stamp, stamp))
        os.utime(self.scratch, (stamp, stamp))

    def start(self, timeout: float = 30.0) -> None:
        self.seed_scratch()
        env = {
            'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            'HOME': os.environ.get('HOME', '/root'),
            'LANG': 'C.UTF-8',
            'PEBBLE': self.pebble_dir,
            MARKER_VAR: self.marker,
        }
        self.log_file = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(
            [self.binary, 'run', '--create-dirs', '--hold'], env=env, cwd=self.root,
            stdin=subprocess.DEVNULL, stdout=self.log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f'{self.name} exited with {self.proc.returncode} at start; '
                                   f'log:\n{self.log_tail()}')
            if os.path.exists(self.socket):
                rsp = http_request(self.socket, 'GET', '/v1/system-info', timeout=2.0)
                if rsp.get('status') == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f'{self.name} did not answer on {self.socket} within {timeout:g}s; '
                           f'log:\n{self.log_tail()}')

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            except OSError:
                pass
        if self.log_file:
            self.log_file.close()

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, 'rb') as f:
                lines = f.read().decode('utf-8', 'replace').splitlines()
            return '\n'.join(lines[-n:])
        except OSError:
            return '(no log)'


def kill_leftovers(marker: str) -> list[int]:
    """SIGKILL, by PID, any process still carrying this run's marker in its environment
    (services and execs our daemons started and did not stop)."""
    needle = f'{MARKER_VAR}={marker}'.encode()
    killed = []
    me = os.getpid()
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f'/proc/{entry}/environ', 'rb') as f:
                env = f.read().split(b'\0')
        except OSError:
            continue
        if needle in env:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except OSError:
                pass
    return killed


# --------------------------------------------------------------------------------------
# Running requests, normalising and comparing answers.
# --------------------------------------------------------------------------------------

MISSING = '<missing>'


class Runner:
    def __init__(self, pebble: Daemon, cobble: Daemon, verbose: bool = False):
        self.pebble = pebble
        self.cobble = cobble
        self.daemons = [pebble, cobble]
        self.verbose = verbose
        self.notes: list[str] = []
        # Labels of changes whose change-update count is a race (see racy_change).
        self.racy_changes: set[str] = set()

    # ---- placeholders ----------------------------------------------------------------

    def resolve(self, d: Daemon, text: str) -> str:
        def sub(m: re.Match) -> str:
            kind, arg = m.group(1), m.group(2)
            if kind == 'SCRATCH':
                return d.scratch
            # @CHG#k@ and @TASK#k@ name the k-th change (task) Pebble has; cobble gets the
            # one with the same label, so both are asked about the same change.
            if kind == 'CHG#':
                k = int(arg)
                if not 0 < k <= len(self.pebble.changes):
                    return '99999'
                label = self.pebble.chg_label[self.pebble.changes[k - 1]]
                return d.chg_raw.get(label, '99999')
            if kind == 'CHGNC#':  # the k-th change of Pebble's that is not a check's
                k = int(arg)
                ids = [c for c in self.pebble.changes if not self.pebble.chg_label[c].startswith(
                    ('<chg Perform ', '<chg Recover '))]
                if not 0 < k <= len(ids):
                    return '99999'
                return d.chg_raw.get(self.pebble.chg_label[ids[k - 1]], '99999')
            if kind == 'TASK#':
                k = int(arg)
                if not 0 < k <= len(self.pebble.tasks):
                    return '99999'
                label = self.pebble.task_label[self.pebble.tasks[k - 1]]
                return d.task_raw.get(label, '99999')
            if kind == 'CHKCHG:':
                checks = json_get(d.socket, '/v1/checks') or []
                for c in checks:
                    if isinstance(c, dict) and c.get('name') == arg and c.get('change-id'):
                        return c['change-id']
                return '99999'
            if kind == 'EXECTASK:r':
                return d.req_exec_task.get(int(arg), '99999')
            if kind == 'NOTICE:r':
                return d.req_notice.get(int(arg), '99999')
            if kind == 'NOTICETIME:r':
                nid = d.req_notice.get(int(arg))
                notice = json_get(d.socket, f'/v1/notices/{nid}') if nid else None
                if isinstance(notice, dict) and notice.get('last-repeated'):
                    return notice['last-repeated']
                return '2001-01-01T00:00:00Z'
            return m.group(0)
        return re.sub(r'@(SCRATCH|CHG#|CHGNC#|TASK#|CHKCHG:|EXECTASK:r|NOTICE:r|NOTICETIME:r)([^@]*)@',
                      sub, text)

    def url(self, d: Daemon, req: Req) -> str:
        path = urllib.parse.quote(self.resolve(d, req.path), safe="/:@!$&'()*+,;=-._~")
        if not req.query:
            return path
        return path + '?' + urllib.parse.urlencode(
            [(k, self.resolve(d, v)) for k, v in req.query])

    # ---- one request -----------------------------------------------------------------

    def send(self, d: Daemon, req: Req) -> dict[str, Any]:
        body = None
        if req.body is not None:
            body = req.body.replace(b'@SCRATCH@', d.scratch.encode())
            if b'@' in body:
                body = self.resolve(d, body.decode('utf-8', 'surrogateescape')).encode(
                    'utf-8', 'surrogateescape')
        headers = dict(req.headers)
        if req.method in ('POST', 'PUT', 'PATCH') and body is not None \
                and 'Content-Type' not in headers and req.endpoint != 'POST /v1/files':
            headers['Content-Type'] = 'application/json'
        return http_request(d.socket, req.method, self.url(d, req), body, headers)

    def run(self, req: Req) -> dict[str, Any]:
        answers = {d.name: {'http': self.send(d, req)} for d in self.daemons}
        # Remember what this request created, per daemon.
        for d in self.daemons:
            env = decode_json(answers[d.name]['http'])
            if isinstance(env, dict):
                if env.get('type') == 'async' and isinstance(env.get('change'), str):
                    d.req_change[req.index] = env['change']
                    result = env.get('result')
                    if isinstance(result, dict) and isinstance(result.get('task-id'), str):
                        d.req_exec_task[req.index] = result['task-id']
                if req.endpoint == 'POST /v1/notices' and env.get('type') == 'sync':
                    result = env.get('result')
                    if isinstance(result, dict) and isinstance(result.get('id'), str):
                        d.req_notice[req.index] = result['id']
        # Exec: drive the websockets (both daemons at once, so neither waits on the
        # other's command), then wait for the change like any other async answer.
        if req.mode == 'exec' and (req.exec_opts or {}).get('connect', True):
            threads = []
            for d in self.daemons:
                task = d.req_exec_task.get(req.index)
                if task:
                    t = threading.Thread(target=self.exec_io, args=(
                        d, task, bool((req.exec_opts or {}).get('split')), answers[d.name]))
                    t.start()
                    threads.append(t)
            for t in threads:
                t.join(30)
        for d in self.daemons:
            chg = d.req_change.get(req.index)
            if chg:
                answers[d.name]['settled'] = http_request(
                    d.socket, 'GET', f'/v1/changes/{chg}/wait?timeout={SETTLE_WAIT_TIMEOUT}')
        if req.settle_checks:
            self.settle_checks(req.index)
        for d in self.daemons:
            self.sync(d)
        return answers

    def exec_io(self, d: Daemon, task: str, split: bool, out: dict[str, Any]) -> None:
        io: dict[str, Any] = {}
        socks: list[Websocket] = []
        try:
            names = ['control', 'stdio'] + (['stderr'] if split else [])
            conns = {}
            for name in names:
                ws = Websocket(d.socket, f'/v1/tasks/{task}/websocket/{name}')
                socks.append(ws)
                conns[name] = ws
            conns['stdio'].send(Websocket.TEXT, b'{"command":"end"}')
            for name in names[1:]:
                data = b''
                while True:
                    msg = conns[name].recv()
                    if msg is None:
                        break
                    op, payload = msg
                    if op == Websocket.BINARY:
                        data += payload
                    elif op == Websocket.TEXT:
                        try:
                            if json.loads(payload).get('command') == 'end':
                                break
                        except (ValueError, AttributeError):
                            data += payload
                    elif op == Websocket.CLOSE:
                        break
                io[name] = data.decode('utf-8', 'replace')
            while True:  # the daemon closes control once the command has exited
                msg = conns['control'].recv()
                if msg is None or msg[0] == Websocket.CLOSE:
                    break
        except WebsocketRefused as e:
            io['refused'] = {'status': e.status, 'ctype': e.ctype, 'raw': e.raw}
        except socket.timeout:
            io['error'] = 'websocket timed out'
        except OSError as e:
            io['error'] = f'websocket: {type(e).__name__}'
        finally:
            for ws in socks:
                ws.close()
        out['io'] = io

    def settle_checks(self, index: int) -> None:
        """Wait until every started check named as failing has gone down and its recover
        change has logged its first failed run, so the perform/recover change switch, the
        check's notices and that first line happen before the next request instead of at a
        moment that differs between the daemons. (A recover task logs its first failure one
        period after it starts; a request landing on that tick would find the line on the
        daemon asked second and not on the first.) Pebble (the reference) gets
        CHECK_SETTLE_LIMIT seconds; cobble gets what Pebble took plus 2 s."""
        t0 = time.monotonic()
        took = None
        for d in self.daemons:
            limit = t0 + CHECK_SETTLE_LIMIT if took is None else \
                max(time.monotonic() + 0.3, t0 + took + 2.0)
            while True:
                checks = json_get(d.socket, '/v1/checks', timeout=5)
                pending = [c.get('name') for c in checks or [] if isinstance(c, dict)
                           and 'fail' in str(c.get('name')) and c.get('status') == 'up']
                changes = None
                if checks is not None and not pending:
                    changes = json_get(d.socket, '/v1/changes?select=in-progress', timeout=5)
                    pending = [f'{c.get("summary")} (no failure logged yet)'
                               for c in changes or [] if isinstance(c, dict)
                               and c.get('kind') == 'recover-check'
                               and not any(isinstance(t, dict) and t.get('log')
                                           for t in c.get('tasks') or [])]
                if changes is not None and not pending:
                    break
                if time.monotonic() >= limit or not d.alive():
                    self.notes.append(f'#{index} {d.name}: checks {pending} not settled '
                                      f'after {time.monotonic() - t0:.1f}s')
                    break
                time.sleep(0.1)
            if took is None:
                took = time.monotonic() - t0

    def sync(self, d: Daemon) -> None:
        """Register changes, tasks and notices the daemon has that we have not seen yet.
        Changes new since the last request are registered in an order of their own content
        (kind, summary, then number), not of their number: Pebble creates a layer's check
        changes in map order, so their numbers are random among themselves."""
        changes = json_get(d.socket, '/v1/changes?select=all')
        if isinstance(changes, list):
            changes = [c for c in changes if isinstance(c, dict) and isinstance(c.get('id'), str)]
            fresh = [c for c in changes if c['id'] not in d.chg_label]
            fresh.sort(key=lambda c: (str(c.get('kind')), str(c.get('summary')), int_or(c['id'])))
            for c in fresh:
                self.register_change(d, c)
            for c in sorted(changes, key=lambda c: d.changes.index(c['id'])):
                self.register_tasks(d, c)
                if racy_change(c):
                    self.racy_changes.add(d.chg_label[c['id']])
        notices = json_get(d.socket, '/v1/notices?users=all')
        if isinstance(notices, list):
            for n in notices:
                if isinstance(n, dict) and n.get('id') not in d.notice_labels:
                    d.notice_labels[n['id']] = self.notice_label(d, n)

    def register_change(self, d: Daemon, c: dict[str, Any]) -> str:
        raw = c['id']
        summary = str(c.get('summary'))
        n = d.summary_count.get(summary, 0) + 1
        d.summary_count[summary] = n
        label = f'<chg {summary} #{n}>'
        d.changes.append(raw)
        d.chg_label[raw] = label
        d.chg_raw[label] = raw
        return label

    def register_tasks(self, d: Daemon, c: dict[str, Any]) -> None:
        base = d.chg_label[c['id']][len('<chg '):-1]
        for i, t in enumerate(c.get('tasks') or []):
            if isinstance(t, dict) and isinstance(t.get('id'), str) and t['id'] not in d.task_label:
                label = f'<task {base} /{i + 1}>'
                d.tasks.append(t['id'])
                d.task_label[t['id']] = label
                d.task_raw[label] = t['id']

    # ---- normalisation ---------------------------------------------------------------

    def chg(self, d: Daemon, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        if raw not in d.chg_label:
            c = json_get(d.socket, f'/v1/changes/{urllib.parse.quote(raw)}')
            if not (isinstance(c, dict) and c.get('id') == raw):
                return f'<chg unknown {raw}>'
            self.register_change(d, c)
            self.register_tasks(d, c)
        return d.chg_label[raw]

    def task(self, d: Daemon, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        return d.task_label.get(raw, f'<task unknown {raw}>')

    def notice_label(self, d: Daemon, n: dict[str, Any]) -> str:
        """A notice is identified by (user, type, key); its label says that, so that a
        notice only one daemon records shifts no other notice's label."""
        key = n.get('key')
        if n.get('type') == 'change-update':
            key = self.chg(d, key)
        user = n.get('user-id')
        return f'<notice {n.get("type")} {key}' + ('' if user is None else f' user {user}') + '>'

    def notice(self, d: Daemon, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        if raw not in d.notice_labels:
            n = json_get(d.socket, f'/v1/notices/{raw}')
            if isinstance(n, dict):
                d.notice_labels[raw] = self.notice_label(d, n)
        return d.notice_labels.get(raw, f'<notice id {raw}>')

    def text(self, d: Daemon, s: str) -> str:
        s = s.replace(d.scratch, '@SCRATCH@').replace(d.pebble_dir, '@PEBBLE@') \
            .replace(d.root, '@ROOT@')
        s = RFC3339_RE.sub('<time>', s)
        s = PID_RE.sub(lambda m: f'{m.group(1)} <pid>', s)
        s = ATOMIC_TMP_RE.sub(lambda m: f'{m.group(1)}.<random>~', s)

        def ids(m: re.Match) -> str:
            kind, raw = m.group(1), m.group(4)
            if kind == 'change' and raw in d.chg_label:
                label = d.chg_label[raw]
            elif kind in ('task', 'exec') and raw in d.task_label:
                label = d.task_label[raw]
            elif kind == 'notice' and raw in d.notice_labels:
                label = d.notice_labels[raw]
            else:
                return m.group(0)
            return f'{kind}{m.group(2) or ""} {m.group(3)}{label}{m.group(5)}'
        return ID_IN_TEXT_RE.sub(ids, s)

    def walk(self, d: Daemon, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(d, obj)
        if isinstance(obj, list):
            return [self.walk(d, v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        keys = set(obj)
        is_change = {'id', 'kind', 'summary', 'status', 'ready'} <= keys
        is_task = not is_change and {'id', 'kind', 'summary', 'status', 'progress'} <= keys
        is_notice = {'id', 'type', 'key', 'occurrences'} <= keys
        out = {}
        for k, v in obj.items():
            if k == 'id' and is_change:
                out[k] = self.chg(d, v)
            elif k == 'id' and is_task:
                out[k] = self.task(d, v)
            elif k == 'id' and is_notice:
                out[k] = self.notice_label(d, obj)
            elif k == 'occurrences' and is_notice and obj.get('type') == 'change-update' \
                    and self.chg(d, obj.get('key')) in self.racy_changes:
                out[k] = '<racy>'
            elif k == 'key' and is_notice and obj.get('type') == 'change-update':
                out[k] = self.chg(d, v)
            elif k in ('change-id', 'prev-change-id'):
                out[k] = self.chg(d, v)
            elif k == 'task-id':
                out[k] = self.task(d, v)
            elif k == 'log' and is_task and isinstance(v, list):
                lines = [MEASURED_DURATION_RE.sub('<duration>', self.text(d, x))
                         if isinstance(x, str) else x for x in v]
                if obj.get('kind') == 'recover-check':
                    # A recovering check logs one line per failed run: how many is a
                    # matter of time. Consecutive equal lines are kept once.
                    lines = [x for i, x in enumerate(lines) if i == 0 or x != lines[i - 1]]
                out[k] = lines
            else:
                out[k] = self.walk(d, v)
        return out

    def norm_http(self, d: Daemon, rsp: dict[str, Any], req: Req, role: str = '') -> dict[str, Any]:
        if 'error' in rsp:
            return {'error': rsp['error']}
        ctype = media_type(rsp['ctype'])
        out: dict[str, Any] = {'status': rsp['status'], 'ctype': ctype}
        raw = rsp['raw']
        if req.method == 'HEAD':
            return out
        if ctype == 'multipart/form-data':
            parts = parse_multipart(rsp['ctype'], raw)
            out['multipart'] = self.walk(d, parts) if parts is not None else {'text': raw.decode(
                'utf-8', 'replace')}
        elif req.mode == 'metrics' and rsp['status'] == 200 and role == '':
            out['metrics'] = self.metrics(d, raw.decode('utf-8', 'replace'))
        elif req.mode == 'logs' and rsp['status'] == 200 and role == '' and ctype != 'application/json':
            lines = []
            for line in raw.decode('utf-8', 'replace').splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    lines.append({'text': line})
            out['ndjson'] = self.walk(d, concurrent_output_in_order(lines, req))
        else:
            try:
                body = json.loads(raw) if raw else None
                out['body'] = self.walk(d, body) if raw else MISSING
            except ValueError:
                out['text'] = self.text(d, raw.decode('utf-8', 'replace'))
        body = out.get('body')
        if isinstance(body, dict):
            if isinstance(body.get('change'), str):
                body['change'] = self.chg(d, decode_json(rsp).get('change'))
            result = body.get('result')
            if req.endpoint == 'GET /v1/system-info' and isinstance(result, dict):
                if 'boot-id' in result:
                    result['boot-id'] = '<boot-id>'
                if isinstance(result.get('version'), str):
                    # a build from a git tree may carry a suffix (v1.32.1-dirty)
                    m = re.match(r'v\d+\.\d+\.\d+', result['version'])
                    result['version'] = m.group(0) if m else result['version']
                if 'cobble-version' in result:
                    result['cobble-version'] = '<cobble-version>'
            if req.endpoint == 'POST /v1/notices' and isinstance(result, dict) \
                    and isinstance(result.get('id'), str) and role == '':
                result['id'] = self.notice(d, decode_json(rsp)['result']['id'])
            if isinstance(result, list) and result and all(
                    isinstance(x, dict) and str(x.get('id', '')).startswith(('<chg', '<notice'))
                    for x in result):
                # Pebble lists changes in map order, which is random; notices by their
                # last-repeated time, which for notices recorded in the same instant is
                # timing. Lists of either are compared in the order of their labels.
                result.sort(key=label_order)
        return out

    def metrics(self, d: Daemon, text: str) -> dict[str, Any]:
        """OpenMetrics text as {sample: value, '# HELP name': text, '# TYPE name': type},
        in sorted order (the order of families and samples carries no meaning)."""
        out: dict[str, Any] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith('#'):
                words = line.split(' ', 3)
                if len(words) >= 3:
                    out[f'# {words[1]} {words[2]}'] = words[3] if len(words) > 3 else ''
                else:
                    out[line] = ''
                continue
            name, _, value = line.rpartition(' ')
            try:
                out[name or line] = float(value)
            except ValueError:
                out[line] = self.text(d, value)
        return dict(sorted(out.items()))

    def normalise(self, d: Daemon, req: Req, ans: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.norm_http(d, ans['http'], req)
        if 'io' in ans:
            io = dict(ans['io'])
            if 'refused' in io:
                r = io['refused']
                io['refused'] = self.norm_http(d, {'status': r['status'], 'ctype': r['ctype'],
                                                   'raw': r['raw']}, req, 'io')
            for k in ('stdio', 'stderr'):
                if k in io:
                    io[k] = self.text(d, io[k])
            out['io'] = io
        if 'settled' in ans:
            out['settled'] = self.norm_http(d, ans['settled'], req, 'settled')
        return out


def decode_json(rsp: dict[str, Any]) -> Any:
    if 'raw' not in rsp:
        return None
    try:
        return json.loads(rsp['raw'])
    except ValueError:
        return None


def int_or(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 1 << 62


# Service output lines closer together than this come from services started at once.
OUTPUT_BURST = 0.25
DEFAULT_LOG_LINES = 30


def log_time(line: Any) -> float | None:
    if not isinstance(line, dict) or not isinstance(line.get('time'), str):
        return None
    m = re.match(r'(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?Z$', line['time'])
    if not m:
        return None
    whole = datetime.datetime.strptime(m.group(1), '%Y-%m-%dT%H:%M:%S').replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return whole + float(m.group(2) or 0)


def concurrent_output_in_order(lines: list[Any], req: 'Req') -> list[Any]:
    """Service output in an order that is not a race. The harness's services print only as
    they start, and services started by one change start at once (Pebble: a goroutine
    each), so which of their first lines comes first is the scheduler's choice; Pebble
    itself gives `quick` then `talker` or the other way round for the same requests. Lines
    within OUTPUT_BURST of the one before are a burst; a burst's lines are put in the order
    of their services (a service's own lines keep their order). An answer cut at `n` lines
    may have cut a burst, keeping one service's line on one daemon and another's on the
    other: when the answer holds `n` lines, its first burst is dropped."""
    times = [log_time(x) for x in lines]
    if not lines or any(t is None for t in times):
        return lines
    bursts: list[list[Any]] = []
    for i, line in enumerate(lines):
        if i and times[i] - times[i - 1] < OUTPUT_BURST:
            bursts[-1].append(line)
        else:
            bursts.append([line])
    n = next((v for k, v in req.query if k == 'n'), None)
    try:
        limit = DEFAULT_LOG_LINES if n is None else int(n)
    except ValueError:
        limit = -1
    if limit > 0 and len(lines) == limit:
        bursts = bursts[1:]
    return [x for b in bursts for x in sorted(b, key=lambda x: str(x.get('service')))]


def racy_change(c: dict[str, Any]) -> bool:
    """Whether the number of a change's change-update notices is a race: a change that
    failed in one task while another of its tasks ran to its end. Pebble runs the lanes of a
    change (services that do not depend on each other) at once; when a task fails, the
    change passes through Abort and then shows the status of its other tasks, Doing if one
    is still running (one more notice), Do then Doing if one is still waiting (two more),
    Error at once if all are done. Pebble itself records 4, 5 or 6 for the same requests (an
    autostart of three running services and one that exits at once), so such a count is
    not compared."""
    statuses = [t.get('status') for t in c.get('tasks') or [] if isinstance(t, dict)]
    return c.get('status') == 'Error' and 'Error' in statuses and 'Done' in statuses


def label_order(x: dict[str, Any]) -> tuple:
    label = str(x.get('id', ''))
    m = re.match(r'<chg (.*) #(\d+)>$', label)
    return (0, m.group(1), int(m.group(2))) if m else (1, label, 0)


def allowed_extra(endpoint: str, path: str) -> bool:
    collapsed = re.sub(r'\[\d+\]', '[]', path)
    return any(fnmatch.fnmatchcase(endpoint, ep) and fnmatch.fnmatchcase(collapsed, p)
               for ep, p in ALLOWED_EXTRA)


def tolerated(path: str, a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return False
    return abs(a - b) <= 1 and any(r.search(path) for r in TOLERANT_COUNTERS)


def same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def compare(a: Any, b: Any, endpoint: str, path: str = '') -> list[tuple[str, Any, Any]]:
    diffs: list[tuple[str, Any, Any]] = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            p = f'{path}.{k}' if path else k
            if k not in b:
                diffs.append((p, a[k], MISSING))
            elif k not in a:
                if not allowed_extra(endpoint, p):
                    diffs.append((p, MISSING, b[k]))
            else:
                diffs.extend(compare(a[k], b[k], endpoint, p))
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diffs.append((f'{path}.length', len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            diffs.extend(compare(x, y, endpoint, f'{path}[{i}]'))
    elif not same_scalar(a, b) and not tolerated(path, a, b):
        diffs.append((path, a, b))
    return diffs


VALUE_IN_SIGNATURE = re.compile(
    r'(^|\.)(status|status-code|type|kind|ctype|current|healthy|ready)$')


def signature(diffs: list[tuple[str, Any, Any]]) -> str:
    parts = []
    for path, a, b in diffs:
        p = re.sub(r'\[\d+\]', '[]', path)
        p = re.sub(r'^body\.', '', p)
        if VALUE_IN_SIGNATURE.search(p) and not isinstance(a, (dict, list)) \
                and not isinstance(b, (dict, list)):
            item = f'{p}: {short(a, 30)} vs {short(b, 30)}'
        else:
            item = p
        if item not in parts:
            parts.append(item)
    sig = '; '.join(parts[:4])
    if len(parts) > 4:
        sig += f'; (+{len(parts) - 4} more)'
    return sig


def short(v: Any, n: int = 400) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=False, default=str)
    return s if len(s) <= n else s[:n] + f'...(+{len(s) - n})'


# --------------------------------------------------------------------------------------
# The run.
# --------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    for label, path in (('--cobble', args.cobble), ('--pebble', args.pebble)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print(f'diff.py: {label} {path}: not an executable file', file=sys.stderr)
            return 2
    if args.requests:
        with open(args.requests) as f:
            reqs = [Req.from_json(x) for x in json.load(f)]
        for i, r in enumerate(reqs):
            if r.index < 0:
                r.index = i
    else:
        gen = Generator(args.seed)
        reqs = [gen.next() for _ in range(args.count)]
        if args.only:
            wanted = {int(x) for x in args.only.split(',')}
            reqs = [r for r in reqs if r.index in wanted]
    if args.dump_requests:
        with open(args.dump_requests, 'w') as f:
            json.dump([r.to_json() for r in reqs], f, indent=1)

    workdir = tempfile.mkdtemp(prefix='pebble-diff-')
    marker = f'{os.getpid()}-{int(time.time())}'
    pebble = Daemon('pebble', os.path.abspath(args.pebble), workdir, marker)
    cobble = Daemon('cobble', os.path.abspath(args.cobble), workdir, marker)
    runner = Runner(pebble, cobble, args.verbose)
    reexecs = Reexecs(cobble) if args.reexec_every > 0 else None
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    status = 0
    truncated = ''
    try:
        for d in (pebble, cobble):
            d.start()
        for req in reqs:
            if time.monotonic() - started > args.max_seconds:
                truncated = f'time limit of {args.max_seconds:g}s reached after {len(results)} requests'
                break
            if not pebble.alive():
                truncated = f'pebble exited ({pebble.proc.returncode}) before request {req.index}'
                break
            ans = runner.run(req)
            norm = {d.name: runner.normalise(d, req, ans[d.name]) for d in (pebble, cobble)}
            diffs = compare(norm['pebble'], norm['cobble'], req.endpoint)
            entry = {
                'index': req.index, 'endpoint': req.endpoint, 'desc': req.desc(),
                'request': req.to_json(), 'identical': not diffs,
                'signature': signature(diffs) if diffs else '',
                'diffs': [{'path': p, 'pebble': a, 'cobble': b} for p, a, b in diffs],
                'pebble': norm['pebble'], 'cobble': norm['cobble'],
            }
            results.append(entry)
            if args.verbose:
                mark = 'same' if not diffs else 'DIFF'
                print(f'[{req.index:4d}] {mark} {req.desc()[:150]}', flush=True)
                if diffs:
                    print(f'       {entry["signature"][:200]}', flush=True)
            if not cobble.alive() and not cobble.exited_note:
                cobble.exited_note = f'cobble exited ({cobble.proc.returncode}) at request {req.index}'
            if reexecs and cobble.alive() and len(results) % args.reexec_every == 0:
                reexecs.once(req.index)
    except Exception as e:  # noqa: BLE001 - reported, then the daemons are stopped
        truncated = f'harness error: {type(e).__name__}: {e}'
        status = 2
    finally:
        for d in (pebble, cobble):
            d.stop()
        leftovers = kill_leftovers(marker)
        logs = {d.name: d.log_tail(40) for d in (pebble, cobble)}
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    total = len(results)
    same = sum(1 for r in results if r['identical'])
    pct = 100.0 * same / total if total else 0.0
    print_summary(results, total, same, pct, runner.notes, truncated,
                  [d.exited_note for d in (pebble, cobble) if d.exited_note], leftovers,
                  args.show)
    if args.report:
        with open(args.report, 'w') as f:
            json.dump({
                'seed': args.seed, 'count': args.count, 'total': total, 'identical': same,
                'percent': pct, 'notes': runner.notes, 'truncated': truncated,
                'elapsed': time.monotonic() - started, 'daemon-log-tails': logs,
                'results': results,
            }, f, indent=1, default=str)
    if reexecs:
        reexecs.print_summary()
        if reexecs.failed and status == 0:
            status = 1
    if truncated and status == 0:
        status = 2
    if status:
        print(f'run incomplete: {truncated}', file=sys.stderr)
        return status
    if pct < args.min_identical:
        return 1
    return 0


class Reexecs:
    """cobble re-executed in place between requests (`--reexec-every`). A refusal (400) names
    what cannot be handed over at that moment and changes nothing, so it is counted and
    reported; an answer of any other kind, or none, is a failure of the run."""

    def __init__(self, cobble: 'Daemon') -> None:
        self.cobble = cobble
        self.done = 0
        self.refused: dict[str, list[int]] = {}
        self.failed: list[str] = []

    def once(self, after: int) -> None:
        ans = http_request(self.cobble.socket, 'POST', '/v1/cobble/reexec', b'{}',
                           {'Content-Type': 'application/json'}, timeout=60.0)
        env = decode_json(ans) if 'error' not in ans else None
        message = ''
        if isinstance(env, dict) and isinstance(env.get('result'), dict):
            message = str(env['result'].get('message', ''))
        if ans.get('status') == 200:
            self.done += 1
        elif ans.get('status') == 400:
            self.refused.setdefault(message, []).append(after)
        else:
            self.failed.append(f'after #{after}: {ans.get("status", ans.get("error"))} '
                               f'{message or short(str(ans.get("raw", b"")), 200)}')

    def print_summary(self) -> None:
        refused = sum(len(v) for v in self.refused.values())
        print(f'\ncobble re-executed {self.done} times, {refused} refused, '
              f'{len(self.failed)} failed')
        for message, after in sorted(self.refused.items(), key=lambda kv: -len(kv[1])):
            print(f'   refused x{len(after)} (after #{after[0]}...): {short(message, 200)}')
        for f in self.failed:
            print(f'   FAILED {f}')


def print_summary(results, total, same, pct, notes, truncated, exits, leftovers, show):
    print(f'\n{total} requests, {same} identical ({pct:.1f}%)')
    if truncated:
        print(f'INCOMPLETE: {truncated}')
    for e in exits:
        print(f'NOTE: {e}')
    for n in notes:
        print(f'note: {n}')
    if leftovers:
        print(f'note: killed {len(leftovers)} leftover process(es) of the daemons')
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        if not r['identical']:
            groups.setdefault((r['endpoint'], r['signature']), []).append(r)
    if not groups:
        return
    print(f'\n{len(groups)} kinds of difference:')
    for (endpoint, sig), rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f'\n== {endpoint} x{len(rs)}: {sig}')
        print('   requests: ' + ', '.join(f'#{r["index"]}' for r in rs[:20])
              + (' ...' if len(rs) > 20 else ''))
        for r in rs[:show]:
            print(f'   #{r["index"]} {short(r["desc"], 300)}')
            for d in r['diffs'][:6]:
                print(f'      {d["path"]}:')
                a, b = d['pebble'], d['cobble']
                if isinstance(a, str) and isinstance(b, str) and ('\n' in a or '\n' in b):
                    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), 'pebble',
                                                      'cobble', n=1, lineterm=''))
                    for line in lines[:24]:
                        print(f'         {line}')
                    if len(lines) > 24:
                        print(f'         ...(+{len(lines) - 24} lines)')
                else:
                    print(f'         pebble: {short(a, 300)}\n         cobble: {short(b, 300)}')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--cobble', required=True, help='the cobble binary')
    p.add_argument('--pebble', required=True, help='the reference Pebble binary')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--count', type=int, default=300, help='requests to generate')
    p.add_argument('--min-identical', type=float, default=99.0,
                   help='fail (exit 1) below this identical percentage')
    p.add_argument('--report', help='write every request and both answers as JSON here')
    p.add_argument('--verbose', action='store_true', help='print each request as it runs')
    p.add_argument('--max-seconds', type=float, default=1200.0,
                   help='stop the run (exit 2) after this long')
    p.add_argument('--show', type=int, default=2, help='examples printed per difference')
    p.add_argument('--only', help='run only these indices (comma-separated) of the sequence')
    p.add_argument('--requests', help='run the requests of this JSON file (as written by '
                                      '--dump-requests) instead of generating them')
    p.add_argument('--dump-requests', help='write the requests to run as JSON here')
    p.add_argument('--keep', action='store_true', help='keep the daemons\' directories')
    p.add_argument('--reexec-every', type=int, default=0, metavar='N',
                   help='re-execute cobble in place (POST /v1/cobble/reexec) after every N '
                        'requests: its answers must stay Pebble\'s through the swaps')
    args = p.parse_args(argv)
    return run(args)


if __name__ == '__main__':
    sys.exit(main())

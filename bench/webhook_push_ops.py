#!/usr/bin/env python3
"""The admission webhook's first answer after the charm pushes its certificates, through a
supervisor and the real ops client.

    .venv/bin/python bench/webhook_push_ops.py [--runs N] [--cobble PATH] [--pebble PATH]
                                               [--webhook PATH] [--flows a,b,c]
                                               [--certs-in-pebble]

Needs a Python with ops (the compatibility suite's .venv: ops 3.9.0, PyYAML, pytest, whose
test module this reuses). Each run: a fresh temporary $PEBBLE, `run --create-dirs --hold`;
the admission-webhook charm's layer (as tests/compat/test_founding_case_rust.py adds it,
pointing at a fake Kubernetes API server that serves one PodDefault) added and replanned
before the certificates exist; once the webhook says it waits for them, `key.pem` then
`cert.pem` pushed with ops' `Client.push(..., make_dirs=True)` into `ROOT/etc/webhook/certs`,
which does not exist yet; then the identical layer again without a replan, as the charm's
later hook does (on its own thread). ROOT is a temporary directory of its own, as `/` is
apart from `$PEBBLE` in the charm's container; with `--certs-in-pebble` it is `$PEBBLE` (the
compatibility test's layout, where the webhook watches `$PEBBLE` itself until `etc`
appears). Timed from the return of the second push until the first AdmissionReview
answered over TLS with the PodDefault's patch (a new connection, with TCP_NODELAY, tried
every millisecond). Then SIGTERM to the daemon and wait.

Flows, taken in turn each round so that all see the same load:
- `cobble`: cobble, the charm's layer (a dict through ops, as the charm sends it);
- `cobble-paths`: cobble, the same service with `requires-paths` (both files) and
  `on-file-change` (cert.pem: restart), the README's layer, sent as YAML text;
- `pebble`: Pebble (`--pebble`, or `$PEBBLE_BIN`), the charm's layer.

Prints a Markdown row per flow (median / p90 / max, nearest-rank), the load average before
and after, and per flow the medians of where the time went, each relative to the return of
the second push, from the harness's clock and the webhook's own log timestamps (read back
with `GET /v1/logs`): the two pushes sent (negative), the webhook process's first log line
(only for `cobble-paths`, where cobble starts it), certificate loaded, listening, first TCP
connect accepted, TLS handshake done, the fake API server's LIST received and answered,
patch applied (the webhook's log), first good answer.
"""
from __future__ import annotations

import argparse
import base64
import datetime
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPAT = ROOT / 'tests' / 'compat'
sys.path.insert(0, str(COMPAT))

import ops  # noqa: E402
import yaml  # noqa: E402

from fake_apiserver import FakeApiServer  # noqa: E402
import test_founding_case_rust as founding  # noqa: E402

SERVICE = 'admission-webhook'
TRY_EVERY = 0.001
ANSWER_WITHIN = 10.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # nearest rank
    return ordered[int(rank) - 1]


def loadavg() -> str:
    return ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError(f'timed out waiting for {what}')


def raw_get(socket_path: str, path: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        s.sendall(f'GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'.encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b''.join(chunks).partition(b'\r\n\r\n')
    if b'chunked' in head.lower():
        out, rest = b'', body
        while rest:
            size_text, _, rest = rest.partition(b'\r\n')
            size = int(size_text, 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return body


def service_log(socket_path: str) -> list[str]:
    """The service's output lines, as the daemon keeps them (`GET /v1/logs`)."""
    body = raw_get(socket_path, f'/v1/logs?services={SERVICE}&n=200')
    return [json.loads(line)['message'] for line in body.splitlines() if line.strip()]


def webhook_time(line: str) -> float | None:
    """The webhook's own timestamp at the start of its log line (tracing's RFC 3339, UTC)."""
    stamp = line.split(' ', 1)[0].rstrip('Z')
    try:
        parsed = datetime.datetime.fromisoformat(stamp[:26])
    except ValueError:
        return None
    return parsed.replace(tzinfo=datetime.timezone.utc).timestamp()


class Reviewer:
    """Sends the notebook pod's AdmissionReview over a new TLS connection each try."""

    def __init__(self, port: int):
        self.port = port
        self.context = ssl.create_default_context(cafile=str(founding.FIXTURES / 'webhook-cert.pem'))
        self.context.check_hostname = False
        self.body = json.dumps({
            'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
            'request': {
                'uid': 'bench-uid', 'kind': {'group': '', 'version': 'v1', 'kind': 'Pod'},
                'resource': {'group': '', 'version': 'v1', 'resource': 'pods'},
                'namespace': 'user1', 'operation': 'CREATE', 'object': founding.POD,
            },
        })
        self.first_connect: float | None = None
        self.first_handshake: float | None = None

    def try_once(self) -> bool:
        try:
            conn = http.client.HTTPSConnection('127.0.0.1', self.port, context=self.context, timeout=2)
            conn.sock = socket.create_connection(('127.0.0.1', self.port), timeout=2)
            # As the API server's Go client does: without it, the request written right
            # after the handshake's last message can wait for a delayed ACK (40 ms).
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.first_connect is None:
                self.first_connect = time.time()
            conn.sock = self.context.wrap_socket(conn.sock, server_hostname='127.0.0.1')
            if self.first_handshake is None:
                self.first_handshake = time.time()
            conn.request('POST', '/apply-poddefault', self.body, {'Content-Type': 'application/json'})
            response = conn.getresponse()
            data = response.read()
            conn.close()
        except OSError:
            return False
        if response.status != 200:
            raise RuntimeError(f'webhook answered {response.status}: {data[:200]!r}')
        answer = json.loads(data)['response']
        patch = json.loads(base64.b64decode(answer['patch']))
        env = {op['path']: op['value'] for op in patch}.get('/spec/containers/0/env')
        if not (answer['uid'] == 'bench-uid' and answer['allowed'] is True
                and env == founding.POD_DEFAULT['spec']['env']):
            raise RuntimeError(f'wrong answer: {answer}')
        return True


def record_lists(api: FakeApiServer) -> list[tuple[float, float]]:
    """Notes when each PodDefault LIST reached the fake API server and when it was answered."""
    handler = api.httpd.RequestHandlerClass
    served: list[tuple[float, float]] = []
    original = handler.do_GET

    def do_get(self) -> None:
        began = time.time()
        original(self)
        served.append((began, time.time()))
        served.sort()

    handler.do_GET = do_get
    return served


def one_run(flow: str, binary: str, webhook: str, api: FakeApiServer,
            lists: list[tuple[float, float]], certs_in_pebble: bool) -> dict:
    pebble = Path(tempfile.mkdtemp(prefix='cobble-webhook-push-'))
    root = pebble if certs_in_pebble else Path(tempfile.mkdtemp(prefix='cobble-webhook-root-'))
    socket_path = str(pebble / '.pebble.socket')
    env = dict(os.environ, PEBBLE=str(pebble), PEBBLE_SOCKET=socket_path)
    proc = subprocess.Popen([binary, 'run', '--create-dirs', '--hold'], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: os.path.exists(socket_path), 10, 'the daemon socket')
        client = ops.pebble.Client(socket_path=socket_path)
        wait_until(lambda: client.get_system_info(), 10, 'the daemon to answer')
        certs = root / 'etc' / 'webhook' / 'certs'
        kubeconfig = pebble / 'kubeconfig'
        api.write_kubeconfig(kubeconfig)
        port = founding.free_port()
        os.environ['ADMISSION_WEBHOOK_BIN'] = webhook
        layer = founding.charm_layer(founding.webhook_command(certs, port, kubeconfig), port)
        if flow == 'cobble-paths':
            service = layer['services'][SERVICE]
            service['requires-paths'] = [str(certs / 'cert.pem'), str(certs / 'key.pem')]
            service['on-file-change'] = {str(certs / 'cert.pem'): 'restart'}
            layer = yaml.safe_dump(layer)
        client.add_layer(SERVICE, layer, combine=True)
        client.replan_services()
        if flow == 'cobble-paths':
            wait_until(lambda: client.get_services([SERVICE])[0].current == 'waiting', 10,
                       'the service to wait for its paths')
        else:
            wait_until(lambda: any('waiting for a valid certificate' in line
                                   for line in service_log(socket_path)),
                       10, 'the webhook to wait for its certificates')
        time.sleep(0.2)  # the charm's push comes later; let the waiting settle
        reviewer = Reviewer(port)
        if reviewer.try_once():
            raise RuntimeError('the webhook answered before the certificates were pushed')
        reviewer.first_connect = reviewer.first_handshake = None

        key_push = time.time()
        client.push(str(certs / 'key.pem'), founding.KEY, make_dirs=True)
        cert_push = time.time()
        client.push(str(certs / 'cert.pem'), founding.CERT, make_dirs=True)
        pushed = time.perf_counter()
        pushed_wall = time.time()
        relayer = threading.Thread(target=client.add_layer, args=(SERVICE, layer),
                                   kwargs={'combine': True})
        relayer.start()
        deadline = pushed + ANSWER_WITHIN
        while not reviewer.try_once():
            if time.perf_counter() > deadline:
                raise TimeoutError(f'{flow}: no answer within {ANSWER_WITHIN} s of the push')
            time.sleep(TRY_EVERY)
        answered = time.perf_counter()
        answered_wall = time.time()
        relayer.join()

        marks = {'answer': answered_wall - pushed_wall, 'key push': key_push - pushed_wall,
                 'cert push': cert_push - pushed_wall}
        if reviewer.first_connect is not None:
            marks['connect'] = reviewer.first_connect - pushed_wall
        if reviewer.first_handshake is not None:
            marks['handshake'] = reviewer.first_handshake - pushed_wall
        after_push = [served for served in lists if served[0] >= pushed_wall]
        if after_push:
            marks['list'] = after_push[0][0] - pushed_wall
            marks['listed'] = after_push[0][1] - pushed_wall
        lines = service_log(socket_path)
        started = None
        for line in lines:
            t = webhook_time(line)
            if t is None:
                continue
            if t >= pushed_wall - 0.001 and started is None:
                started = t
            if 'certificate' in line and ('loaded' in line.split('certificate')[0]):
                marks.setdefault('loaded', t - pushed_wall)
            if 'serving webhooks on' in line and t >= pushed_wall - 0.001:
                marks.setdefault('listening', t - pushed_wall)
            if 'applied poddefaults' in line:
                marks.setdefault('applied', t - pushed_wall)
        if flow == 'cobble-paths' and started is not None:
            marks['started'] = started - pushed_wall
        return {'elapsed': answered - pushed, 'marks': marks}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(pebble, ignore_errors=True)
        if root != pebble:
            shutil.rmtree(root, ignore_errors=True)


def describe(binary: str) -> str:
    try:
        out = subprocess.run([binary, 'version', '--client'], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except OSError:
        out = ''
    return f'{binary} ({out or "?"})'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--runs', type=int, default=20)
    parser.add_argument('--cobble', default=str(ROOT / 'target' / 'release' / 'cobble'))
    parser.add_argument('--pebble', default=os.environ.get('PEBBLE_BIN'))
    parser.add_argument('--webhook', default=str(ROOT / 'target' / 'release' / 'admission-webhook'))
    parser.add_argument('--flows', default='cobble,cobble-paths,pebble')
    parser.add_argument('--certs-in-pebble', action='store_true',
                        help='certs under $PEBBLE/etc (the compatibility test\'s layout) rather than '
                             'under a directory of their own, as /etc is in the charm\'s container')
    args = parser.parse_args()
    flows = [f for f in args.flows.split(',') if f]
    binaries = {'cobble': args.cobble, 'cobble-paths': args.cobble, 'pebble': args.pebble}
    for flow in flows:
        if flow not in binaries:
            parser.error(f'unknown flow {flow!r}')
        if flow == 'pebble' and not args.pebble:
            print('no --pebble PATH (or $PEBBLE_BIN): the pebble flow is skipped', file=sys.stderr)
    flows = [f for f in flows if binaries[f]]
    for path in {binaries[f] for f in flows} | {args.webhook}:
        if not os.access(path, os.X_OK):
            parser.error(f'not an executable: {path}')

    print(f'webhook: {args.webhook}')
    for flow in flows:
        print(f'{flow}: {describe(binaries[flow])}')
    before = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    results: dict[str, list[dict]] = {flow: [] for flow in flows}
    with FakeApiServer([founding.POD_DEFAULT]) as api:
        lists = record_lists(api)
        for i in range(args.runs):
            order = flows if i % 2 == 0 else flows[::-1]
            for flow in order:
                result = one_run(flow, binaries[flow], args.webhook, api, lists,
                                 args.certs_in_pebble)
                results[flow].append(result)
                marks = ' '.join(f'{k}={v * 1000:.0f}' for k, v in result['marks'].items())
                print(f'  {flow} run {i + 1}: {result["elapsed"] * 1000:.0f} ms ({marks})', file=sys.stderr)
    after = loadavg()
    ended = datetime.datetime.now(datetime.timezone.utc)
    print(f'\n{started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC, load average (1, 5, 15 min) '
          f'before {before}, after {after}\n')
    labels = {
        'cobble': 'cobble + ops, the charm\'s layer',
        'cobble-paths': 'cobble + ops, `requires-paths` and `on-file-change`',
        'pebble': 'Pebble + ops, the charm\'s layer',
    }
    print('| flow (runs) | push → first answer: median / p90 / max |')
    print('|---|---|')
    for flow in flows:
        ms = [r['elapsed'] * 1000 for r in results[flow]]
        print(f'| {labels[flow]} ({len(ms)}) | {percentile(ms, 50):.0f} / {percentile(ms, 90):.0f} / '
              f'{max(ms):.0f} ms |')
    print('\nWhere the time went (medians, ms after the second push returned):\n')
    print('| flow | key push sent | cert push sent | webhook started | certificate loaded | listening | first TCP connect '
          '| TLS handshake done | LIST received | LIST answered | patch applied (webhook) | first answer |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|')
    for flow in flows:
        cells = []
        for mark in ('key push', 'cert push', 'started', 'loaded', 'listening', 'connect', 'handshake', 'list', 'listed', 'applied', 'answer'):
            values = [r['marks'][mark] * 1000 for r in results[flow] if mark in r['marks']]
            cells.append(f'{percentile(values, 50):.0f}' if values else '–')
        print(f'| {flow} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()

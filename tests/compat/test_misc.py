"""System info, routing errors, hostile bodies, the --http listener, shutdown.

Pebble facts pinned here (daemon/daemon.go, response.go, access.go):
- unknown paths are 404 JSON `invalid API endpoint requested` (this is also
  what the removed /v1/warnings gives ops' get_warnings/ack_warnings);
- a method with no handler is 405 `method "X" not allowed`;
- every POST decodes its JSON body first: anything undecodable, truncated or
  of the wrong shape is 400 and changes nothing;
- the --http TCP listener has no peer credentials, so only open endpoints
  (/v1/system-info, /v1/health) work; the rest are 401, kind login-required,
  message `access denied`;
- SIGTERM stops the running services and then exits 0.
"""

from __future__ import annotations

import datetime
import select
import socket
from pathlib import Path

import ops
import pytest

from helpers import current, pid_alive, read_pid, request_head, unix_socket, wait_for


def assert_error_envelope(resp, status: int, message: str | None = None) -> dict:
    assert resp.status == status, (resp.status, resp.body[:500])
    assert resp.headers.get_content_type() == 'application/json'
    body = resp.json
    assert body['type'] == 'error'
    assert body['status-code'] == status
    if message is not None:
        assert body['result']['message'] == message
    return body


def test_system_info_version(client: ops.pebble.Client):
    # The Pebble release cobble implements, so that a charm gating on "at least v1.17"
    # (Pebble's version format: v<major>.<minor>.<patch>) sees a Pebble new enough.
    info = client.get_system_info()
    assert info.version == 'v1.32.1'
    major, minor, _ = (int(part) for part in info.version.lstrip('v').split('.'))
    assert (major, minor) >= (1, 17)


def test_system_info_names_cobbles_own_version(daemon):
    result = daemon.raw('GET', '/v1/system-info').json['result']
    assert list(result)[-2:] == ['version', 'cobble-version']
    assert result['cobble-version'] and not result['cobble-version'].startswith('v1.32')


def test_system_info_raw_envelope(daemon):
    resp = daemon.raw('GET', '/v1/system-info')
    assert resp.status == 200
    assert resp.headers.get_content_type() == 'application/json'
    body = resp.json
    assert list(body) == ['type', 'status-code', 'status', 'result']
    assert body['type'] == 'sync'
    assert body['status-code'] == 200
    assert body['status'] == 'OK'
    assert body['result']['version']
    assert body['result']['boot-id']


def test_get_warnings_is_404(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.get_warnings()
    assert excinfo.value.code == 404
    assert excinfo.value.message == 'invalid API endpoint requested'


def test_ack_warnings_is_404(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.ack_warnings(datetime.datetime.now(datetime.timezone.utc))
    assert excinfo.value.code == 404


@pytest.mark.parametrize('method', ['GET', 'POST'])
@pytest.mark.parametrize('path', ['/v1/nope', '/v2/services', '/', '/v1'])
def test_unknown_endpoint_is_404_json(daemon, method: str, path: str):
    body = b'{}' if method == 'POST' else None
    resp = daemon.raw(method, path, body)
    envelope = assert_error_envelope(resp, 404, 'invalid API endpoint requested')
    assert envelope['status'] == 'Not Found'


@pytest.mark.parametrize(
    'method,path',
    [
        ('DELETE', '/v1/services'),
        ('PUT', '/v1/services'),
        ('POST', '/v1/system-info'),
        ('POST', '/v1/plan'),
        ('GET', '/v1/layers'),
        ('GET', '/v1/signals'),
        ('DELETE', '/v1/changes'),
    ],
)
def test_wrong_method_is_405(daemon, method: str, path: str):
    body = b'{}' if method in ('POST', 'PUT') else None
    resp = daemon.raw(method, path, body)
    envelope = assert_error_envelope(resp, 405, f'method "{method}" not allowed')
    assert envelope['status'] == 'Method Not Allowed'


@pytest.mark.parametrize(
    'method,path,status',
    [('POST', '/v1/nope', 404), ('POST', '/v1/warnings', 404), ('PUT', '/v1/services', 405)],
)
def test_early_error_reply_still_reads_request_body(daemon, method: str, path: str, status: int):
    """Regression: an error decided from the request line alone must not
    hang up before the request body has been read.

    ops (urllib) writes the headers, then the body in a second write. Go's
    net/http drains a small unread body before closing (and half-closes to
    avoid resets), so with Pebble ops always sees the 404/405 as an
    APIError. A server that replies and closes at once makes ops' body
    write fail with EPIPE: an intermittent ops.pebble.ConnectionError.
    """
    body = b'{"action": "okay", "timestamp": "2024-01-01T00:00:00Z"}'
    with unix_socket(str(daemon.socket_path), 5) as sock:
        sock.sendall(request_head(method, path, body, None))
        received = b''
        closed = False
        # Give the server half a second to answer (and possibly hang up)
        # before the body is sent, as a slow client would.
        if select.select([sock], [], [], 0.5)[0]:
            sock.settimeout(0.5)
            try:
                while chunk := sock.recv(65536):
                    received += chunk
                closed = True
            except socket.timeout:
                pass
        assert not closed, (
            f'{method} {path}: server replied and closed the connection without reading the '
            f'{len(body)}-byte request body; reply was {received!r}'
        )
        sock.settimeout(5)
        sock.sendall(body)
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(f'HTTP/1.1 {status} '.encode()), received[:200]


OVERSIZED = b'{"action": "' + b'a' * (4 * 1024 * 1024)  # 4 MiB, never terminated

GARBAGE_BODIES = {
    'empty': b'',
    'not-json': b'this is not json',
    'truncated': b'{"action": ',
    'binary': b'\xff\xfe\x00\x01garbage',
    'wrong-type': b'{"action": 5, "services": "svc"}',
    'array': b'[1, 2, 3]',
    'null': b'null',
    'oversized': OVERSIZED,
}


@pytest.fixture
def busy_daemon(daemon, scratch: Path):
    """A daemon with a plan, a running service and one change."""
    client = daemon.client
    client.add_layer(
        'base',
        {
            'services': {
                'svc': {
                    'override': 'replace',
                    'command': f'/bin/sh -c "echo $$ > {scratch}/pid; exec sleep 1000"',
                }
            }
        },
    )
    change_id = client.start_services(['svc'])
    return daemon, change_id, read_pid(scratch / 'pid')


def snapshot(daemon) -> tuple:
    client = daemon.client
    plan = daemon.raw('GET', '/v1/plan?format=yaml').json['result']
    services = [(s.name, s.startup, s.current) for s in client.get_services()]
    changes = sorted((c.id, c.kind, c.status) for c in client.get_changes(ops.pebble.ChangeState.ALL))
    return plan, services, changes


@pytest.mark.parametrize('endpoint', ['/v1/services', '/v1/layers', '/v1/signals', 'change'])
def test_garbage_bodies_are_400_and_change_nothing(busy_daemon, endpoint: str):
    daemon, change_id, pid = busy_daemon
    path = f'/v1/changes/{change_id}' if endpoint == 'change' else endpoint
    before = snapshot(daemon)

    failures = []
    for name, body in GARBAGE_BODIES.items():
        try:
            # A 4 MiB body may legitimately be answered before it is all read.
            resp = daemon.raw('POST', path, body, tolerate_early_close=body is OVERSIZED)
        except OSError as e:
            failures.append(f'{name}: connection error {e!r}')
            continue
        try:
            assert_error_envelope(resp, 400)
        except (AssertionError, ValueError) as e:
            failures.append(f'{name}: got {resp.status} {resp.body[:200]!r} ({e})')
    assert not failures, f'POST {path}:\n' + '\n'.join(failures)

    assert snapshot(daemon) == before
    assert pid_alive(pid)
    assert current(daemon.client, 'svc') == ops.pebble.ServiceStatus.ACTIVE


def test_daemon_survives_garbage(busy_daemon):
    daemon, _, _ = busy_daemon
    for body in GARBAGE_BODIES.values():
        try:
            daemon.raw('POST', '/v1/layers', body, tolerate_early_close=True)
        except OSError:
            pass  # reported by test_garbage_bodies_are_400_and_change_nothing
    assert daemon.proc.poll() is None
    assert daemon.client.get_system_info().version


def test_health_over_unix_socket(daemon):
    resp = daemon.raw('GET', '/v1/health')
    assert resp.status == 200
    assert resp.json['result'] == {'healthy': True}


def test_http_listener_serves_open_endpoints(http_daemon):
    resp = http_daemon.raw_tcp('GET', '/v1/system-info')
    assert resp.status == 200
    assert resp.headers.get_content_type() == 'application/json'
    assert resp.json['result']['version'] == http_daemon.client.get_system_info().version

    resp = http_daemon.raw_tcp('GET', '/v1/health')
    assert resp.status == 200
    assert resp.json['result'] == {'healthy': True}


@pytest.mark.parametrize(
    'method,path,body',
    [
        ('GET', '/v1/services', None),
        ('POST', '/v1/services', b'{"action": "autostart", "services": []}'),
        ('GET', '/v1/plan?format=yaml', None),
        ('POST', '/v1/layers', b'{"action": "add", "label": "x", "format": "yaml", "layer": ""}'),
        ('GET', '/v1/changes', None),
    ],
)
def test_http_listener_rejects_non_open_endpoints(http_daemon, method, path, body):
    before = http_daemon.client.get_plan().to_dict()
    resp = http_daemon.raw_tcp(method, path, body)
    envelope = assert_error_envelope(resp, 401, 'access denied')
    assert envelope['result']['kind'] == 'login-required'
    assert envelope['status'] == 'Unauthorized'
    assert http_daemon.client.get_plan().to_dict() == before
    assert http_daemon.client.get_changes(ops.pebble.ChangeState.ALL) == []


def test_sigterm_stops_services_and_exits_zero(daemon, scratch: Path):
    client = daemon.client
    client.add_layer(
        'base',
        {
            'services': {
                'svc': {
                    'override': 'replace',
                    'command': f'/bin/sh -c "echo $$ > {scratch}/pid; exec sleep 1000"',
                }
            }
        },
    )
    client.start_services(['svc'])
    pid = read_pid(scratch / 'pid')
    assert pid_alive(pid)

    code = daemon.terminate(timeout=15)
    assert code == 0, f'daemon exit code after SIGTERM: {code}'
    wait_for(lambda: not pid_alive(pid), 5, what='service process to be stopped on shutdown')
    assert daemon.leftover_pids() == []


def test_async_envelope(busy_daemon):
    daemon, _, _ = busy_daemon
    resp = daemon.raw('POST', '/v1/services', b'{"action": "stop", "services": ["svc"]}')
    assert resp.status == 202
    body = resp.json
    # Field order and the explicit null result are part of the wire contract.
    assert list(body) == ['type', 'status-code', 'status', 'change', 'result']
    assert body['type'] == 'async'
    assert body['status-code'] == 202
    assert body['status'] == 'Accepted'
    assert isinstance(body['change'], str) and body['change']
    assert body['result'] is None
    assert daemon.client.wait_change(body['change'], timeout=10).status == 'Done'

"""The founding case, end to end, exactly as the charm and its helper drove Pebble.

An admission webhook is added as a layer built from a dict (so ops keeps only Pebble's
fields) and replanned before its TLS certificates exist: it exits quickly with code 255 and
the replan raises ChangeError. The certificates are pushed later with push(make_dirs=True),
and the charm's helper re-adds the identical layer without replanning. Under Pebble v1.12.0
the webhook never serves again; cobble must serve TLS within 2 s of the push, also when the
push comes 45 s after the first start. With `requires-paths` (layer sent as YAML text) it
must serve within 1 s of the push, with zero failed launches.
"""

from __future__ import annotations

import socket
import ssl
import sys
import time
from pathlib import Path

import ops
import pytest
import yaml

from helpers import wait_for

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
CERT = (FIXTURES / 'webhook-cert.pem').read_bytes()
KEY = (FIXTURES / 'webhook-key.pem').read_bytes()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def serves_tls(port: int) -> bool:
    context = ssl.create_default_context(cafile=str(FIXTURES / 'webhook-cert.pem'))
    context.check_hostname = False
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=0.5) as raw:
            with context.wrap_socket(raw, server_hostname='localhost') as tls:
                return tls.recv(3) == b'ok\n'
    except OSError:
        return False


def webhook_layer(certs: Path, port: int, launches: Path) -> dict:
    """The layer as the charm builds it: a dict, Pebble's fields only."""
    command = ' '.join([
        sys.executable,
        str(FIXTURES / 'fake_webhook.py'),
        f'--cert {certs}/cert.pem',
        f'--key {certs}/key.pem',
        f'--port {port}',
        f'--launch-log {launches}',
    ])
    return {
        'summary': 'admission webhook',
        'services': {
            'webhook': {
                'override': 'replace',
                'command': command,
                'startup': 'enabled',
                'on-check-failure': {'up': 'restart'},
            },
        },
        'checks': {
            'up': {
                'override': 'replace',
                'period': '1s',
                'threshold': 2,
                'tcp': {'port': port, 'host': '127.0.0.1'},
            },
        },
    }


def launches(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize('push_after', [5, 45])
def test_webhook_comes_back_after_late_certificates(held_daemon, push_after):
    client = held_daemon.client
    certs = held_daemon.dir / 'etc' / 'webhook' / 'certs'
    log = held_daemon.dir / 'launches'
    port = free_port()
    layer = webhook_layer(certs, port, log)

    # config-changed runs first: the layer goes in and is replanned before the certs exist.
    client.add_layer('webhook', layer, combine=True)
    first_start = time.monotonic()
    with pytest.raises(ops.pebble.ChangeError) as error:
        client.replan_services()
    assert 'exited quickly with code 255' in str(error.value)
    assert 'no such file or directory' in str(error.value)

    # Later hooks: identical update-layer calls that never replan (the helper sees no diff).
    while time.monotonic() - first_start < push_after:
        client.add_layer('webhook', layer, combine=True)
        time.sleep(1)
    assert not serves_tls(port)

    # pebble-ready: the certs are pushed, then the same identical layer again.
    client.push(str(certs / 'key.pem'), KEY, make_dirs=True)
    client.push(str(certs / 'cert.pem'), CERT, make_dirs=True)
    pushed = time.monotonic()
    client.add_layer('webhook', layer, combine=True)

    wait_for(lambda: serves_tls(port), timeout=10, what='the webhook to serve TLS')
    elapsed = time.monotonic() - pushed
    assert elapsed < 2.0, f'served {elapsed:.2f}s after the push'
    service = client.get_services(['webhook'])[0]
    assert service.current == ops.pebble.ServiceStatus.ACTIVE


def test_requires_paths_starts_within_a_second_with_no_failed_launch(held_daemon):
    client = held_daemon.client
    certs = held_daemon.dir / 'etc' / 'webhook' / 'certs'
    log = held_daemon.dir / 'launches'
    port = free_port()
    layer = webhook_layer(certs, port, log)
    layer['services']['webhook']['requires-paths'] = [
        str(certs / 'cert.pem'),
        str(certs / 'key.pem'),
    ]
    # Sent as YAML text: ops passes it through, so cobble's field reaches the daemon.
    client.add_layer('webhook', yaml.safe_dump(layer), combine=True)
    client.replan_services()  # no ChangeError: the service waits for its paths
    assert client.get_services(['webhook'])[0].current == 'waiting'

    time.sleep(2)
    assert launches(log) == 0
    client.push(str(certs / 'key.pem'), KEY, make_dirs=True)
    client.push(str(certs / 'cert.pem'), CERT, make_dirs=True)
    pushed = time.monotonic()
    wait_for(lambda: serves_tls(port), timeout=10, what='the webhook to serve TLS')
    elapsed = time.monotonic() - pushed
    assert elapsed < 1.0, f'served {elapsed:.2f}s after the push'
    assert launches(log) == 1, 'zero failed launches'

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


CERT_B = (FIXTURES / 'webhook-cert-b.pem').read_bytes()
KEY_B = (FIXTURES / 'webhook-key-b.pem').read_bytes()


def presented_cert(port: int) -> bytes | None:
    """The certificate the webhook presents now (PEM), or None if it does not answer."""
    try:
        pem = ssl.get_server_certificate(('127.0.0.1', port), timeout=0.5)
    except OSError:
        return None
    return ssl.PEM_cert_to_DER_cert(pem)


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


@pytest.mark.parametrize('rotation', ['atomic-rename', 'torn-in-place', 'symlink-swap'])
def test_certificate_rotation_restarts_once_onto_the_new_pair(held_daemon, rotation):
    """S3, variant a: on-file-change restart; new handshakes present cert B."""
    client = held_daemon.client
    base = held_daemon.dir / 'certs'
    base.mkdir()
    if rotation == 'symlink-swap':
        # The kubelet layout: cert.pem -> ..data/cert.pem, ..data -> ..v1
        (base / '..v1').mkdir()
        (base / '..v1' / 'cert.pem').write_bytes(CERT)
        (base / '..v1' / 'key.pem').write_bytes(KEY)
        (base / '..data').symlink_to('..v1')
        (base / 'cert.pem').symlink_to('..data/cert.pem')
        (base / 'key.pem').symlink_to('..data/key.pem')
    else:
        (base / 'cert.pem').write_bytes(CERT)
        (base / 'key.pem').write_bytes(KEY)
    log = held_daemon.dir / 'launches'
    port = free_port()
    layer = webhook_layer(base, port, log)
    layer['services']['webhook']['on-file-change'] = {
        str(base / 'cert.pem'): 'restart',
        str(base / 'key.pem'): 'restart',
    }
    client.add_layer('webhook', yaml.safe_dump(layer), combine=True)
    client.start_services(['webhook'])
    wait_for(lambda: presented_cert(port) == der(CERT), timeout=10, what='cert A served')

    if rotation == 'atomic-rename':
        for name, content in (('cert.pem', CERT_B), ('key.pem', KEY_B)):
            (base / f'.{name}.tmp').write_bytes(content)
            (base / f'.{name}.tmp').rename(base / name)
    elif rotation == 'torn-in-place':
        # cert first, key 300 ms later: a transient mismatched pair
        (base / 'cert.pem').write_bytes(CERT_B)
        time.sleep(0.3)
        (base / 'key.pem').write_bytes(KEY_B)
    else:
        (base / '..v2').mkdir()
        (base / '..v2' / 'cert.pem').write_bytes(CERT_B)
        (base / '..v2' / 'key.pem').write_bytes(KEY_B)
        (base / '..data_tmp').symlink_to('..v2')
        (base / '..data_tmp').rename(base / '..data')
    rotated = time.monotonic()
    wait_for(lambda: presented_cert(port) == der(CERT_B), timeout=10, what='cert B served')
    # debounce (0.5 s) + restart; generous for a shared machine
    assert time.monotonic() - rotated < 3.0
    time.sleep(1.5)
    assert launches(log) == 2, 'one restart for the whole rotation'


def test_certificate_rotation_with_ignore_restarts_nothing(held_daemon):
    """S3, variant b: the workload reloads by itself; cobble must not restart it."""
    client = held_daemon.client
    base = held_daemon.dir / 'certs'
    base.mkdir()
    (base / 'cert.pem').write_bytes(CERT)
    (base / 'key.pem').write_bytes(KEY)
    log = held_daemon.dir / 'launches'
    port = free_port()
    layer = webhook_layer(base, port, log)
    layer['services']['webhook']['on-file-change'] = {
        str(base / 'cert.pem'): 'ignore',
        str(base / 'key.pem'): 'ignore',
    }
    client.add_layer('webhook', yaml.safe_dump(layer), combine=True)
    client.start_services(['webhook'])
    (base / 'cert.pem').write_bytes(CERT_B)
    (base / 'key.pem').write_bytes(KEY_B)
    time.sleep(2)
    assert launches(log) == 1

"""The founding case end to end with cobble's own webhook (crates/admission-webhook).

The charm's layer exactly (service `admission-webhook`, a TCP check `admission-webhook-up`
with `on-check-failure: restart`), built as a dict so ops keeps only Pebble's fields, is
replanned before the certificates exist. Where the Go webhook exits 255 at once, this one
waits: the replan succeeds and the service stays active. The certificates are pushed later
(`push(make_dirs=True)`, as the charm does), the identical layer is re-added without a
replan, and the webhook must answer an AdmissionReview correctly within 2 s of the push.

With the socket held by cobble (`sockets:`), admissions sent while the webhook restarts for a
certificate rotation are all answered: they wait in the socket's backlog for the next run.

The push comes `COMPAT_FOUNDING_PUSH_AFTER` seconds after the replan: 3 by default, and 45 in
the charm's real timing (`COMPAT_FOUNDING_PUSH_AFTER=45 tests/compat/run.sh -k rust`).
The binary is `ADMISSION_WEBHOOK_BIN` (run.sh defaults it to target/debug/admission-webhook).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import ops
import pytest

from conftest import cobble_bin
from fake_apiserver import FakeApiServer
from helpers import wait_for

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
CERT = (FIXTURES / 'webhook-cert.pem').read_bytes()
KEY = (FIXTURES / 'webhook-key.pem').read_bytes()
PUSH_AFTER = float(os.environ.get('COMPAT_FOUNDING_PUSH_AFTER', '3'))

POD_DEFAULT = {
    'metadata': {'name': 'access-ml-pipeline', 'namespace': 'user1', 'resourceVersion': '12345'},
    'spec': {
        'selector': {'matchLabels': {'access-ml-pipeline': 'true'}},
        'env': [{'name': 'KF_PIPELINES_SA_TOKEN_PATH', 'value': '/var/run/secrets/kubeflow/pipelines/token'}],
        'volumes': [{'name': 'volume-kf-pipeline-token', 'projected': {'sources': [
            {'serviceAccountToken': {'audience': 'pipelines.kubeflow.org', 'expirationSeconds': 7200, 'path': 'token'}}]}}],
        'volumeMounts': [{'name': 'volume-kf-pipeline-token', 'mountPath': '/var/run/secrets/kubeflow/pipelines', 'readOnly': True}],
    },
}
POD = {
    'apiVersion': 'v1', 'kind': 'Pod',
    'metadata': {'generateName': 'nb-0', 'labels': {'access-ml-pipeline': 'true'}},
    'spec': {'containers': [{'name': 'nb', 'image': 'jupyter'}]},
}


def webhook_bin() -> str:
    path = os.environ.get('ADMISSION_WEBHOOK_BIN')
    if not path:
        default = Path(__file__).resolve().parents[2] / 'target' / 'debug' / 'admission-webhook'
        if not os.access(default, os.X_OK):
            pytest.skip('no admission-webhook binary (cargo build -p admission-webhook, or set ADMISSION_WEBHOOK_BIN)')
        path = str(default)
    assert os.access(path, os.X_OK), f'ADMISSION_WEBHOOK_BIN is not executable: {path}'
    return path


def webhook_command(certs: Path, port: int, kubeconfig: Path) -> str:
    """The webhook as the charm runs it, with this test's certificates, port and kubeconfig."""
    return ' '.join([
        webhook_bin(),
        f'-tlsCertFile={certs}/cert.pem',
        f'-tlsKeyFile={certs}/key.pem',
        f'-webhookPort={port}',
        f'-kubeconfig={kubeconfig}',
    ])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def charm_layer(command: str, port: int) -> dict:
    """The admission-webhook charm's layer; only the command and the port are this test's."""
    return {
        'summary': 'admission-webhook layer',
        'description': 'Pebble config layer for admission-webhook-operator',
        'services': {
            'admission-webhook': {
                'override': 'replace',
                'summary': 'Pebble service for admission-webhook-operator',
                'startup': 'enabled',
                'command': command,
                'on-check-failure': {'admission-webhook-up': 'restart'},
            },
        },
        'checks': {
            'admission-webhook-up': {
                'override': 'replace',
                'period': '30s',
                'timeout': '20s',
                'threshold': 4,
                'tcp': {'port': port},
            },
        },
    }


def admission_review(port: int, timeout: float = 2) -> dict | None:
    """POSTs an AdmissionReview v1 for the notebook pod; None while nothing answers."""
    context = ssl.create_default_context(cafile=str(FIXTURES / 'webhook-cert.pem'))
    context.check_hostname = False
    body = json.dumps({
        'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
        'request': {
            'uid': 'founding-uid', 'kind': {'group': '', 'version': 'v1', 'kind': 'Pod'},
            'resource': {'group': '', 'version': 'v1', 'resource': 'pods'},
            'namespace': 'user1', 'operation': 'CREATE', 'object': POD,
        },
    })
    try:
        conn = http.client.HTTPSConnection('127.0.0.1', port, context=context, timeout=timeout)
        conn.request('POST', '/apply-poddefault', body, {'Content-Type': 'application/json'})
        response = conn.getresponse()
        data = response.read()
        conn.close()
    except OSError:
        return None
    assert response.status == 200, data
    return json.loads(data)


def test_rust_webhook_answers_within_two_seconds_of_a_late_push(held_daemon):
    client = held_daemon.client
    certs = held_daemon.dir / 'etc' / 'webhook' / 'certs'
    port = free_port()
    with FakeApiServer([POD_DEFAULT]) as api:
        kubeconfig = held_daemon.dir / 'kubeconfig'
        api.write_kubeconfig(kubeconfig)
        command = webhook_command(certs, port, kubeconfig)
        layer = charm_layer(command, port)

        # config-changed runs first: the layer goes in and is replanned before the certs exist.
        client.add_layer('admission-webhook', layer, combine=True)
        replanned = time.monotonic()
        client.replan_services()  # no ChangeError: the webhook waits instead of exiting
        [service] = client.get_services(['admission-webhook'])
        assert service.current == ops.pebble.ServiceStatus.ACTIVE

        # Later hooks: identical update-layer calls that never replan.
        while time.monotonic() - replanned < PUSH_AFTER:
            client.add_layer('admission-webhook', layer, combine=True)
            time.sleep(1)
        assert admission_review(port) is None, 'nothing listens before the certificates exist'

        # pebble-ready: the certs are pushed, then the same identical layer again.
        client.push(str(certs / 'key.pem'), KEY, make_dirs=True)
        client.push(str(certs / 'cert.pem'), CERT, make_dirs=True)
        pushed = time.monotonic()
        client.add_layer('admission-webhook', layer, combine=True)

        answer = wait_for(lambda: admission_review(port), timeout=10, what='an AdmissionReview answer')
        elapsed = time.monotonic() - pushed
        assert elapsed < 2.0, f'answered {elapsed:.2f}s after the push'

        assert answer['apiVersion'] == 'admission.k8s.io/v1'
        assert answer['kind'] == 'AdmissionReview'
        response = answer['response']
        assert response['uid'] == 'founding-uid'
        assert response['allowed'] is True
        assert response['patchType'] == 'JSONPatch'
        patch = json.loads(base64.b64decode(response['patch']))
        ops_by_path = {op['path']: op for op in patch}
        assert ops_by_path['/spec/containers/0/env']['value'] == POD_DEFAULT['spec']['env']
        assert ops_by_path['/spec/volumes']['value'] == POD_DEFAULT['spec']['volumes']
        assert ops_by_path['/spec/containers/0/volumeMounts']['value'] == POD_DEFAULT['spec']['volumeMounts']
        assert ops_by_path['/metadata/annotations']['value'] == {
            'poddefault.admission.kubeflow.org/poddefault-access-ml-pipeline': '12345'}
        assert api.lists >= 1

        # The same process all along: no exit, no restart by a check.
        [service] = client.get_services(['admission-webhook'])
        assert service.current == ops.pebble.ServiceStatus.ACTIVE
        changes = client.get_changes(select=ops.pebble.ChangeState.ALL)
        assert [c.kind for c in changes if c.kind in ('restart', 'start')] in ([], ['start']), changes


def test_rust_webhook_on_a_held_socket_answers_every_admission_across_restarts(held_daemon):
    """The founding case with the socket held by cobble (`sockets:`): the webhook accepts on
    the socket cobble passes (fd 3, LISTEN_FDS), and AdmissionReviews sent while it restarts
    for a certificate rotation wait in the socket's backlog and are all answered; none is
    refused, none fails. The layer goes in as YAML: ops' Layer keeps only Pebble's fields."""
    client = held_daemon.client
    certs = held_daemon.dir / 'etc' / 'webhook' / 'certs'
    port = free_port()
    client.push(str(certs / 'key.pem'), KEY, make_dirs=True)
    client.push(str(certs / 'cert.pem'), CERT, make_dirs=True)
    with FakeApiServer([POD_DEFAULT]) as api:
        kubeconfig = held_daemon.dir / 'kubeconfig'
        api.write_kubeconfig(kubeconfig)
        command = webhook_command(certs, port, kubeconfig)
        client.add_layer('admission-webhook', f"""
services:
  admission-webhook:
    override: replace
    startup: enabled
    command: {command}
    sockets:
      https:
        listen: 127.0.0.1:{port}
""", combine=True)
        client.replan_services()
        wait_for(lambda: admission_review(port), timeout=10, what='a first AdmissionReview answer')
        logs = subprocess.run(
            [cobble_bin(), 'logs', 'admission-webhook'],
            env={**os.environ, 'PEBBLE': str(held_daemon.pebble_dir)},
            capture_output=True, text=True, check=True,
        ).stdout
        assert 'using listening socket "https" (fd 3) passed by the service manager' in logs

        results: list[tuple[float, float, bool]] = []
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    answer = admission_review(port, timeout=10)
                    ok = answer is not None and answer['response']['allowed'] is True
                except AssertionError:
                    ok = False
                results.append((started, time.monotonic(), ok))

        sender = threading.Thread(target=load)
        sender.start()
        restarts = []
        try:
            for _ in range(5):
                time.sleep(0.3)
                # A rotation handled by restart: the pair pushed again, then the service restarted.
                client.push(str(certs / 'key.pem'), KEY, make_dirs=True)
                client.push(str(certs / 'cert.pem'), CERT, make_dirs=True)
                began = time.monotonic()
                client.restart_services(['admission-webhook'])
                restarts.append((began, time.monotonic()))
            time.sleep(0.3)
        finally:
            stop.set()
            sender.join(timeout=30)

    failed = [r for r in results if not r[2]]
    assert not failed, f'{len(failed)} of {len(results)} admissions failed'
    # Requests were in flight across every restart, and each was answered.
    for began, ended in restarts:
        during = [r for r in results if began <= r[0] <= ended]
        assert during, f'no admission was sent during the restart at {began:.3f}'
    changes = client.get_changes(select=ops.pebble.ChangeState.ALL)
    assert sum(1 for c in changes if c.kind == 'restart') == 5

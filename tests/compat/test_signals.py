"""`Client.send_signal` (POST /v1/signals).

Pebble facts pinned here (daemon/api_signals.go, servstate SendSignal):
- the signal goes to the service's main process and the reply is `true`;
- any named service that is not running (never started, stopped, unknown)
  fails the whole request with 500 `cannot send signal to "x": service is
  not running`;
- a bad signal name for a running service is 500 `... invalid signal name`;
- an empty service list is 400 `must specify one or more services`.
"""

from __future__ import annotations

import signal
from pathlib import Path

import ops
import pytest

from helpers import wait_for


def trapper(scratch: Path) -> dict:
    log = scratch / 'signals'
    ready = scratch / 'ready'
    script = (
        f'trap "echo hup >> {log}" HUP; '
        f'trap "echo usr1 >> {log}" USR1; '
        f'echo ready > {ready}; '
        'while true; do sleep 0.1; done'
    )
    return {'override': 'replace', 'command': f"/bin/sh -c '{script}'"}


def received(scratch: Path) -> list[str]:
    try:
        return (scratch / 'signals').read_text().split()
    except FileNotFoundError:
        return []


@pytest.fixture
def running_trapper(client: ops.pebble.Client, scratch: Path) -> ops.pebble.Client:
    client.add_layer('base', {'services': {'trapper': trapper(scratch)}})
    client.start_services(['trapper'])
    wait_for(lambda: (scratch / 'ready').exists(), 5, what='trapper to install its traps')
    return client


def test_signal_by_name_reaches_service(running_trapper: ops.pebble.Client, scratch: Path):
    running_trapper.send_signal('SIGHUP', ['trapper'])
    wait_for(lambda: 'hup' in received(scratch), 5, what='SIGHUP to be trapped')


def test_signal_by_number_reaches_service(running_trapper: ops.pebble.Client, scratch: Path):
    # ops converts ints to names ("SIGUSR1") before sending.
    running_trapper.send_signal(signal.SIGUSR1, ['trapper'])
    wait_for(lambda: 'usr1' in received(scratch), 5, what='SIGUSR1 to be trapped')


def test_signal_reply_is_true(daemon, running_trapper: ops.pebble.Client):
    resp = daemon.raw('POST', '/v1/signals', b'{"signal": "SIGHUP", "services": ["trapper"]}')
    assert resp.status == 200
    assert resp.json['result'] is True


def test_signal_to_never_started_service_is_500(client: ops.pebble.Client):
    client.add_layer('base', {'services': {'idle': {'override': 'replace', 'command': 'sleep 1000'}}})
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.send_signal('SIGHUP', ['idle'])
    assert excinfo.value.code == 500
    assert excinfo.value.message == 'cannot send signal to "idle": service is not running'


def test_signal_to_stopped_service_is_500(running_trapper: ops.pebble.Client, scratch: Path):
    running_trapper.stop_services(['trapper'])
    with pytest.raises(ops.pebble.APIError) as excinfo:
        running_trapper.send_signal('SIGHUP', ['trapper'])
    assert excinfo.value.code == 500
    assert excinfo.value.message == 'cannot send signal to "trapper": service is not running'
    assert 'hup' not in received(scratch)


def test_signal_to_unknown_service_is_500(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.send_signal('SIGHUP', ['nope'])
    assert excinfo.value.code == 500
    assert excinfo.value.message == 'cannot send signal to "nope": service is not running'


def test_invalid_signal_name_is_500(running_trapper: ops.pebble.Client, scratch: Path):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        running_trapper.send_signal('SIGFOO', ['trapper'])
    assert excinfo.value.code == 500
    assert excinfo.value.message == 'cannot send signal to "trapper": invalid signal name "SIGFOO"'
    # The service is unaffected.
    assert running_trapper.get_services(['trapper'])[0].is_running()


def test_signal_with_no_services_is_400(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.send_signal('SIGHUP', [])
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'must specify one or more services'

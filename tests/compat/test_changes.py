"""Changes: `Client.get_changes`, `get_change`, `wait_change`, `abort_change`.

Pebble facts pinned here (daemon/api_changes.go, overlord/state):
- `select` is in-progress by default, or all / ready; `for=<service>`
  matches the services named by the change's action;
- `/v1/changes/{id}/wait?timeout=` answers 504 `timed out waiting for change
  after <dur>` when the change is not ready in time; ops turns that into
  `ops.pebble.TimeoutError`;
- aborting a start during its okay delay SIGKILLs the process: the task
  fails with `start aborted, sent SIGKILL to process`, the change ends in
  Error and the service is inactive; the abort reply shows status Abort;
- aborting a ready change is 400 `cannot abort change N with nothing
  pending`; an unknown id is 404 `cannot find change with id "N"`.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from pathlib import Path
from typing import Iterator

import ops
import pytest

from helpers import current, kill_process_group, pid_alive, read_pid, wait_for

ALL = ops.pebble.ChangeState.ALL
IN_PROGRESS = ops.pebble.ChangeState.IN_PROGRESS
READY = ops.pebble.ChangeState.READY


def sleeper(pidfile: Path) -> dict:
    return {
        'override': 'replace',
        'command': f'/bin/sh -c "echo $$ > {pidfile}; exec sleep 1000"',
    }


def stubborn(pidfile: Path) -> dict:
    """Ignores SIGTERM (the ignore disposition survives exec), so a stop
    waits the whole 30 s kill-delay before SIGKILL."""
    return {
        'override': 'replace',
        'command': f"/bin/sh -c 'echo $$ > {pidfile}; trap \"\" TERM; exec sleep 1000'",
        'kill-delay': '30s',
    }


@contextlib.contextmanager
def stopping_stubborn(client: ops.pebble.Client, scratch: Path) -> Iterator[tuple[str, int]]:
    """Start `stubborn`, begin stopping it, yield (stop change id, pid).

    On exit the process group is SIGKILLed so the stop finishes promptly and
    the daemon can shut down without waiting out the kill-delay.
    """
    pidfile = scratch / 'stubborn.pid'
    client.add_layer('stubborn', {'services': {'stubborn': stubborn(pidfile)}})
    client.start_services(['stubborn'])
    pid = read_pid(pidfile)
    change_id = client.stop_services(['stubborn'], timeout=0)
    try:
        yield change_id, pid
    finally:
        kill_process_group(pid)
        client.wait_change(change_id, timeout=15)


def ids(changes: list[ops.pebble.Change]) -> set[str]:
    return {c.id for c in changes}


def test_no_changes_initially(client: ops.pebble.Client):
    assert client.get_changes(ALL) == []
    assert client.get_changes() == []


def test_get_changes_select_and_service_filter(client: ops.pebble.Client, scratch: Path):
    client.add_layer('quick', {'services': {'quick': sleeper(scratch / 'quick.pid')}})
    start_quick = client.start_services(['quick'])

    with stopping_stubborn(client, scratch) as (stop_stubborn, _pid):
        start_stubborn = next(
            c.id for c in client.get_changes(ALL, service='stubborn') if c.kind == 'start'
        )
        stop = client.get_change(stop_stubborn)
        assert stop.kind == 'stop'
        assert not stop.ready
        assert stop.status in ('Do', 'Doing')

        assert ids(client.get_changes(ALL)) == {start_quick, start_stubborn, stop_stubborn}
        assert ids(client.get_changes()) == {stop_stubborn}
        assert ids(client.get_changes(IN_PROGRESS)) == {stop_stubborn}
        assert ids(client.get_changes(READY)) == {start_quick, start_stubborn}

        assert ids(client.get_changes(ALL, service='quick')) == {start_quick}
        assert ids(client.get_changes(ALL, service='stubborn')) == {start_stubborn, stop_stubborn}
        assert ids(client.get_changes(READY, service='stubborn')) == {start_stubborn}
        assert ids(client.get_changes(IN_PROGRESS, service='quick')) == set()
        assert client.get_changes(ALL, service='nope') == []


def test_get_change_fields(client: ops.pebble.Client, scratch: Path):
    before = datetime.datetime.now(datetime.timezone.utc)
    client.add_layer('base', {'services': {'svc': sleeper(scratch / 'pid')}})
    change_id = client.start_services(['svc'])
    change = client.get_change(change_id)

    assert change.id == change_id
    assert change.kind == 'start'
    assert change.summary == 'Start service "svc"'
    assert change.status == 'Done'
    assert change.ready is True
    assert change.err is None
    assert change.spawn_time.tzinfo is not None
    assert change.ready_time is not None
    assert before - datetime.timedelta(seconds=5) <= change.spawn_time <= change.ready_time
    # The start waited out the 1 s okay delay.
    assert change.ready_time - change.spawn_time >= datetime.timedelta(seconds=0.9)

    [task] = change.tasks
    assert task.kind == 'start'
    assert task.summary == 'Start service "svc"'
    assert task.status == 'Done'
    assert (task.progress.label, task.progress.done, task.progress.total) == ('', 1, 1)
    assert task.spawn_time.tzinfo is not None
    assert task.ready_time is not None and task.ready_time >= task.spawn_time


def test_get_change_raw_shape(daemon, scratch: Path):
    client = daemon.client
    client.add_layer('base', {'services': {'svc': sleeper(scratch / 'pid')}})
    change_id = client.start_services(['svc'])
    resp = daemon.raw('GET', f'/v1/changes/{change_id}')
    assert resp.status == 200
    assert resp.headers.get_content_type() == 'application/json'
    body = resp.json
    assert list(body)[:3] == ['type', 'status-code', 'status']
    assert body['type'] == 'sync' and body['status'] == 'OK'
    result = body['result']
    assert result['id'] == change_id
    assert 'err' not in result  # omitted when empty
    task = result['tasks'][0]
    assert task['progress'] == {'label': '', 'done': 1, 'total': 1}


def test_wait_change_returns_ready_change(client: ops.pebble.Client, scratch: Path):
    client.add_layer('base', {'services': {'svc': sleeper(scratch / 'pid')}})
    change_id = client.start_services(['svc'], timeout=0)
    change = client.wait_change(change_id, timeout=10)
    assert change.id == change_id
    assert change.ready
    assert change.status == 'Done'
    assert current(client, 'svc') == ops.pebble.ServiceStatus.ACTIVE


def test_wait_change_timeout_raises_timeout_error(daemon, scratch: Path):
    client = daemon.client
    pidfile = scratch / 'stubborn.pid'
    client.add_layer('stubborn', {'services': {'stubborn': stubborn(pidfile)}})
    client.start_services(['stubborn'])
    pid = read_pid(pidfile)
    try:
        # The *_services helpers wait through wait_change and time out too.
        t0 = time.monotonic()
        with pytest.raises(ops.pebble.TimeoutError):
            client.stop_services(['stubborn'], timeout=1)
        assert time.monotonic() - t0 < 5
        [change] = client.get_changes(IN_PROGRESS, service='stubborn')
        change_id = change.id
        assert change.kind == 'stop'

        t0 = time.monotonic()
        with pytest.raises(ops.pebble.TimeoutError):
            client.wait_change(change_id, timeout=1)
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 5, elapsed
        # ops' TimeoutError is also the builtin one.
        assert issubclass(ops.pebble.TimeoutError, TimeoutError)

        # The wire form ops relies on: 504 with Pebble's message.
        resp = daemon.raw('GET', f'/v1/changes/{change_id}/wait?timeout=0.500s')
        assert resp.status == 504
        assert resp.json['result']['message'] == 'timed out waiting for change after 500ms'

        assert pid_alive(pid)
        assert not client.get_change(change_id).ready
    finally:
        kill_process_group(pid)

    # Once the process is gone the stop completes normally.
    change = client.wait_change(change_id, timeout=10)
    assert change.status == 'Done'
    assert current(client, 'stubborn') == ops.pebble.ServiceStatus.INACTIVE


def test_abort_in_progress_start(client: ops.pebble.Client, scratch: Path):
    # The okay delay is 1 s, and the abort must land inside it. On a loaded machine the
    # process can take most of that second to write its PID, so an attempt whose abort came
    # too late (the start was already done) must show that consistently and is tried again.
    for attempt in range(5):
        name = f'slow{attempt}'
        pidfile = scratch / f'pid{attempt}'
        client.add_layer(name, {'services': {name: sleeper(pidfile)}})
        change_id = client.start_services([name], timeout=0)

        def task_doing():
            change = client.get_change(change_id)
            return bool(change.tasks) and change.tasks[0].status == 'Doing'

        wait_for(task_doing, 0.8, 0.01, 'start task to be Doing')
        pid = read_pid(pidfile, 0.8)
        try:
            aborted = client.abort_change(change_id)
        except ops.pebble.APIError as e:
            # Ready before the abort arrived: nothing pending any more.
            assert e.code == 400 and 'nothing pending' in e.message, e
            assert client.get_change(change_id).status == 'Done'
            assert current(client, name) == ops.pebble.ServiceStatus.ACTIVE
            continue
        assert aborted.id == change_id
        assert aborted.status == 'Abort'
        assert not aborted.ready

        change = client.wait_change(change_id, timeout=10)
        assert change.ready
        if change.status == 'Done':
            # The okay delay ran out while the abort was on its way: the start stands.
            assert change.tasks[0].status == 'Done'
            assert current(client, name) == ops.pebble.ServiceStatus.ACTIVE
            assert pid_alive(pid)
            continue
        assert change.status == 'Error'
        assert change.err is not None and 'start aborted' in change.err, change.err
        assert change.tasks[0].status == 'Error'
        assert current(client, name) == ops.pebble.ServiceStatus.INACTIVE
        wait_for(lambda: not pid_alive(pid), 5, what='aborted start to kill the process')
        return
    pytest.fail('no abort landed inside the okay delay in 5 attempts')


def test_abort_ready_change_is_400(client: ops.pebble.Client, scratch: Path):
    client.add_layer('base', {'services': {'svc': sleeper(scratch / 'pid')}})
    change_id = client.start_services(['svc'])
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.abort_change(change_id)
    assert excinfo.value.code == 400
    assert excinfo.value.message == f'cannot abort change {change_id} with nothing pending'
    assert client.get_change(change_id).status == 'Done'


def test_get_change_unknown_is_404(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.get_change(ops.pebble.ChangeID('9999'))
    assert excinfo.value.code == 404
    assert excinfo.value.message == 'cannot find change with id "9999"'


def test_abort_unknown_change_is_404(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.abort_change(ops.pebble.ChangeID('9999'))
    assert excinfo.value.code == 404


def test_wait_change_unknown_is_404(client: ops.pebble.Client):
    # ops reads a 404 from /wait as "old server", falls back to polling
    # GET /v1/changes/{id}, and that 404 surfaces as APIError.
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.wait_change(ops.pebble.ChangeID('9999'), timeout=2)
    assert excinfo.value.code == 404


def test_get_changes_bad_select_is_400(daemon):
    resp = daemon.raw('GET', '/v1/changes?select=bogus')
    assert resp.status == 400
    assert resp.json['result']['message'] == 'select should be one of: all,in-progress,ready'


def test_kill_delay_escalates_to_sigkill(client: ops.pebble.Client, scratch: Path):
    pidfile = scratch / 'pid'
    service = stubborn(pidfile)
    service['kill-delay'] = '1s'
    client.add_layer('base', {'services': {'stubborn': service}})
    client.start_services(['stubborn'])
    pid = read_pid(pidfile)
    try:
        t0 = time.monotonic()
        change = client.get_change(client.stop_services(['stubborn'], timeout=10))
        elapsed = time.monotonic() - t0
    finally:
        kill_process_group(pid)
    assert change.status == 'Done'
    # SIGTERM is ignored; SIGKILL follows the 1 s kill-delay.
    assert 0.9 <= elapsed < 5, elapsed
    assert not pid_alive(pid)
    assert current(client, 'stubborn') == ops.pebble.ServiceStatus.INACTIVE


def test_start_while_terminating_fails(client: ops.pebble.Client, scratch: Path):
    with stopping_stubborn(client, scratch) as (_stop_id, pid):
        wait_for(
            lambda: current(client, 'stubborn') == ops.pebble.ServiceStatus.INACTIVE,
            5,
            what='stubborn to be terminating (reported inactive)',
        )
        with pytest.raises(ops.pebble.ChangeError) as excinfo:
            client.start_services(['stubborn'])
        assert 'cannot start service while terminating' in excinfo.value.err
        assert pid_alive(pid)

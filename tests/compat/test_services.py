"""Service lifecycle through `Client.{get,start,stop,restart,replan,autostart}_services`.

Pebble facts pinned here (daemon/api_services.go, overlord/servstate):
- GET /v1/services is sorted by name, unknown names are dropped, `startup`
  is `disabled` unless the plan says `enabled`, never-started is `inactive`;
- start waits for the 1 s okay delay; a process that exits before it fails
  the change with `service start attempt: exited quickly with code N, will
  <action>` and the task log carries the last lines of output;
- the on-failure action still runs after a quick exit (since 1.17): `restart`
  backs off and retries, `ignore` leaves the service in `error`;
- replan starts `startup: enabled` services and restarts services whose
  config changed since they were started; unchanged running ones are left;
- autostart with no enabled services is 400, kind `no-default-services`;
- unknown names are 400 `cannot <action> services: service "x" does not exist`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import ops
import pytest

from helpers import current, pid_alive, read_pid, wait_for

ACTIVE = ops.pebble.ServiceStatus.ACTIVE
INACTIVE = ops.pebble.ServiceStatus.INACTIVE
ERROR = ops.pebble.ServiceStatus.ERROR
ENABLED = ops.pebble.ServiceStartup.ENABLED
DISABLED = ops.pebble.ServiceStartup.DISABLED


def sleeper(pidfile: Path, **extra) -> dict:
    """A long-running service that records its PID (the group leader)."""
    return {
        'override': 'replace',
        'command': f'/bin/sh -c "echo $$ > {pidfile}; exec sleep 1000"',
        **extra,
    }


def add_services(client: ops.pebble.Client, label: str = 'base', **services: dict) -> None:
    client.add_layer(label, {'services': services})


def test_get_services_startup_current_and_names_filter(client: ops.pebble.Client):
    add_services(
        client,
        gamma={'override': 'replace', 'command': 'sleep 1000'},
        alpha={'override': 'replace', 'command': 'sleep 1000', 'startup': 'enabled'},
        beta={'override': 'replace', 'command': 'sleep 1000', 'startup': 'disabled'},
    )
    infos = client.get_services()
    assert [(i.name, i.startup, i.current) for i in infos] == [
        ('alpha', ENABLED, INACTIVE),
        ('beta', DISABLED, INACTIVE),
        ('gamma', DISABLED, INACTIVE),
    ]
    assert [i.name for i in client.get_services(['gamma', 'beta'])] == ['beta', 'gamma']
    # Unknown names are silently dropped.
    assert [i.name for i in client.get_services(['alpha', 'nope'])] == ['alpha']
    assert client.get_services(['nope']) == []


def test_get_services_empty_plan(client: ops.pebble.Client):
    assert client.get_services() == []


def test_start_stop_restart(client: ops.pebble.Client, scratch: Path):
    pidfile = scratch / 'pid'
    add_services(client, svc=sleeper(pidfile))

    change_id = client.start_services(['svc'])
    assert isinstance(change_id, ops.pebble.ChangeID)
    info = client.get_services(['svc'])[0]
    assert info.current == ACTIVE
    assert info.is_running()
    pid1 = read_pid(pidfile)
    assert pid_alive(pid1)

    change = client.get_change(change_id)
    assert change.kind == 'start'
    assert change.summary == 'Start service "svc"'
    assert change.status == 'Done'
    assert change.ready
    assert change.err is None
    assert [(t.kind, t.summary, t.status) for t in change.tasks] == [
        ('start', 'Start service "svc"', 'Done')
    ]

    pidfile.unlink()
    change_id = client.restart_services(['svc'])
    assert current(client, 'svc') == ACTIVE
    pid2 = read_pid(pidfile)
    assert pid2 != pid1
    wait_for(lambda: not pid_alive(pid1), 5, what='old process to be gone after restart')
    change = client.get_change(change_id)
    assert change.kind == 'restart'
    assert change.summary == 'Restart service "svc"'
    assert [(t.kind, t.summary) for t in change.tasks] == [
        ('stop', 'Stop service "svc"'),
        ('start', 'Start service "svc"'),
    ]

    change_id = client.stop_services(['svc'])
    assert current(client, 'svc') == INACTIVE
    assert not pid_alive(pid2)
    change = client.get_change(change_id)
    assert change.kind == 'stop'
    assert change.summary == 'Stop service "svc"'
    assert change.status == 'Done'


def test_start_already_started_is_a_logged_noop(client: ops.pebble.Client, scratch: Path):
    add_services(client, svc=sleeper(scratch / 'pid'))
    client.start_services(['svc'])
    pid = read_pid(scratch / 'pid')
    change = client.get_change(client.start_services(['svc']))
    assert change.status == 'Done'
    assert any('Service "svc" already started.' in line for line in change.tasks[0].log), (
        change.tasks[0].log
    )
    assert read_pid(scratch / 'pid') == pid


def test_stop_never_started_is_a_logged_noop(client: ops.pebble.Client):
    add_services(client, svc={'override': 'replace', 'command': 'sleep 1000'})
    change = client.get_change(client.stop_services(['svc']))
    assert change.status == 'Done'
    assert any('Service "svc" has never been started.' in line for line in change.tasks[0].log)


def test_start_pulls_in_requires_and_stop_pulls_in_dependents(
    client: ops.pebble.Client, scratch: Path
):
    add_services(
        client,
        db=sleeper(scratch / 'db'),
        app=sleeper(scratch / 'app', requires=['db'], after=['db']),
    )
    change = client.get_change(client.start_services(['app']))
    assert change.summary == 'Start service "app" and 1 more'
    assert [t.summary for t in change.tasks] == ['Start service "db"', 'Start service "app"']
    assert [i.current for i in client.get_services()] == [ACTIVE, ACTIVE]

    change = client.get_change(client.stop_services(['db']))
    assert [t.summary for t in change.tasks] == ['Stop service "app"', 'Stop service "db"']
    assert [i.current for i in client.get_services()] == [INACTIVE, INACTIVE]


@pytest.mark.parametrize('action', ['start', 'stop', 'restart'])
def test_unknown_service_is_400(client: ops.pebble.Client, action: str):
    add_services(client, svc={'override': 'replace', 'command': 'sleep 1000'})
    method = getattr(client, f'{action}_services')
    with pytest.raises(ops.pebble.APIError) as excinfo:
        method(['nope'])
    assert excinfo.value.code == 400
    assert excinfo.value.message == f'cannot {action} services: service "nope" does not exist'
    assert client.get_changes(ops.pebble.ChangeState.ALL) == []


@pytest.mark.parametrize('action', ['start', 'stop', 'restart'])
def test_empty_service_list_is_400(client: ops.pebble.Client, action: str):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        getattr(client, f'{action}_services')([])
    assert excinfo.value.code == 400
    assert excinfo.value.message == f'must specify services for {action} action'


def test_replan_starts_enabled_services_only(client: ops.pebble.Client, scratch: Path):
    add_services(
        client,
        on=sleeper(scratch / 'on', startup='enabled'),
        off=sleeper(scratch / 'off', startup='disabled'),
    )
    change = client.get_change(client.replan_services())
    assert change.kind == 'replan'
    assert change.summary == 'Replan service "on"'
    assert current(client, 'on') == ACTIVE
    assert current(client, 'off') == INACTIVE


def test_replan_with_nothing_to_do(client: ops.pebble.Client):
    change = client.get_change(client.replan_services())
    assert change.kind == 'replan'
    assert change.summary == 'Replan - no services'
    assert change.status == 'Done'
    assert change.ready
    assert change.tasks == []


def test_replan_restarts_only_changed_services(client: ops.pebble.Client, scratch: Path):
    envfile = scratch / 'env'
    add_services(
        client,
        changing={
            'override': 'replace',
            'startup': 'enabled',
            'command': f'/bin/sh -c "echo $$ > {scratch}/changing; echo $GREETING > {envfile}; exec sleep 1000"',
            'environment': {'GREETING': 'hello'},
        },
        steady=sleeper(scratch / 'steady', startup='enabled'),
    )
    client.replan_services()
    changing1 = read_pid(scratch / 'changing')
    steady1 = read_pid(scratch / 'steady')
    assert envfile.read_text().strip() == 'hello'

    client.add_layer(
        'base',
        {'services': {'changing': {'override': 'merge', 'environment': {'GREETING': 'bonjour'}}}},
        combine=True,
    )
    # A layer change alone restarts nothing.
    assert current(client, 'changing') == ACTIVE
    assert pid_alive(changing1)

    (scratch / 'changing').unlink()
    change = client.get_change(client.replan_services())
    assert change.kind == 'replan'
    assert sorted((t.kind, t.summary) for t in change.tasks) == sorted(
        [
            ('stop', 'Stop service "changing"'),
            ('start', 'Start service "changing"'),
            ('start', 'Start service "steady"'),
        ]
    )
    changing2 = read_pid(scratch / 'changing')
    assert changing2 != changing1
    assert envfile.read_text().strip() == 'bonjour'
    assert read_pid(scratch / 'steady') == steady1
    assert pid_alive(steady1)
    assert [i.current for i in client.get_services()] == [ACTIVE, ACTIVE]


def test_autostart_starts_enabled_services(client: ops.pebble.Client, scratch: Path):
    add_services(
        client,
        on=sleeper(scratch / 'on', startup='enabled'),
        off=sleeper(scratch / 'off'),
    )
    change = client.get_change(client.autostart_services())
    assert change.kind == 'autostart'
    assert change.summary == 'Autostart service "on"'
    assert current(client, 'on') == ACTIVE
    assert current(client, 'off') == INACTIVE


@pytest.mark.parametrize('with_layer', [False, True], ids=['empty-plan', 'only-disabled'])
def test_autostart_without_enabled_services_is_no_default_services(
    client: ops.pebble.Client, with_layer: bool
):
    if with_layer:
        add_services(client, off={'override': 'replace', 'command': 'sleep 1000'})
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.autostart_services()
    err = excinfo.value
    assert err.code == 400
    assert err.message == 'no default services'
    assert err.body['result']['kind'] == 'no-default-services'
    assert client.get_changes(ops.pebble.ChangeState.ALL) == []


def test_quick_exit_is_change_error_with_output(client: ops.pebble.Client, scratch: Path):
    runs = scratch / 'runs'
    add_services(
        client,
        flaky={
            'override': 'replace',
            'command': f"/bin/sh -c 'echo run >> {runs}; echo boom; exit 1'",
            'backoff-delay': '100ms',
            'backoff-factor': 1,
        },
    )
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['flaky'])
    err = excinfo.value
    assert err.err == (
        'cannot perform the following tasks:\n'
        '- Start service "flaky" (service start attempt: exited quickly with code 1, will restart)'
    )
    assert err.change.status == 'Error'
    assert err.change.ready
    task_log = '\n'.join(err.change.tasks[0].log)
    assert 'Most recent service output:' in task_log
    assert 'boom' in task_log
    # ops renders the task logs into str(ChangeError); charms grep it.
    assert 'exited quickly with code 1' in str(err)
    assert 'boom' in str(err)

    # The default on-failure action (restart) still applies after a quick exit.
    wait_for(lambda: current(client, 'flaky') == 'backoff', 10, 0.01, 'flaky in backoff')
    wait_for(lambda: len(runs.read_text().split()) >= 3, 10, what='at least two restarts')

    client.stop_services(['flaky'])
    assert current(client, 'flaky') == INACTIVE


def test_quick_exit_then_backoff_restart_reaches_active(client: ops.pebble.Client, scratch: Path):
    marker = scratch / 'failed-once'
    add_services(
        client,
        second={
            'override': 'replace',
            'command': (
                f"/bin/sh -c 'if [ -e {marker} ]; then echo $$ > {scratch}/pid; exec sleep 1000; "
                f"else touch {marker}; echo first attempt fails; exit 3; fi'"
            ),
            'backoff-delay': '200ms',
        },
    )
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['second'])
    assert 'exited quickly with code 3, will restart' in excinfo.value.err
    wait_for(lambda: current(client, 'second') == ACTIVE, 10, what='second to be restarted')
    assert pid_alive(read_pid(scratch / 'pid'))


def test_on_failure_ignore_leaves_error(client: ops.pebble.Client):
    add_services(
        client,
        once={
            'override': 'replace',
            'command': "/bin/sh -c 'echo boom; exit 1'",
            'on-failure': 'ignore',
        },
    )
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['once'])
    assert 'exited quickly with code 1, will ignore' in excinfo.value.err
    assert 'boom' in str(excinfo.value)
    wait_for(lambda: current(client, 'once') == ERROR, 5, what='once to be in error')


def test_on_success_ignore_leaves_inactive(client: ops.pebble.Client):
    add_services(
        client,
        done={'override': 'replace', 'command': '/bin/true', 'on-success': 'ignore'},
    )
    # Even a clean exit inside the okay delay fails the change.
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['done'])
    assert 'exited quickly with code 0, will ignore' in excinfo.value.err
    wait_for(lambda: current(client, 'done') == INACTIVE, 5, what='done to be inactive')


def test_missing_binary_fails_the_start_like_pebble_then_keeps_retrying(client: ops.pebble.Client):
    # The change fails with Pebble's text, so clients see nothing new; but where Pebble leaves
    # the service inactive for good, cobble keeps retrying in case the binary appears.
    add_services(client, ghost={'override': 'replace', 'command': '/nonexistent/binary'})
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['ghost'])
    assert (
        'cannot start service: fork/exec /nonexistent/binary: no such file or directory'
        in excinfo.value.err
    )
    assert current(client, 'ghost') == 'backoff'
    client.stop_services(['ghost'])
    assert current(client, 'ghost') == INACTIVE


def test_startup_enabled_services_autostart_at_boot(make_daemon):
    daemon = make_daemon(
        layers={
            '001-boot.yaml': (
                'services:\n  boot:\n    override: replace\n'
                '    command: sleep 1000\n    startup: enabled\n'
            )
        }
    )
    wait_for(lambda: current(daemon.client, 'boot') == ACTIVE, 10, what='boot to autostart')


def test_hold_skips_autostart(make_daemon):
    daemon = make_daemon(
        hold=True,
        layers={
            '001-boot.yaml': (
                'services:\n  boot:\n    override: replace\n'
                '    command: sleep 1000\n    startup: enabled\n'
            )
        },
    )
    client = daemon.client
    assert client.get_plan().services['boot'].startup == 'enabled'
    # Proving a negative needs a window: without --hold the autostart change
    # shows up within milliseconds of the socket answering (see the test
    # above), so two seconds of nothing is a clear signal.
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        assert client.get_changes(ops.pebble.ChangeState.ALL) == []
        assert current(client, 'boot') == INACTIVE
        time.sleep(0.1)
    client.autostart_services()
    assert current(client, 'boot') == ACTIVE


LOG_LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) (INFO|ERROR) ', re.S)


def test_task_log_format(client: ops.pebble.Client, scratch: Path):
    add_services(client, svc=sleeper(scratch / 'pid'))
    client.start_services(['svc'])
    change = client.get_change(client.start_services(['svc']))
    [line] = change.tasks[0].log
    # "<RFC 3339, seconds, daemon zone> INFO <message>"
    assert LOG_LINE.match(line), line
    assert line.endswith(' INFO Service "svc" already started.'), line


def test_quick_exit_task_log_entries(client: ops.pebble.Client):
    add_services(
        client,
        flaky={
            'override': 'replace',
            'command': "/bin/sh -c 'echo first; echo boom; exit 1'",
            'on-failure': 'ignore',
        },
    )
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        client.start_services(['flaky'])
    log = excinfo.value.change.tasks[0].log
    assert all(LOG_LINE.match(line) for line in log), log
    # Last lines of output, indented four spaces, then the error entry.
    assert any(line.endswith(' INFO Most recent service output:\n    first\n    boom') for line in log), log
    assert log[-1].endswith(
        ' ERROR service start attempt: exited quickly with code 1, will ignore'
    ), log


def test_current_since_only_once_started(daemon, scratch: Path):
    client = daemon.client
    add_services(client, svc=sleeper(scratch / 'pid'))
    [info] = daemon.raw('GET', '/v1/services').json['result']
    assert info == {'name': 'svc', 'startup': 'disabled', 'current': 'inactive'}
    client.start_services(['svc'])
    [info] = daemon.raw('GET', '/v1/services?names=svc').json['result']
    assert info['current'] == 'active'
    assert 'current-since' in info


def test_restart_stops_only_named_services(client: ops.pebble.Client, scratch: Path):
    add_services(
        client,
        db=sleeper(scratch / 'db'),
        app=sleeper(scratch / 'app', requires=['db'], after=['db']),
    )
    client.start_services(['app'])
    app_pid = read_pid(scratch / 'app')
    (scratch / 'db').unlink()
    change = client.get_change(client.restart_services(['db']))
    # Dependents are not stopped by a restart (only a stop pulls them in).
    assert [(t.kind, t.summary) for t in change.tasks] == [
        ('stop', 'Stop service "db"'),
        ('start', 'Start service "db"'),
    ]
    assert pid_alive(app_pid)
    read_pid(scratch / 'db')
    assert [i.current for i in client.get_services()] == [ACTIVE, ACTIVE]


def test_replan_starts_changed_stopped_disabled_service(client: ops.pebble.Client, scratch: Path):
    add_services(client, svc=sleeper(scratch / 'pid', startup='disabled'))
    client.start_services(['svc'])
    client.stop_services(['svc'])
    assert current(client, 'svc') == INACTIVE
    client.add_layer(
        'base', {'services': {'svc': {'override': 'merge', 'environment': {'X': '1'}}}}, combine=True
    )
    # Its config changed since it last started, so replan (re)starts it even
    # though it is startup: disabled and was stopped by the user.
    client.replan_services()
    assert current(client, 'svc') == ACTIVE


def test_stop_during_okay_delay_fails_the_start(client: ops.pebble.Client, scratch: Path):
    add_services(client, svc=sleeper(scratch / 'pid'))
    start_id = client.start_services(['svc'], timeout=0)
    wait_for(
        lambda: client.get_change(start_id).tasks[0].status == 'Doing',
        0.8,
        0.01,
        'start task to be Doing',
    )
    client.stop_services(['svc'])
    change = client.wait_change(start_id, timeout=10)
    assert change.status == 'Error'
    assert 'stopped before the 1s okay delay' in change.err, change.err
    assert current(client, 'svc') == INACTIVE


def test_quick_exit_output_is_always_in_task_log(client: ops.pebble.Client):
    """Regression: the output of a process that exits inside the okay delay
    must be complete in the task log. Pebble only acts on the exit once the
    output pipe is drained (exec.Cmd.Wait), so "boom" is always there;
    repeat the race a few times so a daemon that loses it is caught."""
    runs = 30
    add_services(
        client,
        **{
            f'quick{i}': {
                'override': 'replace',
                'command': "/bin/sh -c 'echo boom; exit 1'",
                'on-failure': 'ignore',
            }
            for i in range(runs)
        },
    )
    missing = []
    for i in range(runs):
        with pytest.raises(ops.pebble.ChangeError) as excinfo:
            client.start_services([f'quick{i}'])
        if 'boom' not in '\n'.join(excinfo.value.change.tasks[0].log):
            missing.append(excinfo.value.change.tasks[0].log)
    assert not missing, f'{len(missing)}/{runs} task logs lack the output: {missing[:2]}'

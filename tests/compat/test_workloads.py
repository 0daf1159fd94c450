"""Workloads through the real ops client.

Pebble facts pinned here (v1.32.1: internals/workloads, internals/plan,
overlord/planstate and overlord/servstate):
- the top-level `workloads:` section holds entries with `override`,
  `environment`, `user-id`, `user`, `group-id` and `group`; a service names
  one with `workload:` and then cannot have a user or group of its own;
- a service in a workload runs as the workload's user and group, with the
  workload's environment and its own environment over it;
- the section is fixed once the daemon has loaded its layers: a layer that
  would change it is 400 `cannot change immutable section "workloads"`, so
  what a replan can change is which workload a service uses, and a service
  whose workload changes is restarted;
- `GET /v1/plan` prints the section after `log-targets`.

One deliberate difference: Pebble runs a command given a service context
(exec, exec checks) with the service's own fields only, as the daemon's user
and without the workload's environment; cobble runs it as the service runs.
ops layers are sent as YAML text: ops' Layer type keeps only the sections it
knows.
"""

from __future__ import annotations

import os
from pathlib import Path

import ops
import pytest
import yaml

from helpers import wait_for

ROOT = os.geteuid() == 0
# The workload's identity: `nobody` when the daemon may switch users, else the
# tests' own (then the environment alone shows the workload).
UID, GID = (65534, 65534) if ROOT else (os.getuid(), os.getgid())

LAYER = f"""
services:
  svc:
    override: replace
    command: /bin/sleep 1001
    startup: enabled
    workload: web
    working-dir: /
    environment:
      B: svc
      C: "3"
  plain:
    override: replace
    command: /bin/sleep 1002
    startup: enabled
workloads:
  web:
    override: replace
    user-id: {UID}
    group-id: {GID}
    environment:
      A: web
      B: web
  other:
    override: replace
    user-id: {UID}
    group-id: {GID}
    environment:
      A: other
checks:
  as-svc:
    override: replace
    period: 100ms
    threshold: 1
    exec:
      command: /bin/sh -c 'test "$(id -u)" = {UID} && test "$A" = web && test "$B" = svc'
      service-context: svc
      working-dir: /
"""


def process_of(daemon, argv: list[str]) -> int:
    """The pid of the daemon's process running exactly `argv`."""
    for pid in daemon.leftover_pids():
        try:
            cmdline = Path(f'/proc/{pid}/cmdline').read_bytes().split(b'\0')[:-1]
        except OSError:
            continue
        if [part.decode() for part in cmdline] == argv:
            return pid
    raise LookupError(argv)


def identity_and_environment(pid: int) -> tuple[int, int, dict[str, str]]:
    status = Path(f'/proc/{pid}/status').read_text()
    fields = dict(line.split(':', 1) for line in status.splitlines() if ':' in line)
    uid = int(fields['Uid'].split()[0])
    gid = int(fields['Gid'].split()[0])
    environ = Path(f'/proc/{pid}/environ').read_bytes().split(b'\0')
    env = dict(e.decode().split('=', 1) for e in environ if b'=' in e)
    return uid, gid, env


def running_pid(daemon, argv: list[str]) -> int:
    found: list[int] = []

    def ready() -> bool:
        try:
            found.append(process_of(daemon, argv))
            return True
        except LookupError:
            return False

    wait_for(ready, timeout=20, what=f'{argv} to run')
    return found[-1]


@pytest.fixture
def wl_daemon(make_daemon):
    return make_daemon(layers={'001-base.yaml': LAYER})


def test_a_service_runs_with_its_workload(wl_daemon):
    client = wl_daemon.client
    wait_for(
        lambda: client.get_services(['svc'])[0].current == ops.pebble.ServiceStatus.ACTIVE,
        timeout=20,
        what='svc active',
    )
    uid, gid, env = identity_and_environment(running_pid(wl_daemon, ['/bin/sleep', '1001']))
    assert (uid, gid) == (UID, GID)
    assert (env['A'], env['B'], env['C']) == ('web', 'svc', '3')
    # ops reads the plan (it ignores the section it does not know); the YAML
    # has it as Pebble prints it.
    plan = client.get_plan()
    assert plan.services['svc'].environment == {'B': 'svc', 'C': '3'}
    text = wl_daemon.raw('GET', '/v1/plan?format=yaml').json['result']
    assert text.endswith(
        'workloads:\n'
        '    other:\n'
        '        override: replace\n'
        '        environment:\n'
        '            A: other\n'
        f'        user-id: {UID}\n'
        f'        group-id: {GID}\n'
        '    web:\n'
        '        override: replace\n'
        '        environment:\n'
        '            A: web\n'
        '            B: web\n'
        f'        user-id: {UID}\n'
        f'        group-id: {GID}\n'
    ), text
    assert yaml.safe_load(text)['services']['svc']['workload'] == 'web'


def test_exec_with_a_service_context_runs_as_the_service_runs(wl_daemon):
    client = wl_daemon.client
    process = client.exec(
        ['/bin/sh', '-c', 'id -u; id -g; echo "$A $B $C"'],
        service_context='svc',
        working_dir='/',
    )
    out, _ = process.wait_output()
    assert out == f'{UID}\n{GID}\nweb svc 3\n'
    # What the request sets itself still wins.
    process = client.exec(
        ['/bin/sh', '-c', 'echo "$A $B"'],
        service_context='svc',
        environment={'A': 'mine'},
        working_dir='/',
    )
    out, _ = process.wait_output()
    assert out == 'mine svc\n'


def test_an_exec_check_with_a_service_context_inherits_the_workload(wl_daemon):
    client = wl_daemon.client

    def passing() -> bool:
        (check,) = client.get_checks(names=['as-svc'])
        return check.status == ops.pebble.CheckStatus.UP and check.successes >= 2 and check.failures == 0

    wait_for(passing, timeout=20, what='as-svc to pass twice')


def test_a_replan_restarts_a_service_whose_workload_changes(wl_daemon):
    client = wl_daemon.client
    svc = running_pid(wl_daemon, ['/bin/sleep', '1001'])
    plain = running_pid(wl_daemon, ['/bin/sleep', '1002'])
    client.add_layer('move', 'services:\n  svc:\n    override: merge\n    workload: other\n')
    client.replan_services()
    moved = running_pid(wl_daemon, ['/bin/sleep', '1001'])
    assert moved != svc
    _, _, env = identity_and_environment(moved)
    assert (env['A'], env['B'], env.get('C')) == ('other', 'svc', '3')
    # A service whose configuration did not change keeps running.
    assert process_of(wl_daemon, ['/bin/sleep', '1002']) == plain


@pytest.mark.parametrize(
    ('layer', 'message'),
    [
        (
            'workloads:\n  web:\n    override: merge\n    environment:\n      A: changed\n',
            'cannot change immutable section "workloads"',
        ),
        (
            'workloads:\n  new:\n    override: replace\n    user-id: 0\n',
            'cannot change immutable section "workloads"',
        ),
        (
            'services:\n  s:\n    override: replace\n    command: x\n    workload: web\n    user-id: 0\n',
            'plan service "s" cannot have user information and a workload at the same time',
        ),
        (
            'services:\n  s:\n    override: replace\n    command: x\n    workload: nope\n',
            'workload "nope": not defined for service "s"',
        ),
        (
            'workloads:\n  w:\n    user: root\n',
            'workload "w": must define an "override" policy',
        ),
    ],
)
def test_workload_mistakes_are_400_and_leave_the_plan(wl_daemon, layer, message):
    client = wl_daemon.client
    before = wl_daemon.raw('GET', '/v1/plan?format=yaml').json['result']
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.add_layer('bad', layer)
    assert excinfo.value.code == 400
    assert excinfo.value.message == message
    assert wl_daemon.raw('GET', '/v1/plan?format=yaml').json['result'] == before

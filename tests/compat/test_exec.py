"""`Client.exec` (POST /v1/exec and the task websockets), the way charms use it.

Pebble facts pinned here (daemon/api_exec.go, overlord/cmdstate, ops' pebble.py):
- the command inherits the daemon's environment, then the service context's,
  then the request's; `service_context` also supplies user, group and working
  directory, and the request's own fields override them;
- a missing program is refused before anything runs: 400 `cannot find
  executable "x"`;
- a non-zero exit is `ExecError` carrying the exit code and, from
  `wait_output`, what the command wrote;
- a timeout fails the change with `timed out after ...` (ops raises
  `ChangeError`);
- `send_signal` reaches the command; a command killed by a signal exits with
  128 + the signal number.
"""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import ops
import pytest

from helpers import wait_for


def test_output_and_exit_code(client: ops.pebble.Client):
    process = client.exec(['/bin/sh', '-c', 'echo out; echo err >&2'])
    assert process.wait_output() == ('out\n', 'err\n')

    process = client.exec(['/bin/sh', '-c', 'exit 7'])
    with pytest.raises(ops.pebble.ExecError) as excinfo:
        process.wait()
    assert excinfo.value.exit_code == 7


def test_wait_output_of_a_failing_command_carries_its_output(client: ops.pebble.Client):
    process = client.exec(['/bin/sh', '-c', 'echo partial; echo broken >&2; exit 2'])
    with pytest.raises(ops.pebble.ExecError) as excinfo:
        process.wait_output()
    error = excinfo.value
    assert error.exit_code == 2
    assert error.command == ['/bin/sh', '-c', 'echo partial; echo broken >&2; exit 2']
    assert error.stdout == 'partial\n'
    assert error.stderr == 'broken\n'


def test_combine_stderr_mixes_both_streams_in_order(client: ops.pebble.Client):
    process = client.exec(
        ['/bin/sh', '-c', 'echo one; echo two >&2; echo three'], combine_stderr=True
    )
    assert process.stderr is None
    out, err = process.wait_output()
    assert out == 'one\ntwo\nthree\n'
    assert err is None


def test_bytes_with_encoding_none(client: ops.pebble.Client):
    data = bytes(range(256)) * 64
    process = client.exec(['cat'], stdin=data, encoding=None)
    out, err = process.wait_output()
    assert out == data
    assert err == b''


def test_stdin_from_a_file_object(client: ops.pebble.Client, scratch: Path):
    source = scratch / 'input'
    source.write_text('first line\nsecond line\n')
    with open(source) as f:
        process = client.exec(['wc', '-l'], stdin=f)
        out, _ = process.wait_output()
    assert out.strip() == '2'

    # Large input through a file with a real descriptor (ops then select()s on it).
    big = scratch / 'big'
    big.write_bytes(b'x' * (1 << 20))
    with open(big, 'rb') as f:
        process = client.exec(['wc', '-c'], stdin=f, encoding=None)
        out, _ = process.wait_output()
    assert out.strip() == str(1 << 20).encode()


def test_stdout_and_stderr_to_file_objects(client: ops.pebble.Client):
    out, err = io.StringIO(), io.StringIO()
    process = client.exec(['/bin/sh', '-c', 'echo to-out; echo to-err >&2'], stdout=out, stderr=err)
    process.wait()
    assert (out.getvalue(), err.getvalue()) == ('to-out\n', 'to-err\n')


def test_environment_layers_and_defaults(client: ops.pebble.Client):
    process = client.exec(
        ['/bin/sh', '-c', 'echo "$COBBLE_COMPAT_MARKER|$ADDED|$LANG|$PATH"'],
        environment={'ADDED': 'yes'},
    )
    out, _ = process.wait_output()
    marker, added, lang, path = out.rstrip('\n').split('|')
    assert marker, 'the daemon environment is inherited'
    assert added == 'yes'
    assert lang
    assert path


def test_service_context_supplies_environment_and_working_dir(
    client: ops.pebble.Client, scratch: Path
):
    work = scratch / 'svc-dir'
    work.mkdir()
    client.add_layer(
        'ctx',
        {
            'services': {
                'svc': {
                    'override': 'replace',
                    'command': 'sleep 1000',
                    'environment': {'FOO': 'from-service', 'BAR': 'bar'},
                    'working-dir': str(work),
                }
            }
        },
    )
    process = client.exec(['/bin/sh', '-c', 'echo "$FOO $BAR"; pwd'], service_context='svc')
    assert process.wait_output() == (f'from-service bar\n{work}\n', '')

    process = client.exec(
        ['/bin/sh', '-c', 'echo "$FOO $BAR"; pwd'],
        service_context='svc',
        environment={'FOO': 'from-request'},
        working_dir='/',
    )
    assert process.wait_output() == ('from-request bar\n/\n', '')

    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.exec(['true'], service_context='nope')
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'context service "nope" not found'


@pytest.mark.skipif(os.getuid() != 0, reason='switching users needs root')
def test_user_and_group(client: ops.pebble.Client):
    process = client.exec(
        ['/bin/sh', '-c', 'id -un; id -gn; echo "$HOME $USER"; pwd'], user='daemon', group='daemon'
    )
    out, _ = process.wait_output()
    user, group, env, cwd = out.splitlines()
    assert (user, group) == ('daemon', 'daemon')
    home = env.split()[0]
    assert env == f'{home} daemon'
    assert cwd == home

    process = client.exec(['id', '-u'], user_id=1, group_id=1)
    assert process.wait_output()[0] == '1\n'


@pytest.mark.skipif(os.getuid() != 0, reason='switching users needs root')
def test_user_from_the_service_context(client: ops.pebble.Client):
    client.add_layer(
        'ctx',
        {
            'services': {
                'svc': {
                    'override': 'replace',
                    'command': 'sleep 1000',
                    'user': 'daemon',
                    'working-dir': '/',
                }
            }
        },
    )
    process = client.exec(['id', '-un'], service_context='svc')
    assert process.wait_output()[0] == 'daemon\n'


def test_unknown_user_or_group_is_a_bad_request(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.exec(['true'], user='no-such-user')
    assert (excinfo.value.code, excinfo.value.message) == (400, 'user: unknown user no-such-user')

    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.exec(['true'], user='root', group='no-such-group')
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'group: unknown group no-such-group'


def test_missing_program_is_refused_up_front(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.exec(['no-such-program-anywhere'])
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'cannot find executable "no-such-program-anywhere"'
    assert client.get_changes(select=ops.pebble.ChangeState.ALL) == []


def test_timeout_fails_the_change(client: ops.pebble.Client):
    process = client.exec(['sleep', '10'], timeout=0.2)
    with pytest.raises(ops.pebble.ChangeError) as excinfo:
        process.wait()
    assert 'timed out after 200ms: context deadline exceeded' in excinfo.value.err
    task = excinfo.value.change.tasks[0]
    assert task.data['exit-code'] == -1


def test_send_signal_reaches_the_command(client: ops.pebble.Client):
    process = client.exec(['/bin/sh', '-c', 'echo ready; exec sleep 30'])
    assert process.stdout is not None
    assert process.stdout.readline() == 'ready\n'
    process.send_signal(signal.SIGTERM)
    with pytest.raises(ops.pebble.ExecError) as excinfo:
        process.wait()
    assert excinfo.value.exit_code == 128 + signal.SIGTERM

    # SIGUSR1 rather than SIGHUP: a shell cannot trap a signal it was started with ignored,
    # and SIGHUP is ignored all the way down when the suite runs under nohup.
    process = client.exec(['/bin/sh', '-c', 'trap "echo got-usr1; exit 0" USR1; echo ready; while :; do sleep 0.1; done'])
    assert process.stdout is not None
    assert process.stdout.readline() == 'ready\n'
    process.send_signal('SIGUSR1')
    assert process.stdout.readline() == 'got-usr1\n'
    process.wait()


def test_the_exec_change(client: ops.pebble.Client):
    process = client.exec(['/bin/sh', '-c', 'exit 0'])
    process.wait()
    changes = client.get_changes(select=ops.pebble.ChangeState.ALL)
    assert len(changes) == 1
    change = changes[0]
    assert change.kind == 'exec'
    assert change.summary == 'Execute command "/bin/sh"'
    assert change.status == 'Done'
    assert change.ready
    assert [t.kind for t in change.tasks] == ['exec']
    assert change.tasks[0].summary == 'Execute command "/bin/sh"'
    assert change.tasks[0].data == {'exit-code': 0}


def test_many_execs_in_a_row_leave_nothing_behind(daemon, client: ops.pebble.Client):
    for i in range(20):
        process = client.exec(['/bin/sh', '-c', f'echo {i}'])
        assert process.wait_output() == (f'{i}\n', '')
    # The daemon carries the marker itself; nothing else may.
    wait_for(
        lambda: daemon.leftover_pids() == [daemon.proc.pid], 5, what='exec processes to be reaped'
    )

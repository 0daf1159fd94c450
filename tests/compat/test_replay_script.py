"""examples/admission-webhook/replay.sh when port 4443 is not the webhook's.

The script replays the founding case on the webhook's own port, 4443, in /tmp/founding. When
something else holds that port it must say so and stop, not wait and then report a timeout
without the reason:

- a listener that accepts and never answers (a socket another daemon still holds) is found
  before anything starts, by a real request;
- a port bound by someone who does not listen refuses connections, so nothing looks taken,
  but the webhook cannot bind it: the script gives up at its deadline after the push and
  prints the webhook's own error.

Both tests skip when port 4443 is already in use on this machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, cobble_bin
from test_founding_case_rust import webhook_bin

SCRIPT = REPO_ROOT / 'examples' / 'admission-webhook' / 'replay.sh'
PORT = 4443
# A bound on the whole run, far above what it needs (a 1 s push and the script's own 10 s
# deadline), so that a script that hangs fails the test instead of hanging it.
RUN_LIMIT = 120


def hold_port(listen: bool) -> socket.socket:
    """Port 4443 on every address, IPv4 and IPv6, listening (never accepting) or not."""
    for tool in ('openssl', 'curl'):
        if shutil.which(tool) is None:
            pytest.skip(f'replay.sh needs {tool}')
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        s.bind(('::', PORT))
    except OSError as e:
        s.close()
        pytest.skip(f'port {PORT} is in use on this machine: {e}')
    if listen:
        s.listen(8)
    return s


def run_replay() -> subprocess.CompletedProcess:
    path = os.pathsep.join(
        [str(Path(cobble_bin()).parent), str(Path(webhook_bin()).parent), os.environ['PATH']]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith('PEBBLE')}
    env.update(PATH=path, PUSH_AFTER='1')
    return subprocess.run(
        [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=RUN_LIMIT,
        stdin=subprocess.DEVNULL,
    )


def test_a_listener_that_never_answers_stops_the_replay_before_it_starts():
    held = hold_port(listen=True)
    try:
        run = run_replay()
    finally:
        held.close()
    assert run.returncode == 1, run
    assert f'replay: port {PORT} is taken' in run.stderr, run.stderr
    assert 'timed out' in run.stderr, run.stderr
    assert '==> 1.' not in run.stdout, run.stdout


def test_a_webhook_that_cannot_bind_is_reported_in_its_own_words():
    held = hold_port(listen=False)
    try:
        run = run_replay()
    finally:
        held.close()
    assert run.returncode == 1, run
    assert '==> 5.' in run.stdout, run.stdout
    assert 'replay: no answer within 10 s of the push' in run.stderr, run.stderr
    assert f'listen tcp :{PORT}: Address already in use' in run.stderr, run.stderr
    assert 'Service "admission-webhook" stopped unexpectedly with code 1' in run.stderr, run.stderr

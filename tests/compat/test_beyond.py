"""What cobble adds to Pebble, through the real ops client, as a charm would use it.

- `requires-checks`: a service is not started until the checks it names have
  succeeded; it waits (status `waiting`, which ops passes through as a string)
  and the replan that asked for it returns, as `replan()` in a charm's
  pebble-ready handler must;
- `readiness: notify`: `start()` returns once the service has sent `READY=1`
  to `$NOTIFY_SOCKET`, not when it has merely survived a second; until then
  the service is `starting`.

Layers are sent as YAML text: ops' Layer type keeps only the fields it knows.
"""

from __future__ import annotations

import time
from pathlib import Path

import ops

from helpers import wait_for

NOTIFY = """\
import os, socket, sys
address = os.environ['NOTIFY_SOCKET']
if address.startswith('@'):
    address = '\\0' + address[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto('\\n'.join(sys.argv[1:]).encode(), address)
"""


def test_replan_returns_while_a_service_waits_for_a_check(make_daemon):
    daemon = make_daemon(hold=True)
    flag = daemon.dir / 'db-ready'
    client = daemon.client
    client.add_layer(
        'app',
        f"""
services:
  app:
    override: replace
    command: /bin/sleep 1003
    startup: enabled
    requires-checks: [db]
checks:
  db:
    override: replace
    period: 200ms
    threshold: 1
    exec:
      command: test -f {flag}
""",
    )
    started = time.monotonic()
    client.replan_services(timeout=30)
    assert time.monotonic() - started < 10
    (app,) = client.get_services(['app'])
    assert app.current == 'waiting'
    assert not app.is_running()
    flag.write_text('')
    wait_for(
        lambda: client.get_services(['app'])[0].current == ops.pebble.ServiceStatus.ACTIVE,
        timeout=20,
        what='app active once db passes',
    )


def add_notify_service(daemon, script: str) -> ops.pebble.Client:
    """Adds service `svc` with `readiness: notify`, running `script` in a shell where
    `$NOTIFY` sends its arguments to `$NOTIFY_SOCKET`; returns the client."""
    notify = daemon.dir / 'notify.py'
    notify.write_text(NOTIFY)
    client = daemon.client
    client.add_layer(
        'svc',
        f"""
services:
  svc:
    override: replace
    readiness: notify
    environment:
      NOTIFY: python3 {notify}
    command: /bin/sh -c '{script}'
""",
    )
    return client


def test_start_of_a_notify_service_returns_once_it_is_ready(make_daemon):
    daemon = make_daemon(hold=True)
    sent = daemon.dir / 'sent'
    client = add_notify_service(
        daemon, f'sleep 2; date +%s.%N > {sent}; $NOTIFY READY=1; exec sleep 1004'
    )
    client.start_services(['svc'], timeout=30)
    returned = time.time()
    assert sent.exists(), 'start() returned before READY=1 was sent'
    assert float(sent.read_text()) <= returned
    (svc,) = client.get_services(['svc'])
    assert svc.current == ops.pebble.ServiceStatus.ACTIVE
    assert svc.is_running()


def test_a_notify_service_is_starting_until_it_is_ready(make_daemon):
    daemon = make_daemon(hold=True)
    go = daemon.dir / 'go'
    client = add_notify_service(
        daemon,
        f'$NOTIFY STATUS=loading; while [ ! -f {go} ]; do sleep 0.1; done; '
        '$NOTIFY READY=1; exec sleep 1005',
    )
    # timeout=0: ops submits the start and returns its change ID without waiting.
    change_id = client.start_services(['svc'], timeout=0)
    wait_for(
        lambda: client.get_services(['svc'])[0].current == 'starting',
        timeout=20,
        what='svc starting',
    )
    assert not client.get_change(change_id).ready
    Path(go).write_text('')
    client.wait_change(change_id, timeout=30)
    assert client.get_services(['svc'])[0].current == ops.pebble.ServiceStatus.ACTIVE


def test_a_charm_limits_a_service_and_its_exec_gets_the_same(make_daemon):
    """`rlimits` and `resources` in a layer sent through ops: the layer is
    accepted whatever the machine offers, the service runs, and a command
    run in its context (ops' `exec(service_context=...)`) has its limits."""
    daemon = make_daemon(hold=True)
    client = daemon.client
    client.add_layer(
        'app',
        """
services:
  app:
    override: replace
    command: /bin/sleep 1004
    startup: enabled
    rlimits:
      nofile: "4321:5000"
    resources:
      memory-max: 64M
      pids-max: 50
""",
    )
    client.replan_services(timeout=30)
    (app,) = client.get_services(['app'])
    assert app.is_running()
    process = client.exec(
        ['/bin/sh', '-c', 'echo $(ulimit -n) $(ulimit -Hn)'], service_context='app'
    )
    out, _ = process.wait_output()
    assert out.strip() == '4321 5000'
    process = client.exec(['/bin/sh', '-c', 'ulimit -n'])
    out, _ = process.wait_output()
    assert out.strip() != '4321'

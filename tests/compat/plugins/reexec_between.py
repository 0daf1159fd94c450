"""A pytest plugin that re-executes the cobble daemon in place after every test.

Loaded with ``-p reexec_between`` (this directory on ``PYTHONPATH``) by
``run_ops_real_pebble.sh`` when ``COBBLE_REEXEC_BETWEEN=1``. After each test's teardown it
runs ``$COBBLE_BIN reexec`` against ``$PEBBLE`` and fails that test unless the command
succeeds and the daemon kept its pid (``$COBBLE_DAEMON_PID``): a suite that passes this way
passes with a new program under every test but the first.
"""

import os
import subprocess

import pytest

_swaps = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    global _swaps
    bin_ = os.environ['COBBLE_BIN']
    pid = os.environ['COBBLE_DAEMON_PID']
    env = {k: v for k, v in os.environ.items() if k not in ('PEBBLE_SOCKET', 'PEBBLE_BASEURL')}
    done = subprocess.run(
        [bin_, 'reexec'], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60,
    )
    if done.returncode != 0:
        pytest.fail(f'cobble reexec after {item.nodeid} failed: {done.stderr.strip()}',
                    pytrace=False)
    expected = f'Re-executed daemon (pid {pid}) as '
    if not done.stdout.startswith(expected):
        pytest.fail(f'cobble reexec after {item.nodeid} said: {done.stdout!r}', pytrace=False)
    _swaps += 1


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f'cobble re-executed in place {_swaps} times, after every test')

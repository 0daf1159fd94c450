"""Health checks through `Client.{get_checks,start_checks,stop_checks}` and /v1/health.

Pebble facts pinned here (daemon/api_checks.go, api_health.go, overlord/checkstate):
- GET /v1/checks is sorted by name; `level=` is an exact match, `names=` filters;
  `startup` reads `enabled` unless the plan says `disabled`; a disabled check is
  `inactive` with no change;
- a running check is driven by a `perform-check` change; at the threshold that
  change goes to Error and a `recover-check` change takes over;
- start/stop return only the names whose state changed, sorted; unknown names
  are 400 `cannot <action> checks: cannot find checks in plan: <names>`;
- /v1/health is open (so it works over --http): 200 `{"healthy": true}`, or 502
  with the same sync envelope and `false` when a matching check is down;
  `level=ready` also covers `alive` checks, `level=alive` ignores `ready` ones.
"""

from __future__ import annotations

import ops
import pytest

from helpers import wait_for

LAYER = """
checks:
  a-alive:
    override: replace
    level: alive
    period: 10s
    exec:
      command: "true"
  b-ready:
    override: replace
    level: ready
    period: 10s
    tcp:
      port: 1
  c-off:
    override: replace
    startup: disabled
    http:
      url: http://127.0.0.1:1/
"""


def by_name(checks):
    return {c.name: c for c in checks}


def test_get_checks_with_filters(client: ops.pebble.Client):
    client.add_layer('checks', LAYER)
    checks = client.get_checks()
    assert [c.name for c in checks] == ['a-alive', 'b-ready', 'c-off']
    info = by_name(checks)
    assert info['a-alive'].level == ops.pebble.CheckLevel.ALIVE
    assert info['a-alive'].status == ops.pebble.CheckStatus.UP
    assert info['a-alive'].failures == 0
    assert info['a-alive'].threshold == 3
    assert info['a-alive'].change_id
    assert info['c-off'].status == ops.pebble.CheckStatus.INACTIVE
    assert not info['c-off'].change_id

    alive = client.get_checks(level=ops.pebble.CheckLevel.ALIVE)
    assert [c.name for c in alive] == ['a-alive']
    ready = client.get_checks(level=ops.pebble.CheckLevel.READY)
    assert [c.name for c in ready] == ['b-ready']
    named = client.get_checks(names=['c-off', 'a-alive', 'unknown'])
    assert [c.name for c in named] == ['a-alive', 'c-off']

    change = client.get_change(info['a-alive'].change_id)
    assert change.kind == 'perform-check'
    assert change.summary == 'Perform exec check "a-alive"'
    assert change.status == 'Doing'


def test_start_and_stop_checks(client: ops.pebble.Client):
    client.add_layer('checks', LAYER)
    assert client.stop_checks(['c-off', 'b-ready', 'a-alive']) == ['a-alive', 'b-ready']
    assert client.stop_checks(['a-alive']) == []
    info = by_name(client.get_checks())
    assert info['a-alive'].status == ops.pebble.CheckStatus.INACTIVE
    assert not info['a-alive'].change_id

    assert client.start_checks(['c-off', 'a-alive']) == ['a-alive', 'c-off']
    assert client.start_checks(['c-off']) == []
    info = by_name(client.get_checks())
    assert info['c-off'].status == ops.pebble.CheckStatus.UP
    assert client.get_change(info['c-off'].change_id).kind == 'perform-check'


def test_unknown_checks_are_rejected_and_nothing_changes(client: ops.pebble.Client):
    client.add_layer('checks', LAYER)
    before = [(c.name, c.status, c.change_id) for c in client.get_checks()]
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.stop_checks(['a-alive', 'zz', 'nope'])
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'cannot stop checks: cannot find checks in plan: nope, zz'
    after = [(c.name, c.status, c.change_id) for c in client.get_checks()]
    assert after == before


def test_failing_check_goes_down_through_a_recover_change(client: ops.pebble.Client):
    client.add_layer(
        'checks',
        {
            'checks': {
                'bad': {
                    'override': 'replace',
                    'period': '100ms',
                    'threshold': 2,
                    'exec': {'command': "/bin/sh -c 'echo broken; exit 3'"},
                }
            }
        },
    )
    perform = client.get_checks()[0].change_id
    wait_for(lambda: client.get_checks()[0].status == ops.pebble.CheckStatus.DOWN)
    check = client.get_checks()[0]
    assert check.failures >= 2
    failed = client.get_change(perform)
    assert failed.status == 'Error'
    assert 'Perform exec check "bad" (exit status 3; broken)' in failed.err
    assert client.get_change(check.change_id).kind == 'recover-check'


def test_health_over_http(make_daemon):
    d = make_daemon(
        hold=True,
        http=True,
        layers={
            '001-checks.yaml': """
checks:
  good:
    override: replace
    level: alive
    period: 100ms
    exec:
      command: "true"
  bad:
    override: replace
    level: ready
    period: 100ms
    threshold: 1
    exec:
      command: /bin/sh -c 'exit 1'
"""
        },
    )
    resp = d.raw_tcp('GET', '/v1/health')
    assert resp.status == 200
    wait_for(lambda: d.raw_tcp('GET', '/v1/health').status == 502)
    resp = d.raw_tcp('GET', '/v1/health')
    assert resp.json == {
        'type': 'sync',
        'status-code': 502,
        'status': 'Bad Gateway',
        'result': {'healthy': False},
    }
    assert d.raw_tcp('GET', '/v1/health?level=alive').status == 200
    assert d.raw_tcp('GET', '/v1/health?level=ready').status == 502
    assert d.raw_tcp('GET', '/v1/health?names=good').status == 200
    resp = d.raw_tcp('GET', '/v1/health?level=nope')
    assert resp.status == 400
    assert resp.json['result']['message'] == 'level must be "alive" or "ready"'
    # /v1/checks itself is not open.
    assert d.raw_tcp('GET', '/v1/checks').status == 401

"""Layers and the plan, through `Client.add_layer` and `Client.get_plan`.

Pebble facts pinned here (internals/plan, planstate, daemon/api_plan.go):
- the plan keeps `override`, never defaults `startup`, and prints durations
  with Go's Duration.String() (`90s` -> `1m30s`, `1m` -> `1m0s`);
- `combine: false` with an existing label is 400 `layer "x" already exists`;
- `combine: true` merges into the same-label layer in place (it keeps its
  position), environment per key, after/before appended, and the merge
  never changes the stored `override`;
- parse errors are 400 `cannot parse layer YAML: ...`; plan validation errors
  (cycles, unknown `requires`, missing `override`) are 400 with the plain
  message; in every error case the plan is left untouched.
"""

from __future__ import annotations

import ops
import pytest

BASE_LAYER = {
    'summary': 'base layer',
    'description': 'services used by the plan tests',
    'services': {
        'svc1': {
            'override': 'replace',
            'summary': 'Main',
            'description': 'The main service',
            'startup': 'enabled',
            'command': '/bin/sleep 1000',
            'after': ['svc2'],
            'requires': ['svc2'],
            'environment': {'A': '1', 'B': 'two'},
            'working-dir': '/tmp',
            'on-success': 'ignore',
            'on-failure': 'restart',
            'backoff-delay': '250ms',
            'backoff-factor': 1.5,
            'backoff-limit': '90s',
            'kill-delay': '1m',
        },
        'svc2': {
            'override': 'merge',
            'startup': 'disabled',
            'command': 'sleep 1',
            'before': ['svc1'],
        },
    },
}

# What GET /v1/plan must give back for BASE_LAYER, as ops parses it.
BASE_PLAN = {
    'services': {
        'svc1': {
            'override': 'replace',
            'summary': 'Main',
            'description': 'The main service',
            'startup': 'enabled',
            'command': '/bin/sleep 1000',
            'after': ['svc2'],
            'requires': ['svc2'],
            'environment': {'A': '1', 'B': 'two'},
            'working-dir': '/tmp',
            'on-success': 'ignore',
            'on-failure': 'restart',
            'backoff-delay': '250ms',
            'backoff-factor': 1.5,
            'backoff-limit': '1m30s',
            'kill-delay': '1m0s',
        },
        'svc2': {
            'override': 'merge',
            'startup': 'disabled',
            'command': 'sleep 1',
            'before': ['svc1'],
        },
    },
}


def raw_plan(daemon) -> str:
    resp = daemon.raw('GET', '/v1/plan?format=yaml')
    assert resp.status == 200, resp.body
    return resp.json['result']


def test_empty_plan_has_no_services(client: ops.pebble.Client):
    plan = client.get_plan()
    assert isinstance(plan, ops.pebble.Plan)
    assert plan.services == {}
    assert plan.to_dict() == {}


def test_add_layer_dict_round_trips_through_get_plan(client: ops.pebble.Client):
    client.add_layer('base', BASE_LAYER)
    plan = client.get_plan()
    assert plan.to_dict() == BASE_PLAN
    assert plan == ops.pebble.Plan(BASE_PLAN)
    svc1 = plan.services['svc1']
    assert svc1.kill_delay == '1m0s'
    assert svc1.backoff_factor == 1.5
    assert svc1.environment == {'A': '1', 'B': 'two'}


def test_add_layer_yaml_text(client: ops.pebble.Client):
    client.add_layer(
        'text',
        """
summary: a layer given as YAML text
services:
  web:
    override: replace
    command: /bin/sleep 1000
    startup: enabled
    environment:
      PORT: "8080"
    kill-delay: 500ms
""",
    )
    assert client.get_plan().to_dict() == {
        'services': {
            'web': {
                'override': 'replace',
                'command': '/bin/sleep 1000',
                'startup': 'enabled',
                'environment': {'PORT': '8080'},
                'kill-delay': '500ms',
            }
        }
    }


def test_add_layer_object(client: ops.pebble.Client):
    layer = ops.pebble.Layer({'services': {'obj': {'override': 'replace', 'command': 'sleep 5'}}})
    client.add_layer('obj', layer)
    assert client.get_plan().services['obj'].to_dict() == {
        'override': 'replace',
        'command': 'sleep 5',
    }


def test_plan_is_yaml_text_in_result(daemon):
    daemon.client.add_layer('base', BASE_LAYER)
    text = raw_plan(daemon)
    assert isinstance(text, str)
    # Go yaml.v3 uses a 4-space indent; the key order is struct order.
    assert '\n    svc1:\n' in text
    assert text.index('override: replace') < text.index('command: /bin/sleep 1000')


def test_duplicate_label_without_combine_is_rejected(daemon):
    client = daemon.client
    client.add_layer('x', {'services': {'a': {'override': 'replace', 'command': 'sleep 1'}}})
    before = raw_plan(daemon)

    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.add_layer('x', {'services': {'b': {'override': 'replace', 'command': 'sleep 2'}}})
    err = excinfo.value
    assert err.code == 400
    assert err.message == 'layer "x" already exists'
    assert err.body['type'] == 'error'
    assert err.body['status-code'] == 400
    assert err.body['status'] == 'Bad Request'
    # Generic errors carry no kind/value (both omitempty in Pebble).
    assert err.body['result'] == {'message': 'layer "x" already exists'}
    assert raw_plan(daemon) == before


def test_combine_merges_environment_and_appends_lists(client: ops.pebble.Client):
    client.add_layer(
        'base',
        {
            'services': {
                'svc': {
                    'override': 'replace',
                    'command': 'sleep 1000',
                    'environment': {'A': '1', 'B': '2'},
                    'after': ['x'],
                    'before': ['y'],
                }
            }
        },
    )
    client.add_layer(
        'base',
        {
            'services': {
                'svc': {
                    'override': 'merge',
                    'environment': {'B': '3', 'C': '4'},
                    'after': ['z'],
                    'before': ['w'],
                }
            }
        },
        combine=True,
    )
    assert client.get_plan().services['svc'].to_dict() == {
        # Merging never rewrites the stored override.
        'override': 'replace',
        'command': 'sleep 1000',
        'environment': {'A': '1', 'B': '3', 'C': '4'},
        # Unknown names in after/before are allowed and kept.
        'after': ['x', 'z'],
        'before': ['y', 'w'],
    }


def test_combine_with_replace_swaps_whole_service(client: ops.pebble.Client):
    client.add_layer(
        'base',
        {'services': {'svc': {'override': 'replace', 'command': 'sleep 1', 'environment': {'A': '1'}}}},
    )
    client.add_layer(
        'base',
        {'services': {'svc': {'override': 'replace', 'command': 'sleep 2'}}},
        combine=True,
    )
    assert client.get_plan().services['svc'].to_dict() == {
        'override': 'replace',
        'command': 'sleep 2',
    }


def test_combine_keeps_layer_position(client: ops.pebble.Client):
    svc = lambda cmd, override: {'services': {'svc': {'override': override, 'command': cmd}}}  # noqa: E731
    client.add_layer('base', svc('sleep 1', 'replace'))
    client.add_layer('top', svc('sleep 2', 'merge'))
    # Combining into "base" edits it in place, below "top": top still wins.
    client.add_layer('base', svc('sleep 3', 'merge'), combine=True)
    assert client.get_plan().services['svc'].command == 'sleep 2'


def test_combine_with_new_label_appends(client: ops.pebble.Client):
    client.add_layer('base', {'services': {'a': {'override': 'replace', 'command': 'sleep 1'}}})
    client.add_layer(
        'fresh', {'services': {'b': {'override': 'replace', 'command': 'sleep 2'}}}, combine=True
    )
    assert sorted(client.get_plan().services) == ['a', 'b']


INVALID_LAYERS = {
    'bad-yaml': (
        'services:\n  svc: [unclosed\n',
        lambda m: m.startswith('cannot parse layer YAML:'),
    ),
    'unknown-field': (
        'services:\n  svc:\n    override: replace\n    command: sleep 1\n    bogus-field: 1\n',
        lambda m: m.startswith('cannot parse layer YAML:') and 'bogus-field' in m,
    ),
    'unknown-section': (
        'nonsense:\n  x: 1\n',
        lambda m: m.startswith('cannot parse layer YAML:') and 'nonsense' in m,
    ),
    'bad-duration-string': (
        'services:\n  svc:\n    override: replace\n    command: sleep 1\n    kill-delay: ten seconds\n',
        lambda m: 'invalid duration "ten seconds"' in m,
    ),
    'bad-duration-int': (
        'services:\n  svc:\n    override: replace\n    command: sleep 1\n    backoff-delay: 10\n',
        lambda m: 'invalid duration "10"' in m,
    ),
    'cycle': (
        'services:\n'
        '  cyc-a:\n    override: replace\n    command: sleep 1\n    after: [cyc-b]\n'
        '  cyc-b:\n    override: replace\n    command: sleep 1\n    after: [cyc-a]\n',
        lambda m: m.startswith('services in before/after loop: ') and 'cyc-a' in m and 'cyc-b' in m,
    ),
    'requires-unknown': (
        'services:\n  svc:\n    override: replace\n    command: sleep 1\n    requires: [nope]\n',
        lambda m: m == 'service "nope" does not exist',
    ),
    'missing-override': (
        'services:\n  svc:\n    command: sleep 1\n',
        lambda m: m == 'layer "bad" must define "override" for service "svc"',
    ),
    'missing-command': (
        'services:\n  svc:\n    override: replace\n    startup: enabled\n',
        lambda m: m == 'plan must define "command" for service "svc"',
    ),
    'bad-on-failure': (
        'services:\n  svc:\n    override: replace\n    command: sleep 1\n    on-failure: explode\n',
        # Per-layer validation runs inside ParseLayer, so the API prefixes it.
        lambda m: m == 'cannot parse layer YAML: plan service "svc" on-failure action "explode" invalid',
    ),
}


@pytest.mark.parametrize('combine', [False, True], ids=['append', 'combine'])
@pytest.mark.parametrize('case', sorted(INVALID_LAYERS))
def test_invalid_layer_is_400_and_plan_unchanged(daemon, case: str, combine: bool):
    client = daemon.client
    client.add_layer('base', {'services': {'keep': {'override': 'replace', 'command': 'sleep 1'}}})
    before_text = raw_plan(daemon)
    before = client.get_plan().to_dict()

    text, message_ok = INVALID_LAYERS[case]
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.add_layer('bad', text, combine=combine)
    err = excinfo.value
    assert err.code == 400, (err.code, err.message)
    assert message_ok(err.message), err.message

    assert client.get_plan().to_dict() == before
    assert raw_plan(daemon) == before_text
    # The failed label was not recorded: adding it properly now works.
    client.add_layer('bad', {'services': {'ok': {'override': 'replace', 'command': 'sleep 1'}}})
    assert sorted(client.get_plan().services) == ['keep', 'ok']


def test_combine_into_existing_layer_validation_error_leaves_plan(daemon):
    client = daemon.client
    client.add_layer('base', {'services': {'a': {'override': 'replace', 'command': 'sleep 1'}}})
    before_text = raw_plan(daemon)
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.add_layer('base', {'services': {'a': {'command': 'sleep 2'}}}, combine=True)
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'layer "base" must define "override" for service "a"'
    assert raw_plan(daemon) == before_text


def test_get_plan_requires_yaml_format(daemon):
    resp = daemon.raw('GET', '/v1/plan')
    assert resp.status == 400
    assert resp.json['result']['message'] == 'invalid format ""'

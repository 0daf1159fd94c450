"""Notices through `Client.{notify,get_notice,get_notices}`, as charms and Juju use them.

Pebble facts pinned here (daemon/api_notices.go, overlord/state/notices.go):
- a custom notice belongs to the requester's uid; its identity is (uid, type, key):
  a second notify is an occurrence of the same notice (same ID), counted, with
  `last-data` replaced and `last-repeated` moved unless `repeat-after` holds it;
- lists are ordered by last-repeated; `types` and `keys` filter; `users=all` and
  `user-id` are for admins (this suite runs as root or as the daemon's user);
- every change records a public `change-update` notice keyed by its ID, with data
  `kind` and, for health checks, `check-name`: a failed check's perform-check
  change goes to Error, and its recover-check change to Done when it recovers;
- bad input is 400 with Pebble's message; an unknown ID is 404.
"""

from __future__ import annotations

import datetime
import os

import ops
import pytest

from helpers import wait_for

CUSTOM = ops.pebble.NoticeType.CUSTOM
CHANGE_UPDATE = ops.pebble.NoticeType.CHANGE_UPDATE


def test_notify_aggregates_occurrences(client: ops.pebble.Client):
    first = client.notify(CUSTOM, 'example.com/agg', data={'a': '1'})
    second = client.notify(CUSTOM, 'example.com/agg', data={'b': '2'})
    assert first == second
    notice = client.get_notice(first)
    assert notice.type == CUSTOM
    assert notice.key == 'example.com/agg'
    assert notice.user_id == os.getuid()
    assert notice.occurrences == 2
    assert notice.last_data == {'b': '2'}
    assert notice.first_occurred < notice.last_repeated == notice.last_occurred
    assert notice.expire_after == datetime.timedelta(days=7)
    assert notice.repeat_after is None


def test_repeat_after_holds_last_repeated(client: ops.pebble.Client):
    hour = datetime.timedelta(hours=1)
    nid = client.notify(CUSTOM, 'example.com/held', repeat_after=hour)
    before = client.get_notice(nid)
    client.notify(CUSTOM, 'example.com/held', data={'x': 'y'}, repeat_after=hour)
    after = client.get_notice(nid)
    assert after.occurrences == 2
    assert after.last_repeated == before.last_repeated
    assert after.last_occurred > before.last_occurred
    assert after.repeat_after == hour
    assert after.last_data == {'x': 'y'}


def test_get_notices_filters(client: ops.pebble.Client):
    for key in ('example.com/one', 'example.com/two', 'example.com/three'):
        client.notify(CUSTOM, key)
    listed = client.get_notices(types=[CUSTOM])
    assert [n.key for n in listed] == ['example.com/one', 'example.com/two', 'example.com/three']
    assert [n.key for n in client.get_notices(keys=['example.com/two'])] == ['example.com/two']
    both = client.get_notices(keys=['example.com/three', 'example.com/one'])
    assert [n.key for n in both] == ['example.com/one', 'example.com/three']
    everyone = client.get_notices(users=ops.pebble.NoticesUsers.ALL, types=[CUSTOM])
    assert len(everyone) == 3
    mine = client.get_notices(user_id=os.getuid(), types=[CUSTOM])
    assert len(mine) == 3
    assert client.get_notices(user_id=os.getuid() + 12345, types=[CUSTOM]) == []
    assert client.get_notices(types=['warning']) == []


def test_a_change_records_change_update_notices(client: ops.pebble.Client):
    client.add_layer(
        'svc',
        {'services': {'s': {'override': 'replace', 'command': 'sleep 1000'}}},
    )
    change_id = client.start_services(['s'])
    notices = client.get_notices(types=[CHANGE_UPDATE], keys=[change_id])
    assert len(notices) == 1
    notice = notices[0]
    assert notice.user_id is None
    assert notice.last_data == {'kind': 'start'}
    # Pebble's count: the change spawned, its task doing, done.
    assert notice.occurrences == 3
    assert client.get_change(change_id).status == 'Done'


def test_check_failure_and_recovery_notices(make_daemon):
    daemon = make_daemon()
    client = daemon.client
    flag = daemon.dir / 'down'
    client.add_layer(
        'checks',
        {
            'checks': {
                'probe': {
                    'override': 'replace',
                    'period': '100ms',
                    'threshold': 1,
                    'exec': {'command': f'/bin/sh -c "test ! -e {flag}"'},
                }
            }
        },
    )
    perform = client.get_checks()[0].change_id
    flag.write_text('')
    wait_for(lambda: client.get_change(perform).status == 'Error')
    failed = client.get_notices(types=[CHANGE_UPDATE], keys=[perform])[0]
    assert failed.last_data == {'kind': 'perform-check', 'check-name': 'probe'}

    recover = client.get_checks()[0].change_id
    assert client.get_change(recover).kind == 'recover-check'
    flag.unlink()
    wait_for(lambda: client.get_change(recover).status == 'Done')
    recovered = client.get_notices(types=[CHANGE_UPDATE], keys=[recover])[0]
    assert recovered.last_data == {'kind': 'recover-check', 'check-name': 'probe'}
    assert recovered.last_repeated > failed.last_repeated


@pytest.mark.parametrize(
    ('key', 'message'),
    [
        ('nodomain', 'invalid key "nodomain" (must be in "example.com/path" format)'),
        ('Example.com/x', 'invalid key "Example.com/x" (must be in "example.com/path" format)'),
        ('example.com/' + 'k' * 250, 'key must be 256 bytes or less'),
    ],
)
def test_bad_keys_are_refused(client: ops.pebble.Client, key: str, message: str):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.notify(CUSTOM, key)
    assert excinfo.value.code == 400
    assert excinfo.value.message == message
    assert client.get_notices(types=[CUSTOM]) == []


def test_oversized_data_and_other_types_are_refused(daemon, client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.notify(CUSTOM, 'example.com/big', data={'x': 'y' * 4096})
    assert (excinfo.value.code, excinfo.value.message) == (
        400,
        'total size of data must be 4096 bytes or less',
    )
    # ops only sends custom notices; a raw request tries another type.
    resp = daemon.raw(
        'POST', '/v1/notices', b'{"action": "add", "type": "warning", "key": "example.com/w"}'
    )
    assert (resp.status, resp.json['result']['message']) == (
        400,
        'invalid type "warning" (can only add "custom" notices)',
    )
    assert client.get_notices(types=[CUSTOM]) == []


def test_unknown_notice_is_404(client: ops.pebble.Client):
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.get_notice('12345')
    assert (excinfo.value.code, excinfo.value.message) == (
        404,
        'cannot find notice with ID "12345"',
    )

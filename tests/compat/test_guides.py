"""The how-to guides' code, run as a reader runs it, through the real ops client.

The snippets are read from the Markdown pages themselves, so a guide and its test cannot
drift apart. Only the paths of the reader's container are replaced (the socket, the
programs, the certificates' directory), each one checked to be in the snippet.
"""

from __future__ import annotations

import re
from pathlib import Path

import ops
import yaml

from conftest import REPO_ROOT
from helpers import current, wait_for

CHARM_WITH_OPS = REPO_ROOT / 'docs' / 'how-to' / 'charm-with-ops.md'

FIELDS = ('requires-paths', 'on-file-change', 'persist-logs')


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r'^```python\n(.*?)^```$', page.read_text(), re.S | re.M)


def substituted(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in code, f'the guide no longer says {old!r}:\n{code}'
        code = code.replace(old, new)
    return code


def program(path: Path, starts: Path, then: str = 'exec sleep 1000') -> Path:
    """A service's program: notes each start in `starts`, says so, then `then`."""
    path.write_text(f'#!/bin/sh\necho "started $$" >> {starts}\necho "{path.name} up"\n{then}\n')
    path.chmod(0o755)
    return path


def starts(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def webhook_snippet(daemon) -> tuple[str, Path, Path]:
    """The guide's extension-field snippet for this daemon: the code, the certificates'
    directory and the file that counts the webhook's starts."""
    blocks = python_blocks(CHARM_WITH_OPS)
    (code,) = [b for b in blocks if 'requires-paths' in b]
    certs = daemon.dir / 'certs'
    certs.mkdir()
    count = daemon.dir / 'webhook-starts'
    webhook = program(daemon.dir / 'webhook', count)
    code = substituted(code, {'"/webhook --cert': f'"{webhook} --cert', '/certs/': f'{certs}/'})
    return code, certs, count


def test_the_first_snippet_of_charm_with_ops_starts_its_service(make_daemon):
    daemon = make_daemon(hold=True)
    count = daemon.dir / 'app-starts'
    app = program(daemon.dir / 'app', count)
    (code,) = [b for b in python_blocks(CHARM_WITH_OPS) if 'ops.pebble.Client(' in b]
    code = substituted(
        code,
        {
            '/charm/containers/workload/pebble.socket': str(daemon.socket_path),
            '"/srv/app"': f'"{app}"',
        },
    )
    exec(compile(code, str(CHARM_WITH_OPS), 'exec'), {})
    assert current(daemon.client, 'app') == ops.pebble.ServiceStatus.ACTIVE
    wait_for(lambda: starts(count) == 1, 10, what='the app noting its start')


def test_the_extension_snippet_of_charm_with_ops_waits_then_starts(make_daemon):
    daemon = make_daemon(hold=True)
    code, certs, count = webhook_snippet(daemon)
    client = daemon.client
    exec(compile(code, str(CHARM_WITH_OPS), 'exec'), {'client': client})

    # What the guide says next: `waiting`, as a raw string, and not running.
    (info,) = client.get_services(['webhook'])
    assert info.current == 'waiting'
    assert isinstance(info.current, str) and not isinstance(info.current, ops.pebble.ServiceStatus)
    assert not info.is_running()
    assert starts(count) == 0
    plan = yaml.safe_load(daemon.raw('GET', '/v1/plan?format=yaml').json['result'])
    for field in FIELDS:
        assert field in plan['services']['webhook'], plan
    # ...and `get_plan()` does not show them, as the guide warns.
    assert 'requires-paths' not in client.get_plan().to_yaml()
    assert not hasattr(client.get_plan().services['webhook'], 'requires_paths')

    # requires-paths: the certificates' arrival starts it.
    (certs / 'key.pem').write_text('key\n')
    (certs / 'cert.pem').write_text('cert one\n')
    wait_for(lambda: current(client, 'webhook') == ops.pebble.ServiceStatus.ACTIVE, 10,
             what='webhook active once its certificates exist')
    wait_for(lambda: starts(count) == 1, 10, what='the webhook noting its start')
    # persist-logs: its output is in $PEBBLE/logs.
    log = daemon.pebble_dir / 'logs' / 'webhook.log'
    wait_for(lambda: log.exists() and 'webhook up' in log.read_text(), 10,
             what=f'the webhook output in {log}')
    # on-file-change: a new certificate restarts it.
    (certs / 'cert.pem').write_text('cert two\n')
    wait_for(lambda: starts(count) == 2, 10, what='a restart after the certificate changed')


def test_a_dict_sent_through_ops_loses_cobbles_fields(make_daemon):
    """The guide's warning: ops turns a dict into `Layer(layer).to_yaml()`, which keeps only
    Pebble's fields, so the service is started at once, without its certificates."""
    daemon = make_daemon(hold=True)
    code, _certs, count = webhook_snippet(daemon)
    namespace: dict = {'client': _Recorder()}
    exec(compile(code, str(CHARM_WITH_OPS), 'exec'), namespace)
    layer = namespace['layer']
    assert all(f in layer['services']['webhook'] for f in FIELDS)
    # What add_layer sends for a dict, and for an ops.pebble.Layer.
    sent = ops.pebble.Layer(layer).to_yaml()
    assert not any(f in sent for f in FIELDS), sent

    client = daemon.client
    client.add_layer('webhook', layer, combine=True)
    plan = yaml.safe_load(daemon.raw('GET', '/v1/plan?format=yaml').json['result'])
    assert not any(f in plan['services']['webhook'] for f in FIELDS), plan
    client.replan_services()
    assert current(client, 'webhook') != 'waiting'
    # Started although its certificates do not exist.
    wait_for(lambda: starts(count) == 1, 10, what='the webhook started without certificates')


class _Recorder:
    """Stands in for the client where only the snippet's `layer` is wanted."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))

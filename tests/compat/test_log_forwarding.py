"""Log forwarding set up through `ops`, received by real receivers.

- An OpenTelemetry target: an HTTP receiver in the test decodes each request
  with the OTLP protobuf definitions (`opentelemetry-proto`), so a field the
  collector would not know fails the test, and checks the `service.name`
  resource attribute, the expanded labels and each line.
- The target is added with `Client.add_layer` while the service runs, and
  round-trips through `Client.get_plan`.
- A bad target is a 400 `APIError` in the daemon's wording, and the plan is
  unchanged.
"""

from __future__ import annotations

import http.server
import threading

import ops
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from helpers import wait_for


class OtlpReceiver(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(('127.0.0.1', 0), OtlpHandler)
        self.requests: list[tuple[str, ExportLogsServiceRequest]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.server_address[1]}'

    def records(self) -> list[tuple[dict[str, str], str]]:
        out = []
        with self.lock:
            requests = list(self.requests)
        for _, request in requests:
            for resource_logs in request.resource_logs:
                attributes = {
                    kv.key: kv.value.string_value for kv in resource_logs.resource.attributes
                }
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        assert record.time_unix_nano > 1_600_000_000 * 10**9
                        out.append((attributes, record.body.string_value))
        return out


class OtlpHandler(http.server.BaseHTTPRequestHandler):
    server: OtlpReceiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers['Content-Length']))
        request = ExportLogsServiceRequest()
        # Strict: an unknown field is an error, as it would be for a collector.
        json_format.Parse(body, request, ignore_unknown_fields=False)
        with self.server.lock:
            self.server.requests.append((self.path, request))
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'{}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver():
    server = OtlpReceiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


SERVICE_LAYER = {
    'services': {
        'ticker': {
            'override': 'replace',
            'command': "/bin/sh -c 'i=0; while true; do i=$((i+1)); echo \"tick $i\"; sleep 0.05; done'",
            'environment': {'UNIT': 'app/0'},
        },
    },
}


def test_opentelemetry_target_added_while_running(daemon, client, receiver):
    client.add_layer('base', SERVICE_LAYER)
    client.start_services(['ticker'])
    target = {
        'log-targets': {
            'otel': {
                'override': 'replace',
                'type': 'opentelemetry',
                'location': receiver.url,
                'services': ['all'],
                'labels': {'juju.unit': '$UNIT', 'static': 'yes'},
            },
        },
    }
    client.add_layer('forward', target)
    wait_for(lambda: len(receiver.records()) >= 30, timeout=30, what='30 records')

    with receiver.lock:
        paths = {path for path, _ in receiver.requests}
    assert paths == {'/v1/logs'}
    records = receiver.records()
    for attributes, line in records:
        assert attributes == {'service.name': 'ticker', 'juju.unit': 'app/0', 'static': 'yes'}
        assert line.startswith('tick ')
    ticks = [int(line.split()[1]) for _, line in records]
    assert ticks == sorted(ticks)

    plan = client.get_plan()
    assert plan.log_targets['otel'].type == 'opentelemetry'
    assert plan.log_targets['otel'].location == receiver.url
    assert plan.log_targets['otel'].labels == {'juju.unit': '$UNIT', 'static': 'yes'}


def test_a_target_without_location_is_400_and_leaves_the_plan(daemon, client):
    client.add_layer('base', SERVICE_LAYER)
    before = client.get_plan().to_yaml()
    layer = {'log-targets': {'bad': {'override': 'replace', 'services': ['all'], 'type': 'loki'}}}
    with pytest.raises(ops.pebble.APIError) as excinfo:
        client.add_layer('bad', layer)
    assert excinfo.value.code == 400
    assert excinfo.value.message == 'plan must define "location" for log target "bad"'
    assert client.get_plan().to_yaml() == before


@pytest.mark.parametrize(
    ('target', 'problem'),
    [
        (
            {'type': 'loki', 'location': 'ftp://loki/push'},
            'invalid location URL "ftp://loki/push": unsupported scheme "ftp", must be "http" or "https"',
        ),
        (
            {'type': 'syslog', 'location': 'http://logs:514'},
            'invalid syslog server location "http://logs:514", must be in form "tcp://host:port" or "udp://host:port"',
        ),
        (
            {'type': 'loki', 'location': 'http://loki/push', 'labels': {'juju-unit': 'a'}},
            'invalid label name "juju-unit" for type "loki"',
        ),
    ],
)
def test_targets_that_cannot_work_are_taken_as_pebble_takes_them(daemon, client, target, problem):
    """Pebble accepts these and fails when it sends; cobble accepts them too,
    sends them nothing, and says why in the log and in each service's notes."""
    client.add_layer('base', SERVICE_LAYER)
    layer = {'log-targets': {'bad': {'override': 'replace', 'services': ['all'], **target}}}
    client.add_layer('bad', layer)
    assert client.get_plan().log_targets['bad'].location == target['location']
    wait_for(
        lambda: f'Log target "bad" cannot forward logs: {problem}' in daemon.log(),
        what='the problem in the daemon log',
    )
    services = daemon.raw('GET', '/v1/services').json['result']
    for service in services:
        assert service['reason'] == f'logs not forwarded to "bad": {problem}'

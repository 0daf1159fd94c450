"""A fake Kubernetes API server for the founding case: it lists PodDefaults per namespace,
over plain HTTP on loopback, and checks a bearer token. Enough for the webhook's LIST."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = 'compat-token'
PREFIX = '/apis/kubeflow.org/v1alpha1/namespaces/'


class FakeApiServer:
    def __init__(self, poddefaults: list[dict]):
        self.poddefaults = poddefaults
        self.lists = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.headers.get('Authorization') != f'Bearer {TOKEN}':
                    return self.reply(401, {'kind': 'Status', 'code': 401, 'message': 'Unauthorized'})
                path = self.path.split('?', 1)[0]
                if path.startswith(PREFIX) and path.endswith('/poddefaults'):
                    namespace = path[len(PREFIX):-len('/poddefaults')]
                    server.lists += 1
                    items = [pd for pd in server.poddefaults if pd['metadata']['namespace'] == namespace]
                    return self.reply(200, {
                        'apiVersion': 'kubeflow.org/v1alpha1', 'kind': 'PodDefaultList',
                        'metadata': {'resourceVersion': '1'}, 'items': items,
                    })
                return self.reply(404, {'kind': 'Status', 'code': 404, 'message': 'not found'})

            def reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> 'FakeApiServer':
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def write_kubeconfig(self, path: Path) -> None:
        path.write_text(
            'apiVersion: v1\nkind: Config\ncurrent-context: fake\n'
            f'clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{self.port}\n'
            'contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n'
            f'users:\n- name: fake\n  user:\n    token: {TOKEN}\n'
        )


def main() -> None:
    """Serves the PodDefaults of a JSON file until stopped (used by examples/admission-webhook)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument('--poddefaults', required=True, help='a JSON list of PodDefaults')
    parser.add_argument('--kubeconfig', required=True, help='where to write a kubeconfig for it')
    args = parser.parse_args()
    with FakeApiServer(json.loads(Path(args.poddefaults).read_text())) as server:
        server.write_kubeconfig(Path(args.kubeconfig))
        print(f'fake API server on http://127.0.0.1:{server.port}', flush=True)
        signal.sigwait([signal.SIGTERM, signal.SIGINT])


if __name__ == '__main__':
    main()

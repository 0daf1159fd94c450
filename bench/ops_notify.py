"""Times how long a custom notice takes from `Client.notify` in ops to a waiting long-poller.

Usage: ops_notify.py SOCKET RUNS MODE
MODE is `same` (one key, repeated: each notify is a repeat) or `new` (a new key each time: a
new notice, whose ID must be durable before a poller is shown it).
Prints one latency per line, in seconds, after 10 that are not printed. Each run starts a raw
long-poll (`GET /v1/notices?types=custom&after=<last seen>&timeout=10s`, its own connection,
read by a thread), lets it reach the daemon, then calls `notify` as charm code does; the
latency is from just before `notify` until the poller's first response byte.
"""

import json
import socket
import sys
import threading
import time

import ops.pebble

SETTLE = 0.02


def long_poll(socket_path: str, after: str, result: list, timeout: str = '10s') -> None:
    query = 'types=custom' + (f'&timeout={timeout}' if timeout else '')
    query += f'&after={after}' if after else ''
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        s.sendall(
            f'GET /v1/notices?{query} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'.encode()
        )
        chunks = []
        first = None
        while True:
            chunk = s.recv(65536)
            if first is None:
                first = time.perf_counter()
            if not chunk:
                break
            chunks.append(chunk)
    result.append((first, b''.join(chunks)))


def main() -> None:
    socket_path, runs, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    client = ops.pebble.Client(socket_path=socket_path)
    # Start after the newest custom notice already there, so that every poll waits.
    existing: list = []
    long_poll(socket_path, '', existing, timeout='')
    notices = json.loads(existing[0][1].split(b'\r\n\r\n', 1)[1])['result']
    after = notices[-1]['last-repeated'] if notices else ''
    for i in range(10 + runs):
        result: list = []
        poller = threading.Thread(target=long_poll, args=(socket_path, after, result))
        poller.start()
        time.sleep(SETTLE)
        key = 'bench.example.com/wake' if mode == 'same' else f'bench.example.com/k{i}'
        began = time.perf_counter()
        client.notify(ops.pebble.NoticeType.CUSTOM, key)
        poller.join()
        first, raw = result[0]
        body = json.loads(raw.split(b'\r\n\r\n', 1)[1])
        notices = body['result']
        if not notices:
            sys.exit(f'run {i}: the poller timed out')
        after = notices[-1]['last-repeated']
        if first < began:
            sys.exit(f'run {i}: the poller answered before notify was called')
        if i >= 10:
            print(f'{first - began:.9f}')


if __name__ == '__main__':
    main()

"""Times `exec true` through the ops client against a cobble socket.

Usage: ops_exec.py SOCKET RUNS
Prints one round trip per line, in seconds, after 20 that are not printed. Each round trip is
what charm code does: `Client.exec(["true"])` and `wait_output()`; ops opens a new connection
for every request and websocket.
"""

import sys
import time

import ops.pebble


def main() -> None:
    socket, runs = sys.argv[1], int(sys.argv[2])
    client = ops.pebble.Client(socket_path=socket)
    for i in range(20 + runs):
        began = time.perf_counter()
        client.exec(["true"]).wait_output()
        took = time.perf_counter() - began
        if i >= 20:
            print(f"{took:.9f}")


if __name__ == "__main__":
    main()

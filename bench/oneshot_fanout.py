#!/usr/bin/env python3
"""How soon the daemons ordered after a one-shot start once it has completed.

    python3 bench/oneshot_fanout.py BINARY [ROUNDS]

Each round starts `BINARY run` on a fresh temporary $PEBBLE with a SONiC-shaped layer: the
daemon `rsyslogd`, the one-shot `start` after it (its script sleeps 1.5 s, then writes the
time and exits), and twelve daemons `after: [start]`, `requires: [start]`, each writing the
time as its first act. Prints, per round, how long after `start`'s last write the first and
the twelfth daemon wrote theirs, and how many daemon log lines speak of an error or a
failure (there should be none). Standard library only.
"""
import os, shutil, subprocess, sys, tempfile, time

DAEMONS = 12


def layer(d):
    text = (
        "services:\n"
        "  rsyslogd:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n"
        "  start:\n    override: replace\n    type: oneshot\n    startup: enabled\n"
        "    after: [rsyslogd]\n"
        f"    command: sh -c 'sleep 1.5; date +%s.%N > {d}/exited'\n"
    )
    for n in range(1, DAEMONS + 1):
        text += (
            f"  daemon{n}:\n    override: replace\n    startup: enabled\n"
            "    after: [start]\n    requires: [start]\n"
            f"    command: sh -c 'date +%s.%N >> {d}/starts; exec sleep 1000'\n"
        )
    return text


def main():
    binary, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for r in range(rounds):
        d = tempfile.mkdtemp(prefix="cobble-fanout-")
        os.makedirs(f"{d}/layers")
        with open(f"{d}/layers/001-sonic.yaml", "w") as f:
            f.write(layer(d))
        with open(f"{d}/log", "w") as log:
            p = subprocess.Popen([binary, "run"], env=dict(os.environ, PEBBLE=d),
                                 stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            starts = []
            while time.monotonic() < deadline and len(starts) < DAEMONS:
                time.sleep(0.05)
                if os.path.exists(f"{d}/starts"):
                    starts = open(f"{d}/starts").read().split()
            if len(starts) < DAEMONS:
                sys.exit(f"round {r}: only {len(starts)} of {DAEMONS} daemons started in 60 s")
            exited = float(open(f"{d}/exited").read())
            starts = sorted(float(s) for s in starts)
            lines = open(f"{d}/log").read().splitlines()
            bad = sum(1 for l in lines if "error" in l.lower() or "fail" in l.lower())
            print(f"round {r}: first daemon {(starts[0] - exited) * 1000:.1f} ms, "
                  f"twelfth {(starts[-1] - exited) * 1000:.1f} ms after start's exit; "
                  f"error or failure lines: {bad}")
        finally:
            p.terminate()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()

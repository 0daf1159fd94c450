#!/usr/bin/env python3
"""Pebble's Go CLI against cobble: the same commands, the same output.

Runs one sequence of commands of the reference Pebble binary's own CLI (services, plan,
layers, changes and tasks, checks, health, notices, warnings, files, exec, signals,
identities, logs) against a Pebble daemon and against a cobble daemon, each on a fresh
$PEBBLE, and compares what the CLI printed and its exit codes, times and temporary paths
normalised. With --reexec, cobble's daemon is re-executed in place (`cobble reexec`) before
every command: what the CLI sees must not change.

    python3 tests/differential/go_cli.py --cobble target/debug/cobble \\
        --pebble /path/to/pebble-v1.32.1 [--reexec]

Exit status: 0 when the outputs are identical, 1 when they differ (the diff is printed), 2
when a daemon did not start or a re-execution failed.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LAYER = """\
summary: base
services:
  web:
    override: replace
    command: /bin/sh -c 'echo started web; exec sleep 1000'
    startup: enabled
  job:
    override: replace
    command: /bin/sh -c 'echo job ran'
    on-success: ignore
checks:
  up:
    override: replace
    period: 1h
    exec:
      command: "true"
"""

EXTRA = """\
services:
  web:
    override: merge
    environment: {A: b}
"""

# Each command as the CLI's arguments; @W@ is a scratch directory of the run.
COMMANDS = [
    ['services'], ['plan'], ['replan'], ['services'], ['start', 'web', 'job'], ['services'],
    ['stop', 'web'], ['services'], ['add', 'extra', '@W@/extra.yaml'], ['plan'],
    ['start', 'web'], ['restart', 'web'], ['services'], ['changes'], ['tasks', '1'],
    ['checks'], ['health'], ['notices'], ['notify', 'example.com/k', 'a=b'], ['notices'],
    ['warnings'], ['okay'], ['push', '@W@/src.txt', '@W@/pushed.txt'],
    ['pull', '@W@/pushed.txt', '@W@/back.txt'], ['ls', '@W@/pushed.txt'],
    ['mkdir', '-p', '@W@/d/x'], ['ls', '@W@/d'], ['rm', '-r', '@W@/d'], ['exec', 'echo', 'hi'],
    ['exec', '--context', 'web', 'sh', '-c', 'echo $A'], ['signal', 'SIGHUP', 'web'],
    ['stop-checks', 'up'], ['checks'], ['start-checks', 'up'], ['identities'], ['logs', 'job'],
    ['stop', 'web'], ['changes'], ['services', 'ghost'], ['start', 'ghost'],
]

NORMALISE = [
    (re.compile(r'\d{4}-\d\d-\d\dT[\d:.]+Z'), '<TIME>'),
    (re.compile(r'today at [\d:]+ UTC'), '<WHEN>'),
]


class Run:
    def __init__(self, daemon: str, cli: str, reexec: str | None) -> None:
        self.daemon, self.cli, self.reexec = daemon, cli, reexec
        self.root = tempfile.mkdtemp(prefix='go-cli-')
        self.pebble = os.path.join(self.root, 'pebble')
        self.scratch = os.path.join(self.root, 'w')
        os.makedirs(os.path.join(self.pebble, 'layers'))
        os.makedirs(self.scratch)
        with open(os.path.join(self.pebble, 'layers', '001-base.yaml'), 'w') as f:
            f.write(LAYER)
        with open(os.path.join(self.scratch, 'extra.yaml'), 'w') as f:
            f.write(EXTRA)
        with open(os.path.join(self.scratch, 'src.txt'), 'w') as f:
            f.write('line one\n')
        self.env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'PEBBLE': self.pebble,
                    'HOME': self.root, 'LANG': 'C.UTF-8'}
        self.proc: subprocess.Popen[bytes] | None = None
        self.reexecs = 0

    def start(self) -> None:
        self.proc = subprocess.Popen([self.daemon, 'run', '--hold'], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run([self.cli, 'services'], env=self.env, capture_output=True,
                              timeout=10).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f'{self.daemon} did not answer within 10 s')

    def command(self, args: list[str]) -> str:
        if self.reexec:
            done = subprocess.run([self.reexec, 'reexec'], env=self.env, capture_output=True,
                                  text=True, timeout=60)
            if done.returncode != 0:
                raise RuntimeError(f'cobble reexec before {args}: {done.stderr.strip()}')
            self.reexecs += 1
        args = [a.replace('@W@', self.scratch) for a in args]
        done = subprocess.run([self.cli, *args], env=self.env, capture_output=True, text=True,
                              timeout=60)
        text = f'$ pebble {" ".join(args)}\n{done.stdout}{done.stderr}exit {done.returncode}\n'
        text = text.replace(self.scratch, '@W@').replace(self.pebble, '@PEBBLE@')
        for pattern, replacement in NORMALISE:
            text = pattern.sub(replacement, text)
        return text

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def transcript(daemon: str, cli: str, reexec: str | None) -> tuple[list[str], int]:
    run = Run(daemon, cli, reexec)
    try:
        run.start()
        return [line for args in COMMANDS for line in run.command(args).splitlines()], \
            run.reexecs
    finally:
        run.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--cobble', required=True, help='the cobble binary')
    p.add_argument('--pebble', required=True, help='the reference Pebble binary (its CLI too)')
    p.add_argument('--reexec', action='store_true',
                   help='re-execute cobble in place before every command')
    args = p.parse_args(argv)
    cobble, pebble = os.path.abspath(args.cobble), os.path.abspath(args.pebble)
    try:
        want, _ = transcript(pebble, pebble, None)
        got, reexecs = transcript(cobble, pebble, cobble if args.reexec else None)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f'go_cli.py: {e}', file=sys.stderr)
        return 2
    diff = list(difflib.unified_diff(want, got, 'pebble', 'cobble', lineterm=''))
    print(f'{len(COMMANDS)} commands of the Go CLI, against Pebble and cobble'
          + (f' (cobble re-executed {reexecs} times, once before each)' if args.reexec else '')
          + (': identical' if not diff else ': different'))
    for line in diff:
        print(line)
    return 1 if diff else 0


if __name__ == '__main__':
    sys.exit(main())

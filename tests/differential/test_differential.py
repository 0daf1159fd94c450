"""Run the random differential test (diff.py) against a reference Pebble binary.

Skipped unless PEBBLE_REFERENCE_BIN names a Pebble v1.32.1 binary. COBBLE_BIN names the
cobble binary (default: target/debug/cobble of this repository). Each seed runs
DIFF_COUNT requests (default 300) and must answer identically for at least
DIFF_MIN_IDENTICAL percent of them (default 99).

    PEBBLE_REFERENCE_BIN=/path/to/pebble python3 -m pytest tests/differential -v
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DIFF = HERE / 'diff.py'

PEBBLE_BIN = os.environ.get('PEBBLE_REFERENCE_BIN', '')
COBBLE_BIN = os.environ.get('COBBLE_BIN') or str(REPO_ROOT / 'target' / 'debug' / 'cobble')
SEEDS = [int(s) for s in os.environ.get('DIFF_SEEDS', '1,2,3').split(',') if s.strip()]
COUNT = int(os.environ.get('DIFF_COUNT', '300'))
MIN_IDENTICAL = float(os.environ.get('DIFF_MIN_IDENTICAL', '99'))

pytestmark = pytest.mark.skipif(
    not PEBBLE_BIN,
    reason='PEBBLE_REFERENCE_BIN is not set: the differential test needs a Pebble v1.32.1 '
           'binary to compare cobble with (see tests/differential/README.md)')


@pytest.mark.parametrize('seed', SEEDS)
def test_answers_match_pebble(seed: int, tmp_path: Path) -> None:
    for what, path in (('PEBBLE_REFERENCE_BIN', PEBBLE_BIN), ('COBBLE_BIN', COBBLE_BIN)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            pytest.fail(f'{what}: {path} is not an executable file')
    report = tmp_path / f'seed-{seed}.json'
    proc = subprocess.run(
        [sys.executable, str(DIFF), '--cobble', COBBLE_BIN, '--pebble', PEBBLE_BIN,
         '--seed', str(seed), '--count', str(COUNT), '--min-identical', str(MIN_IDENTICAL),
         '--report', str(report)],
        capture_output=True, text=True, timeout=1800)
    output = proc.stdout[-20000:] + proc.stderr[-5000:]
    assert proc.returncode in (0, 1), f'diff.py could not complete the run:\n{output}'
    data = json.loads(report.read_text())
    assert data['total'] == COUNT, output
    assert data['percent'] >= MIN_IDENTICAL, (
        f"seed {seed}: {data['identical']}/{data['total']} identical "
        f"({data['percent']:.1f}% < {MIN_IDENTICAL}%)\n{output}")

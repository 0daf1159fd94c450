"""Run the log differential (logdiff.py) against a reference Pebble binary.

Skipped unless PEBBLE_REFERENCE_BIN names a Pebble v1.32.1 binary. COBBLE_BIN names the
cobble binary (default: target/debug/cobble of this repository). Each scenario is a test:
cobble's daemon log must hold every line of Pebble's, in Pebble's words and order (see
README.md), and its service output and exit code must be Pebble's.

    PEBBLE_REFERENCE_BIN=/path/to/pebble python3 -m pytest tests/differential -v -k log
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
LOGDIFF = HERE / 'logdiff.py'

sys.path.insert(0, str(HERE))
from logdiff import SCENARIOS  # noqa: E402

PEBBLE_BIN = os.environ.get('PEBBLE_REFERENCE_BIN', '')
COBBLE_BIN = os.environ.get('COBBLE_BIN') or str(REPO_ROOT / 'target' / 'debug' / 'cobble')

pytestmark = pytest.mark.skipif(
    not PEBBLE_BIN,
    reason='PEBBLE_REFERENCE_BIN is not set: the log differential needs a Pebble v1.32.1 '
           'binary to compare cobble with (see tests/differential/README.md)')


@pytest.mark.parametrize('scenario', [s.name for s in SCENARIOS])
def test_daemon_log_matches_pebble(scenario: str, tmp_path: Path) -> None:
    for what, path in (('PEBBLE_REFERENCE_BIN', PEBBLE_BIN), ('COBBLE_BIN', COBBLE_BIN)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            pytest.fail(f'{what}: {path} is not an executable file')
    report = tmp_path / f'{scenario}.json'
    proc = subprocess.run(
        [sys.executable, str(LOGDIFF), '--cobble', COBBLE_BIN, '--pebble', PEBBLE_BIN,
         '--only', scenario, '--report', str(report)],
        capture_output=True, text=True, timeout=600)
    output = proc.stdout[-20000:] + proc.stderr[-5000:]
    assert proc.returncode in (0, 1), f'logdiff.py could not complete {scenario}:\n{output}'
    data = json.loads(report.read_text())
    assert data['total'] == 1, output
    assert data['identical'] == 1, f'{scenario}: the logs differ\n{output}'

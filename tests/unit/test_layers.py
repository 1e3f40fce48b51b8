"""The package's shape is part of its contract: layers point one way and no package has a cycle.

The contracts live in `.importlinter` at the repository root; this test makes a wrong import fail
`./bin/test` like any other regression (grimp counts function-level imports too, so a cycle cannot
hide inside a function body).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_hold():
    run = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout

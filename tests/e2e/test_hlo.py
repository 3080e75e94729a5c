"""GEMM custom-call FLOPs from optimized HLO text: fixtures, real CPU HLO, malformed input."""

from __future__ import annotations

import subprocess
import sys

# --- small modules, one behaviour each --------------------------------------------------------


def test_module_does_not_import_jax() -> None:
    code = "import sys, xmon.hlo; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

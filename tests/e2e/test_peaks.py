"""Peak table: device-kind spellings, overrides, ridge point and sanity of every entry."""

from __future__ import annotations


def test_module_does_not_import_jax() -> None:
    import subprocess
    import sys

    code = "import sys, xmon.analysis.peaks; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

"""Our event-file writer against tensorboard's: the same bytes as its RecordWriter, files its
CRC-checking record reader and its EventAccumulator read back, and no numpy in the daemon."""

from __future__ import annotations

import subprocess
import sys


def test_the_exporter_does_not_import_numpy() -> None:
    code = ("import sys, xmon.exporters.tensorboard; assert 'numpy' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('numpy'))")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)

"""Loop-aware program cost from optimized HLO text (xmon.execution.loop_cost), on hand-written
modules with a stand-in for XLA's cost analysis that counts like it: one FLOP per element of a
multiply, one transcendental per element of an exponential, one byte per instruction; a while
loop's body and condition once, a conditional's costliest branch, anything else called once."""

from __future__ import annotations

import subprocess
import sys


def test_module_does_not_import_jax() -> None:
    code = "import sys, xmon.execution.loop_cost; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- module protos: what only the proto form has ------------------------------------------------


def test_the_proto_reader_does_not_import_jax() -> None:
    code = "import sys, xmon.hlo.proto; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

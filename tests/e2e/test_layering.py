"""The tree keeps its shape: its layers (import-linter's contracts in pyproject.toml: the CLI
over the views over the daemon over its parts over the agent over what all share; jax only in
the agent; the wire's generated protobuf code nowhere past the daemon's intake), no import
circles between xmon's modules (a function-level or type-checking import counts too), every
package is in the distribution, and ruff is clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's contracts (pyproject.toml in ``root``) over the xmon package in it."""
    binary = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert binary, "import-linter is not installed (pip install -e '.[test]')"
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(root)}
    return subprocess.run([binary, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_the_layers_hold_only_the_agent_imports_jax_and_the_wire_stops_at_the_intake() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout, result.stdout[-3000:]


def test_the_contracts_catch_an_import_up_the_layers_jax_outside_the_agent_and_the_wire_past_it(
    tmp_path: Path,
) -> None:
    """A model importing the daemon, a detector importing jax, and job state importing the
    wire's generated code, each planted in a copy of the tree."""
    shutil.copytree(REPO / "xmon", tmp_path / "xmon",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "xmon" / "model.py").open("a") as model:
        model.write("\n\ndef _up() -> None:\n    import xmon.daemon.service  # noqa\n")
    with (tmp_path / "xmon" / "findings" / "host.py").open("a") as host:
        host.write("\n\ndef _jax() -> None:\n    import jax  # noqa\n")
    with (tmp_path / "xmon" / "daemon" / "jobs.py").open("a") as jobs:
        jobs.write("\n\ndef _wire() -> None:\n    from xmon.wire.proto import xmon_pb2  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "0 kept, 3 broken" in result.stdout, result.stdout[-3000:]
    assert "xmon.model -> xmon.daemon.service" in result.stdout, result.stdout[-3000:]
    assert "xmon.findings is not allowed to import jax" in result.stdout, result.stdout[-3000:]
    assert "xmon.daemon.jobs -> xmon.wire.proto.xmon_pb2" in result.stdout, result.stdout[-3000:]

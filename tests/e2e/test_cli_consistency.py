"""The commands speak one language: the same flags for the same things, help that shows the
default socket, usage errors from the subcommand with the nearest option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.procs import REPO, base_env


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["daemon", "--perod", "1"], "xmon daemon: error: unrecognized arguments: --perod 1 "
                                     "(did you mean --period?)"),
        (["programs", "--jbo", "x"], "xmon programs: error: unrecognized arguments: --jbo x "
                                     "(did you mean --job?)"),
        (["ls", "--zzz"], "xmon ls: error: unrecognized arguments: --zzz"),
    ],
)  # fmt: skip
def test_a_mistyped_option_names_the_subcommand_and_the_nearest_option(
    args: list[str], expected: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xmon", *args], env=base_env(), cwd=REPO,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: xmon {args[0]} ")
    assert result.stderr.rstrip().endswith(expected)


def test_an_unwritable_logdir_is_refused_at_start(tmp_path: Path) -> None:
    """Not accepted at start and warned about only when a job attaches."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "xmon", "daemon", "--logdir", str(blocker / "tb"),
         "--socket", str(tmp_path / "xmon.sock"), "--listen", "127.0.0.1:0"],
        env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        f"xmon daemon: --logdir {blocker / 'tb'}: not writable (Not a directory); "
        "pass a directory this user can write\n"
    )
    assert not (tmp_path / "xmon.sock").exists()

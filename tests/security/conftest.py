"""An unprivileged local user for the root-daemon cases: the attacker on a shared host."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import Attacker


@pytest.fixture(scope="session")
def attacker() -> Iterator[Attacker]:
    """A fresh local account (``useradd``), removed afterwards; skipped where none can be
    made (not root, or no useradd)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create an unprivileged attacker account")
    name = f"xmonatk{secrets.token_hex(3)}"
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot create a user here: {made.stderr.strip()}")
    entry = pwd.getpwnam(name)
    try:
        yield Attacker(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every user can reach (pytest's own is 0700 under a root-only parent)."""
    base = Path("/tmp") / f"xmon-sec-{secrets.token_hex(4)}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)

"""The attacker on a shared host: an unprivileged local account the tests create."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Attacker:
    name: str
    uid: int
    gid: int

    def run(self, *cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command as this user (no shell, no root)."""
        return subprocess.run(list(cmd), user=self.uid, group=self.gid, extra_groups=[],
                              cwd=cwd, capture_output=True, text=True, timeout=60)  # fmt: skip

    def own(self, *paths: Path) -> None:
        for path in paths:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

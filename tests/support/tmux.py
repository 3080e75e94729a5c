"""The terminal view in a private tmux server, and what its pane shows."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


class Tmux:
    """A private tmux server (its own socket), one session running one command."""

    def __init__(self, socket_path: Path) -> None:
        self.base = ["tmux", "-S", str(socket_path)]

    def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run([*self.base, *args], capture_output=True, text=True,
                                timeout=30, env=env)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    def start(self, command: str, env: dict[str, str], width: int = 110, height: int = 32) -> None:
        self.run("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height),
                 command, env=env)  # fmt: skip

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "top", *keys)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


def shows(tmux: Tmux, *patterns: str) -> str | None:
    screen = tmux.screen()
    return screen if all(re.search(p, screen) for p in patterns) else None

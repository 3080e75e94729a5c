"""Text from jobs and daemons made safe for the operator's terminal.

A job names its programs, paths and messages; printed raw, an escape sequence in them would
drive the terminal (move the cursor, retitle the window, rewrite what was printed before).
Every control or separator character is shown as its escape instead (``\\x1b``); commands
shown to be copied are quoted for the shell, so a path like ``x; curl … | sh`` stays one
argument.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Iterable


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable (``C*``, ``Zl``, ``Zp``; all but
    those in ``keep``) shown as its escape."""
    return "".join(
        ch
        if ch in keep or (ch.isprintable() and unicodedata.category(ch) not in ("Zl", "Zp"))
        else _escape(ch)
        for ch in text
    )


def clipped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out: a job's finding or
    message may be megabytes long, and a view prints what a terminal can show."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def shown(text: str, limit: int, keep: str = "") -> str:
    """``text`` clipped to ``limit`` characters, then made printable."""
    return printable(clipped(text, limit), keep)


def command(*words: str) -> str:
    """A shell command line: each word quoted as needed, then made printable."""
    return printable(shlex.join(words))


def lines(items: Iterable[str]) -> str:
    return "\n".join(printable(item) for item in items)

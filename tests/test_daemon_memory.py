"""The daemon's malloc settings: applied on glibc, harmless elsewhere."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from xmon.daemon import memory

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_arena_cap_applies_before_threads_and_trim_releases_freed_pages() -> None:
    script = (
        "from xmon.daemon import memory\n"
        "assert memory.limit_arenas()\n"
        "blocks = [bytearray(4096) for _ in range(20000)]\n"
        "del blocks\n"
        "print(memory.trim())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_without_glibc_both_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_LIBC", None)
    assert memory.limit_arenas() is False
    assert memory.trim() is False

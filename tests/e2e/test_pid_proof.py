"""The pid proof's two sides (xmon.daemon.proof, xmon.agent.proof) on this machine's kernel:
a thread shows a token as its name, anyone reads it, and no other process can set it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from xmon.agent.proof import can_prove
from xmon.daemon.proof import shows_token

pytestmark = pytest.mark.skipif(not can_prove(), reason="thread names are read on Linux")


def test_no_other_process_can_name_a_thread_of_this_one() -> None:
    """What the proof stands on: the kernel lets only the process itself set its threads'
    names: another process, of the same user or root (as this test runs in CI), gets
    EINVAL."""
    target = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/comm"
    code = f"with open({target!r}, 'w') as comm: comm.write('xmforged')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "OSError" in result.stderr, result.stderr
    assert shows_token(os.getpid(), "xmforged") is False

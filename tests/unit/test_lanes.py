"""The tiers hold what they say. The unit tier, tests/unit, opens no socket: a test there that
does fails saying to move it to tests/integration. The fast lane, ``pytest -m "not e2e"``,
starts no process: a test that does is marked e2e or is under tests/e2e (tests/conftest.py
refuses the start otherwise, naming the test)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import grpc
import pytest


def test_a_test_not_marked_e2e_cannot_start_a_process() -> None:
    with pytest.raises(AssertionError, match="test_lanes.py::.* starts a process .*mark it e2e"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    async def spawn() -> None:
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")

    with pytest.raises(AssertionError, match="mark it e2e"):
        asyncio.run(spawn())


def test_a_unit_test_cannot_open_a_socket() -> None:
    with pytest.raises(AssertionError, match="test_lanes.py::.* opens a socket .*integration"):
        socket.socket()
    with pytest.raises(AssertionError, match="move it to tests/integration"):
        grpc.insecure_channel("unix:///nonexistent/xmon.sock")
    left, right = socket.socketpair()  # a pair opens nothing (asyncio's loop makes one)
    left.close()
    right.close()

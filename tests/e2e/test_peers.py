"""xmon.daemon.peers against real unix sockets: a claimed pid is verified by the connections
its process holds, refuted when it holds none, undecided (and said why) where the kernel or
/proc cannot tell; and the daemon's ingest service acts on each verdict."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.daemon import peers
from xmon.daemon.peers import Verdict

from support.peer_listener import HOLDER, Listener

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="peer credentials are Linux's")

CONNECTIONS = 300


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    made = Listener(tmp_path)
    yield made
    made.close()


@pytest.fixture
def holder(listener: Listener) -> Iterator[subprocess.Popen[str]]:
    """Another process holding CONNECTIONS connections to the listener."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(listener.public), str(CONNECTIONS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 10
    while len(listener.accepted) < CONNECTIONS and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    proc.communicate(timeout=10)


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@linux_only
def test_a_process_holding_a_connection_is_verified_and_others_refuted(
    listener: Listener, holder: subprocess.Popen[str], sleeper: int
) -> None:
    verifier = listener.verifier()
    assert verifier.check(holder.pid).verdict is Verdict.VERIFIED
    refuted = verifier.check(sleeper)
    assert refuted.verdict is Verdict.REFUTED
    assert refuted.reason == f"process {sleeper} holds no connection to this daemon's socket"
    # This process holds the listener and its accepted ends, not a client end.
    assert verifier.check(os.getpid()).verdict is Verdict.REFUTED


@linux_only
def test_a_pid_with_no_process_is_refuted(listener: Listener) -> None:
    """Every connection's client is known (its credentials), so a pid none of them has is
    no client's: a claim of a pid that no process holds yet cannot wait for its owner."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    check = listener.verifier().check(gone.pid)
    assert check.verdict is Verdict.REFUTED
    assert check.reason == f"process {gone.pid} holds no connection to this daemon's socket"


def _unreadable(*args: object) -> list[peers.Peer]:
    raise peers.Undecided("cannot list /proc/self/fd: Permission denied")


def test_without_its_descriptors_a_claim_cannot_be_decided(
    listener: Listener, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "connection_peers", _unreadable)
    check = listener.verifier().check(holder.pid)
    assert check == peers.PidCheck(Verdict.UNKNOWN, "cannot list /proc/self/fd: Permission denied")


@linux_only
def test_checks_are_decided_with_hundreds_of_connections_on_the_socket(
    listener: Listener, holder: subprocess.Popen[str], sleeper: int
) -> None:
    """Verified (a process holding 300 connections) and refuted (one holding none), with 300
    connections accepted, every time: never undecided for want of time. What a check costs:
    benchmarks/pid_checks.py."""
    verifier = listener.verifier()
    for _ in range(10):
        for kind, pid in ((Verdict.VERIFIED, holder.pid), (Verdict.REFUTED, sleeper)):
            check = verifier.check(pid)
            assert check.verdict is kind, check

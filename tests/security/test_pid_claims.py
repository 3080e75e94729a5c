"""A hello's pid is checked against the connections the claimed process holds: an honest agent
is verified, a claim of another live process is refused (PERMISSION_DENIED, counted as
``pid_claims``), an unprivileged user cannot pose as a root process, and a pid the daemon
cannot check is accepted but exported as unverified."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import Attacker
from claims import Claimant

from flood_attacks import refused
from procs import Daemon, start_daemon, start_job, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform != "linux", reason="pid claims are checked on Linux"),
]


def _verified(daemon: Daemon, name: str, pid: int) -> float | None:
    """``xmon_job_pid_verified`` of the job, None while it has no series."""
    series = re.search(
        rf'^xmon_job_pid_verified\{{job_name="{name}",pid="{pid}"\}} (\S+)$',
        daemon.scrape(),
        re.MULTILINE,
    )
    return float(series.group(1)) if series else None


def _readable_fds(pid: int) -> bool:
    """Whether this process may read ``pid``'s descriptors (a sandbox may hide its init's)."""
    try:
        return all(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    proc = start_daemon(tmp_path / "d")  # verify_pids: "prefer", the default
    yield proc
    proc.stop()


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "120"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_an_honest_agent_is_verified(daemon: Daemon) -> None:
    agent = Claimant(daemon.socket_path, "honest", "self")
    try:
        assert agent.codes() == ["OK"]
        wait_for(lambda: _verified(daemon, "honest", agent.pid) == 1.0, 20, "the verified job")
    finally:
        assert agent.close() == ""
    assert refused(daemon.scrape()).get("pid_claims") == 0.0


def test_a_real_jax_job_is_verified(daemon: Daemon, tmp_path: Path) -> None:
    script = "import time, jax.numpy as jnp\nwhile True:\n    jnp.ones(8).sum(); time.sleep(0.1)\n"
    job = start_job(tmp_path, daemon.socket_path, script, "jaxjob", devices=1)
    try:
        wait_for(lambda: _verified(daemon, "jaxjob", job.popen.pid) == 1.0, 90, "the real job")
        assert f"agent attached: job 'jaxjob' pid {job.popen.pid} (verified)" in daemon.log()
    finally:
        job.popen.kill()
        job.popen.wait()


def test_a_claim_of_a_live_process_without_a_connection_is_refused(
    daemon: Daemon, sleeper: int
) -> None:
    """The claimant holds its own connection, not one of the claimed processes'; the last
    claim (its own pid) is welcomed, so a refusal harms no honest stream."""
    claims = [str(sleeper), str(os.getpid()), str(daemon.popen.pid), "self"]
    impostor = Claimant(daemon.socket_path, "impostor", *claims)
    try:
        assert impostor.codes() == ["PERMISSION_DENIED"] * 3 + ["OK"]
        reason = impostor.answers[0][2]
        assert reason == (
            f"pid {sleeper} is not this stream's process: process {sleeper} holds no "
            "connection to this daemon's socket"
        )
        wait_for(lambda: _verified(daemon, "impostor", impostor.pid) == 1.0, 20, "own claim")
        text = daemon.scrape()
        assert refused(text)["pid_claims"] == 3.0
        assert f'pid="{sleeper}"' not in text
    finally:
        impostor.close()
    log = daemon.log()
    assert log.count("agent refused") == 3 and "Traceback" not in log


NEW_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc")


def _namespaces_can_be_made() -> bool:
    try:
        return subprocess.run([*NEW_PID_NAMESPACE, "true"], capture_output=True,
                              timeout=10).returncode == 0  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _namespaces_can_be_made(), reason="cannot make a pid namespace here")
def test_a_job_in_a_container_is_verified_by_its_pid_there(daemon: Daemon, sleeper: int) -> None:
    """A process in its own pid namespace (a Kubernetes pod, a docker container) says its
    pid as it sees it (1 here, the host's init): verified through the host pid that holds the
    connection. A host pid it does not hold stays refused from inside a container too."""
    contained = Claimant(daemon.socket_path, "contained", str(sleeper), "self",
                         prefix=NEW_PID_NAMESPACE)  # fmt: skip
    try:
        assert contained.codes() == ["PERMISSION_DENIED", "OK"], contained.answers
        inner = int(contained.answers[1][0])
        assert inner == 1  # the first process of its namespace
        wait_for(lambda: _verified(daemon, "contained", inner) == 1.0, 20, "the inner pid verified")
    finally:
        contained.close()
    assert "verified" in daemon.log()


@pytest.mark.skipif(not _namespaces_can_be_made(), reason="cannot make a pid namespace here")
def test_a_pod_with_its_own_network_is_accepted_unverified_whatever_its_pid(
    daemon: Daemon, sleeper: int
) -> None:
    """A client in its own network namespace too (a pod without host networking): the kernel
    lists its connection in its namespace, so nothing proves or refutes its claim, even when
    its pid number is a live host process without a connection (pids in a pod are small, and
    the host has processes with those numbers)."""
    pod = Claimant(daemon.socket_path, "pod", str(sleeper),
                   prefix=(*NEW_PID_NAMESPACE[:2], "--net", *NEW_PID_NAMESPACE[2:]))  # fmt: skip
    try:
        assert pod.codes() == ["OK"], pod.answers
        wait_for(lambda: _verified(daemon, "pod", sleeper) == 0.0, 20, "the pod marked unverified")
    finally:
        pod.close()
    assert "a client in another network namespace (a container) is connected" in daemon.log()


def test_pid_1_is_refused_or_marked_unverified(daemon: Daemon) -> None:
    """Init holds no connection: refused where the daemon can read its descriptors; where it
    cannot (a sandbox hides them even from root) the claim is undecided, accepted, marked 0."""
    impostor = Claimant(daemon.socket_path, "init", "1")
    try:
        if _readable_fds(1):
            assert impostor.codes() == ["PERMISSION_DENIED"]
        else:
            assert impostor.codes() == ["OK"]
            wait_for(lambda: _verified(daemon, "init", 1) == 0.0, 20, "the unverified job")
    finally:
        impostor.close()


def test_require_refuses_what_cannot_be_verified(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now: undecidable (as another pid namespace's)
    daemon = start_daemon(tmp_path / "d", env={"XMON_VERIFY_PIDS": "require"})
    try:
        claimant = Claimant(daemon.socket_path, "strict", str(gone.pid), "self")
        try:
            assert claimant.codes() == ["PERMISSION_DENIED", "OK"]
            assert "cannot verify pid" in claimant.answers[0][2]
            wait_for(lambda: _verified(daemon, "strict", claimant.pid) == 1.0, 20, "own claim")
        finally:
            claimant.close()
    finally:
        daemon.stop()


def test_an_unprivileged_user_cannot_claim_a_root_process(
    shared_tmp: Path, attacker: Attacker, sleeper: int
) -> None:
    """A local user allowed on the socket (its group, as the xmon group) claims root's
    processes, the daemon's included, then its own pid: only its own is accepted."""
    os.chmod(shared_tmp, 0o755)
    daemon = start_daemon(shared_tmp / "d")
    try:
        os.chown(daemon.socket_path, -1, attacker.gid)  # 0660: the attacker's group may connect
        claims = [str(sleeper), str(daemon.popen.pid), "self"]
        impostor = Claimant(daemon.socket_path, "atk", *claims, user=attacker.uid,
                            group=attacker.gid)  # fmt: skip
        try:
            assert impostor.codes() == ["PERMISSION_DENIED", "PERMISSION_DENIED", "OK"], (
                impostor.answers
            )
            status = Path(f"/proc/{impostor.pid}/status").read_text()
            assert f"\nUid:\t{attacker.uid}\t{attacker.uid}\t" in status  # not root's
            wait_for(lambda: _verified(daemon, "atk", impostor.pid) == 1.0, 20, "its own claim")
            text = daemon.scrape()
            assert refused(text)["pid_claims"] == 2.0 and f'pid="{sleeper}"' not in text
        finally:
            impostor.close()
    finally:
        daemon.stop()

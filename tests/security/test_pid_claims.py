"""A hello's pid is checked against the connections the claimed process holds: an honest agent
is verified, a claim of another live process is refused (PERMISSION_DENIED, counted as
``pid_claims``), an unprivileged user cannot pose as a root process, and a pid the daemon
cannot check is accepted but exported as unverified."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack import Attacker
from claims import Claimant

from support.flood_attacks import refused
from support.procs import Daemon, start_daemon, start_job, wait_for

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
    pid as it sees it (1 here, the host's init): verified through the host process that
    connected, and known by that host pid. A host pid it is not stays refused."""
    contained = Claimant(daemon.socket_path, "contained", str(sleeper), "self",
                         prefix=NEW_PID_NAMESPACE)  # fmt: skip
    try:
        assert contained.codes() == ["PERMISSION_DENIED", "OK"], contained.answers
        assert int(contained.answers[1][0]) == 1  # the first process of its namespace
        host = _host_pid(contained.pid)
        wait_for(lambda: _verified(daemon, "contained", host) == 1.0, 20, "its host pid")
        assert 'pid="1"' not in daemon.scrape()
    finally:
        contained.close()
    assert "verified" in daemon.log()


def _host_pid(unshare: int) -> int:
    """The host pid of the process ``unshare --fork`` started (its only child)."""
    children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
    return int(children[0])


@pytest.mark.skipif(not _namespaces_can_be_made(), reason="cannot make a pid namespace here")
def test_a_pod_with_its_own_network_is_verified_by_its_connection(
    daemon: Daemon, sleeper: int
) -> None:
    """A client in its own network namespace too (a pod without host networking): its
    connection is the daemon's all the same, so its credentials say who it is. A host pid it
    is not (pids in a pod are small, and the host has processes with those numbers) is
    refused; its own pid there is verified, known by its host pid."""
    pod = Claimant(daemon.socket_path, "pod", str(sleeper), "self",
                   prefix=(*NEW_PID_NAMESPACE[:2], "--net", *NEW_PID_NAMESPACE[2:]))  # fmt: skip
    try:
        assert pod.codes() == ["PERMISSION_DENIED", "OK"], pod.answers
        host = _host_pid(pod.pid)
        wait_for(lambda: _verified(daemon, "pod", host) == 1.0, 20, "the pod verified")
        assert f'pid="{sleeper}"' not in daemon.scrape()
    finally:
        pod.close()


# A user namespace of its own makes anyone root over a pid namespace of their own, where it
# may choose its next pid (ns_last_pid): the claimant is started as the victim's host pid.
NEXT_PID_IS_THE_VICTIM_S = 'echo $((VICTIM - 1)) > /proc/sys/kernel/ns_last_pid && "$0" "$@"'
OWN_USER_AND_PID_NAMESPACE = ("unshare", "-Urpf", "--mount-proc", "sh", "-c",
                              NEXT_PID_IS_THE_VICTIM_S)  # fmt: skip


def _own_namespaces_can_be_made() -> bool:
    try:
        made = subprocess.run([*OWN_USER_AND_PID_NAMESPACE, "true"], capture_output=True,
                              env={**os.environ, "VICTIM": "500"}, timeout=10)  # fmt: skip
        return made.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _own_namespaces_can_be_made(),
                    reason="cannot make a user and pid namespace here (unshare -Urpf)")  # fmt: skip
def test_a_process_that_is_a_victim_s_pid_in_its_own_namespace_gets_its_own_pid(
    daemon: Daemon, sleeper: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``unshare -Urpf``, then a claimant whose pid in that namespace is the victim's host
    pid: it was verified as the victim (its series, psutil data and captures the victim's).
    Now it is known by its own host pid, and the victim's pid stays free."""
    monkeypatch.setenv("VICTIM", str(sleeper))
    impostor = Claimant(daemon.socket_path, "nsatk", "self", prefix=OWN_USER_AND_PID_NAMESPACE)
    try:
        assert impostor.answers[0][0] == str(sleeper), impostor.answers  # it is that pid there
        host = _claimant_host_pid(impostor.pid)
        assert host != sleeper
        wait_for(lambda: _verified(daemon, "nsatk", host) == 1.0, 20, "its own host pid")
        assert f'pid="{sleeper}"' not in daemon.scrape()
    finally:
        impostor.close()


def _claimant_host_pid(unshare: int) -> int:
    """The python under ``unshare``'s child shell."""
    return _host_pid(_host_pid(unshare))


def test_a_claim_ends_when_its_process_exits(daemon: Daemon) -> None:
    """The claimant exits and leaves a child holding its connection and stream: the job kept
    the pid, so a process the kernel gives that pid next could not attach."""
    claimant = Claimant(daemon.socket_path, "orphan", "self", orphan=True)
    try:
        assert claimant.codes() == ["OK"]
        claimant.popen.wait(timeout=20)
        assert claimant.child is not None and Path(f"/proc/{claimant.child}").exists()
        wait_for(lambda: _verified(daemon, "orphan", claimant.pid) is None, 20, "the claim gone")
    finally:
        if claimant.child is not None:
            os.kill(claimant.child, signal.SIGKILL)
        claimant.close()
    assert f"agent's process exited: job 'orphan' pid {claimant.pid}" in daemon.log()


def test_pid_1_is_refused(daemon: Daemon) -> None:
    """Init made no connection. Its descriptors need not be readable (a sandbox hides them
    even from root): the connections' credentials decide."""
    impostor = Claimant(daemon.socket_path, "init", "1")
    try:
        assert impostor.codes() == ["PERMISSION_DENIED"]
    finally:
        impostor.close()


def test_a_pid_no_process_holds_yet_is_refused(daemon: Daemon) -> None:
    """A claim of a pid nobody holds was accepted unverified; the job the kernel gave that
    pid later could not attach (``ALREADY_EXISTS``) for as long as the claim's stream lived."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    claimant = Claimant(daemon.socket_path, "early", str(gone.pid), "self")
    try:
        assert claimant.codes() == ["PERMISSION_DENIED", "OK"], claimant.answers
        assert claimant.answers[0][2] == (
            f"pid {gone.pid} is not this stream's process: process {gone.pid} holds no "
            "connection to this daemon's socket"
        )
    finally:
        claimant.close()


def test_a_claim_is_bound_to_its_own_stream_by_the_process_s_proof(daemon: Daemon) -> None:
    """A process connected but not yet attached (a job between its connect and its hello)
    passes the connection check from any stream. The daemon asks the stream for proof: an
    impostor who answers without being the process is refused; one who offers none (as an
    older agent) gets the pid unverified, and the process itself takes it back when it
    attaches."""
    victim = Claimant(daemon.socket_path, "victim", "self", hold=True)
    liar = Claimant(daemon.socket_path, "liar", str(victim.pid), proof="lie")
    silent = Claimant(daemon.socket_path, "silent", str(victim.pid), proof="none")
    try:
        assert liar.codes() == ["PERMISSION_DENIED"], liar.answers
        assert liar.answers[0][2] == (
            f"pid {victim.pid} is not this stream's process: process {victim.pid} does not "
            "show this stream's token: not its stream"
        )
        assert silent.codes() == ["OK"], silent.answers
        wait_for(lambda: _verified(daemon, "silent", victim.pid) == 0.0, 20, "the unproven claim")
        victim.claim()
        assert victim.codes() == ["OK"], victim.answers
        wait_for(lambda: _verified(daemon, "victim", victim.pid) == 1.0, 20, "the proven claim")
        assert _verified(daemon, "silent", victim.pid) is None, "the unproven stream gave it up"
        assert refused(daemon.scrape())["pid_claims"] == 1.0
    finally:
        for claimant in (victim, liar, silent):
            claimant.close()
    assert "gave up pid" in daemon.log() and "Traceback" not in daemon.log()


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


def test_a_daemon_running_as_its_own_user_verifies_claims(
    shared_tmp: Path, attacker: Attacker, sleeper: int
) -> None:
    """The unit runs the daemon as ``User=xmon``, which may not read another user's
    ``/proc/<pid>/fd``: every claim was undecided, accepted and marked unverified, a false
    one included. The connections' credentials need no such right."""
    workdir = shared_tmp / "d"
    workdir.mkdir()
    attacker.own(workdir)  # here the account stands for the daemon's own user
    as_user = ("setpriv", f"--reuid={attacker.uid}", f"--regid={attacker.gid}", "--clear-groups")
    runs = subprocess.run([*as_user, sys.executable, "-c", "pass"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    if runs.returncode != 0:  # e.g. a libpython under /root, which that user cannot read
        pytest.skip(f"this Python does not run as another user: {runs.stderr.strip()[:200]}")
    daemon = start_daemon(workdir, prefix=as_user)
    try:
        claimant = Claimant(daemon.socket_path, "rootjob", str(sleeper), "self")
        try:
            assert claimant.codes() == ["PERMISSION_DENIED", "OK"], claimant.answers
            wait_for(lambda: _verified(daemon, "rootjob", claimant.pid) == 1.0, 20, "verified")
        finally:
            claimant.close()
    finally:
        daemon.stop()

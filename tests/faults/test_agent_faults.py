"""The job must finish with identical results whatever happens to the daemon."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import Proc, start_daemon, start_job, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("agent-faults")]  # the module's jobs

# A deterministic job: its printed checksum must not depend on xmon at all.
JOB = r"""
import os, sys, time
import jax, jax.numpy as jnp
import xmon
key = jax.random.key(42)
w = jax.random.normal(key, (64, 64))
step = jax.jit(lambda w: jnp.tanh(w @ w.T) * 0.5 + w * 0.5)
for i in range(int(os.environ.get("STEPS", "200"))):
    with xmon.step():
        w = step(w)
    time.sleep(float(os.environ.get("SLEEP", "0.005")))
agent = xmon.agent.current() if xmon.is_attached() else None
dropped = agent.transport.counters.reports_dropped if agent else -1
print(f"CHECKSUM {float(w.sum()):.6f}", flush=True)
print(f"ATTACHED {xmon.is_attached()} DROPPED {dropped}", flush=True)
"""


def _checksum(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("CHECKSUM")]
    assert lines, output
    return lines[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The job's result with the agent attached to a healthy daemon."""
    tmp = tmp_path_factory.mktemp("reference")
    daemon = start_daemon(tmp / "d")
    try:
        job = start_job(tmp, daemon.socket_path, JOB, "reference")
        assert job.popen.wait(120) == 0, job.log()
        return _checksum(job.log())
    finally:
        daemon.stop()


def _run(tmp_path: Path, socket_path: Path, name: str, **env: str) -> Proc:
    return start_job(tmp_path, socket_path, JOB, name, **env)


def test_daemon_absent_at_start(tmp_path: Path, reference: str) -> None:
    job = _run(tmp_path, tmp_path / "nobody-here.sock", "absent")
    assert job.popen.wait(120) == 0, job.log()
    output = job.log()
    assert _checksum(output) == reference
    assert "ATTACHED True DROPPED" in output and "DROPPED 0" not in output
    assert "dropped while the daemon" in output  # one line at exit says what was lost


def test_socket_path_unwritable(tmp_path: Path, reference: str) -> None:
    job = _run(tmp_path, Path("/proc/xmon/cannot/exist.sock"), "unwritable")
    assert job.popen.wait(120) == 0, job.log()
    assert _checksum(job.log()) == reference


@pytest.fixture
def hung_daemon(tmp_path: Path) -> Iterator[Path]:
    """A unix socket that accepts connections and never reads a byte."""
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(2)
    for conn in accepted:
        conn.close()
    server.close()


def test_daemon_hung(tmp_path: Path, hung_daemon: Path, reference: str) -> None:
    job = _run(tmp_path, hung_daemon, "hung")
    assert job.popen.wait(120) == 0, job.log()
    assert _checksum(job.log()) == reference


def test_daemon_killed_and_restarted_mid_run(tmp_path: Path, reference: str) -> None:
    daemon = start_daemon(tmp_path / "d")
    job = _run(tmp_path, daemon.socket_path, "restarts", STEPS="600", SLEEP="0.01")
    try:
        wait_for(lambda: 'job_name="restarts"' in daemon.scrape(), 60, "the job to report")
        daemon.stop(signal.SIGKILL)
        restarted = start_daemon(tmp_path / "d")
        try:
            wait_for(lambda: 'job_name="restarts"' in restarted.scrape(), 60, "a reconnect")
        finally:
            restarted.stop(signal.SIGTERM)
        assert job.popen.wait(120) == 0, job.log()
        assert _checksum(job.log()) == reference
    finally:
        job.stop(signal.SIGKILL)


def test_agent_memory_stays_bounded_without_daemon(tmp_path: Path) -> None:
    """Thousands of reports and compiles with nobody listening: the agent's queues are capped."""
    script = r"""
import resource, jax, jax.numpy as jnp, xmon
agent = xmon.attach()  # already attached by `xmon run --period 0.01`
for i in range(300):
    jax.jit(lambda x, i=i: x + i)(jnp.ones(3))  # 300 programs and compile events
import time; time.sleep(2)  # ~200 reports offered to nobody
t = agent.transport
print("QUEUE", t._queue.qsize(), "DROPPED", t.counters.reports_dropped,
      "PROGRAMS", len(agent.compiles.programs()), flush=True)
"""
    job = start_job(tmp_path, tmp_path / "none.sock", script, "bounded", period=0.01)
    assert job.popen.wait(120) == 0, job.log()
    line = next(x for x in job.log().splitlines() if x.startswith("QUEUE"))
    _, queued, _, dropped, _, programs = line.split()
    assert int(queued) == 0 and int(dropped) > 50 and 300 <= int(programs) <= 4096


# A job that forks: a multiprocessing pool with the fork start method, then os.fork() children
# that exit through sys.exit (atexit handlers run) and raise in a thread (excepthooks run).
# Children do no jax work (jax is not fork-safe, with or without xmon).
FORKING_JOB = r"""
import multiprocessing as mp, os, sys, threading, time
import jax, jax.numpy as jnp
from jax._src import compiler
import xmon
w = jax.jit(lambda w: w * 2)(jnp.ones(4)).block_until_ready()
time.sleep(float(os.environ.get("SETTLE", "0")))  # let the agent connect and sample
def square(i):
    return i * i
mp.set_start_method("fork", force=True)
with mp.Pool(2) as pool:
    print("POOL", pool.map(square, range(6)), flush=True)
for how in ("exit", "raise"):
    pid = os.fork()
    if pid == 0:
        wrapped = hasattr(compiler.compile_or_get_cached, "__wrapped__")
        print(f"CHILD attached={xmon.is_attached()} hooked={wrapped}", flush=True)
        if how == "raise":
            t = threading.Thread(target=lambda: 1 / 0); t.start(); t.join()
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(f"STATUS {how} {status}", flush=True)
print("DONE", float(w.sum()), flush=True)
"""


def _forking_run(tmp_path: Path, socket_path: Path, name: str, attach: bool) -> tuple[int, str]:
    import subprocess
    import sys

    from support.procs import base_env

    script = tmp_path / f"{name}.py"
    script.write_text(FORKING_JOB)
    env = base_env(XMON_SOCKET=str(socket_path), JAX_PLATFORMS="cpu", SETTLE="3",
                   XMON_LEDGER_FIRST_DELAY="0.5", XMON_LEDGER_INTERVAL="1.5",
                   XMON_LEDGER_DURATION="1")  # fmt: skip
    command = [sys.executable, str(script)]
    if attach:
        command = [sys.executable, "-m", "xmon", "run", "--job-name", name, "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    return done.returncode, done.stdout


def test_a_forking_job_exits_as_it_does_without_the_agent(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    try:
        rc_without, out_without = _forking_run(tmp_path, daemon.socket_path, "plain", False)
        rc_with, out_with = _forking_run(tmp_path, daemon.socket_path, "forking", True)
    finally:
        daemon.stop()

    def lines(out: str) -> list[str]:
        return [line for line in out.splitlines() if not line.startswith(("CHILD", "STATUS"))]

    def statuses(out: str) -> dict[str, int]:
        return {w[1]: int(w[2]) for line in out.splitlines() if (w := line.split())[0] == "STATUS"}

    assert (rc_with, lines(out_with)) == (rc_without, lines(out_without)), (out_with, out_without)
    assert "DONE" in out_with
    # A child exits as it does without the agent, or cleanly: jax itself is not fork-safe, and
    # its forked children died on exit (SIGSEGV) without xmon in every run here
    without = statuses(out_without)
    assert set(statuses(out_with)) == set(without) == {"exit", "raise"}, out_with
    assert all(status in (0, without[how]) for how, status in statuses(out_with).items())
    # the child is not the attached job: no agent, no hook of xmon's left in its jax
    assert out_with.count("CHILD attached=False hooked=False") == 2, out_with
    assert "agent attached: job 'forking'" in daemon.log()
    assert daemon.log().count("agent attached") == 1, daemon.log()


def test_a_job_ending_in_the_middle_of_a_capture_exits_cleanly(tmp_path: Path) -> None:
    """The job stops (its stop file, then a normal exit) two seconds into a ten-second trace:
    it exits 0 as it would without xmon, and the capture says the agent went away."""
    import subprocess
    import sys
    import time

    from support.procs import base_env
    from support.profiling_procs import profiling_daemon, run_stepping_job

    daemon = profiling_daemon(tmp_path / "daemon")
    try:
        job = run_stepping_job(tmp_path, daemon, "midcapture")
        env = base_env(XMON_SOCKET=str(daemon.socket_path))
        capture = subprocess.Popen(
            [sys.executable, "-m", "xmon", "capture", "--job", "midcapture", "--duration", "10s"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        time.sleep(2.0)
        log = job.stop()  # asserts exit status 0
        output, _ = capture.communicate(timeout=60)
        assert "Fatal" not in log and "Aborted" not in log, log
        assert capture.returncode != 0 and "disconnected" in output, output
    finally:
        daemon.stop()

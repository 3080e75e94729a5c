"""Capture plumbing without processes: the daemon's command channel and job lookup, the CLI's
duration parsing, the agent's HLO store and its command runner (real jax, in this process)."""

from __future__ import annotations

import asyncio
import gzip
import queue
import shutil
from pathlib import Path
from typing import Any

import grpc
import pytest

from xmon.agent.commands import CommandRunner, trace_sessions, writable_dir
from xmon.agent.hlo_store import HloStore
from xmon.cli.capture import open_commands, parse_duration
from xmon.daemon.bounds import StateBudget
from xmon.daemon.capture_targets import (
    CaptureError,
    Target,
    agent_error,
    check_free_space,
    check_logdir,
    find_job,
    human_bytes,
)
from xmon.daemon.intake.convert import hello_of
from xmon.daemon.intake.links import (
    AgentGone,
    AgentLink,
    Answer,
    GetHlo,
    SampleLength,
    SaveMemoryProfile,
    StartTrace,
)
from xmon.daemon.jobs import JobState
from xmon.wire.proto import xmon_pb2

# --- daemon: command channel ----------------------------------------------------------------


def test_link_resolves_results_by_command_id_and_fails_waiters_on_close() -> None:
    async def scenario() -> None:
        link = AgentLink()
        _, first = link.send(GetHlo("a"))
        second_id, second = link.send(GetHlo("b"))
        sent = [link.outbox.get_nowait().command for _ in range(2)]
        assert [c.command_id for c in sent] == [1, 2] and second_id == 2
        assert [c.get_hlo.fingerprint for c in sent] == ["a", "b"]
        assert link.resolve(xmon_pb2.CommandResult(command_id=2, ok=True, paths=["p"]))
        assert await second == Answer(ok=True, paths=("p",)) and not first.done()
        assert not link.resolve(xmon_pb2.CommandResult(command_id=2)), "answered twice"
        assert not link.resolve(xmon_pb2.CommandResult(command_id=99)), "unknown id"
        link.close("the job's agent disconnected")
        with pytest.raises(AgentGone, match="disconnected"):
            await first
        with pytest.raises(AgentGone):
            link.send(GetHlo("c"))

    asyncio.run(scenario())


def test_commands_go_on_the_wire_as_daemon_commands() -> None:
    async def scenario() -> list[xmon_pb2.DaemonCommand]:
        link = AgentLink()
        link.send(StartTrace(duration_ms=2000, log_dir="/tb/run", annotation_json="{}"))
        link.send(SaveMemoryProfile(path="/tb/run/memory/a.prof", annotation_json="{}"))
        assert link.tell(SampleLength(seconds=3.0, max_seconds=0.5))
        return [link.outbox.get_nowait().command for _ in range(3)]

    trace, memory, length = asyncio.run(scenario())
    assert trace == xmon_pb2.DaemonCommand(
        command_id=1,
        start_trace=xmon_pb2.StartTrace(duration_ms=2000, log_dir="/tb/run", annotation_json="{}"),
    )
    assert memory.command_id == 2 and memory.save_memory_profile.path == "/tb/run/memory/a.prof"
    assert length == xmon_pb2.DaemonCommand(
        sample_length=xmon_pb2.SampleLength(seconds=3.0, max_seconds=0.5)
    )  # a setting: no result is awaited


# --- daemon: which job ----------------------------------------------------------------------


def target(name: str, pid: int) -> Target:
    hello = xmon_pb2.AgentHello(job_name=name, pid=pid, hostname="h")
    return Target(JobState(hello=hello_of(hello, StateBudget()), connected_at=0.0), AgentLink())


TARGETS = [target("train", 10), target("eval", 11), target("eval", 12)]


def refused(job_name: str | None, pid: int | None, targets: list[Target] = TARGETS) -> CaptureError:
    with pytest.raises(CaptureError) as caught:
        find_job(targets, job_name, pid)
    return caught.value


def test_find_job_by_pid_name_or_the_only_one() -> None:
    assert find_job(TARGETS, None, 11).pid == 11
    assert find_job(TARGETS, "eval", 12).pid == 12
    assert find_job(TARGETS, "train", None).pid == 10
    assert find_job(TARGETS[:1], None, None).pid == 10


@pytest.mark.parametrize(
    ("name", "pid", "code", "message"),
    [
        ("nope", None, "NOT_FOUND",
         "no job named 'nope'; attached: train (pid 10), eval (pid 11), eval (pid 12)"),
        (None, 99, "NOT_FOUND", "no job with pid 99; attached: train (pid 10), eval (pid 11), "
         "eval (pid 12)"),
        ("train", 11, "NOT_FOUND", "pid 11 is job 'eval', not 'train'"),
        ("eval", None, "FAILED_PRECONDITION",
         "2 jobs are named 'eval' (pids 11, 12): choose one with --pid"),
        (None, None, "FAILED_PRECONDITION", "3 jobs are attached, choose one with --job NAME or "
         "--pid PID; attached: train (pid 10), eval (pid 11), eval (pid 12)"),
    ],
)  # fmt: skip
def test_find_job_refusals(name: str | None, pid: int | None, code: str, message: str) -> None:
    error = refused(name, pid)
    assert (error.code.name, error.message) == (code, message)


def test_no_job_attached_says_how_to_attach_one() -> None:
    error = refused(None, None, [])
    assert error.code == grpc.StatusCode.NOT_FOUND
    assert "xmon run -- python train.py" in error.message


def test_logdir_and_free_space_checks(tmp_path: Path) -> None:
    assert check_logdir("", tmp_path) == tmp_path
    assert check_logdir(str(tmp_path / "new"), Path("/x")) == tmp_path / "new"
    with pytest.raises(CaptureError, match="logdir must be an absolute path: rel"):
        check_logdir("rel", tmp_path)
    check_free_space(tmp_path / "a" / "b", 1)  # ancestors are looked up
    huge = 2**62
    with pytest.raises(CaptureError, match=rf"^disk full: only .* free on {tmp_path}, a capture"):
        check_free_space(tmp_path / "a", huge)
    assert human_bytes(512) == "512 B" and human_bytes(8192) == "8.0 KiB"


def test_agent_errors_map_to_statuses() -> None:
    t = target("train", 10)
    busy = agent_error(t, "busy", "busy: Profile has already been started.")
    assert (busy.code, busy.message) == (
        grpc.StatusCode.ABORTED, "busy: job 'train' (pid 10): Profile has already been started."
    )  # fmt: skip
    assert agent_error(t, "no_space", "x").code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert agent_error(t, "weird", "x").code == grpc.StatusCode.INTERNAL


# --- CLI --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("3s", 3.0), ("500ms", 0.5), ("1.5", 1.5), ("2m", 120.0), (" 4 s ", 4.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "3h", "-1s", "0ms", "1e3"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_open_commands() -> None:
    assert open_commands("trace", "/tb", ("/tb/r/x.xplane.pb",)) == [
        "xprof server --logdir /tb --port 8791", "tensorboard --logdir /tb",
    ]  # fmt: skip
    assert open_commands("memory", "/tb", ("/p.prof",))[0] == "pprof -http=localhost:8080 /p.prof"


# --- agent: HLO store -------------------------------------------------------------------------


class FakeModule:
    def __init__(self, text: str) -> None:
        self.text = text

    def to_string(self) -> str:
        return self.text


class FakeExecutable:
    """Stands in for jaxlib's LoadedExecutable: only hlo_modules() is used."""

    def __init__(self, *texts: str) -> None:
        self.modules = [FakeModule(t) for t in texts]

    def hlo_modules(self) -> list[FakeModule]:
        return self.modules


def test_hlo_store_renders_lazily_and_stays_bounded() -> None:
    store = HloStore(max_bytes=400, max_program_bytes=300, max_pending=2)
    store.offer("a", FakeExecutable("HloModule a", "HloModule a2"))
    assert gzip.decompress(store.get("a") or b"") == b"HloModule a\nHloModule a2"
    store.offer("b", FakeExecutable("HloModule b"))
    store.offer("c", FakeExecutable("HloModule c"))
    store.offer("d", FakeExecutable("HloModule d"))  # the pending queue holds 2: b is dropped
    assert store.dropped == 1 and store.drain() == 2
    assert store.get("b") is None and store.get("d") is not None
    import os

    noise = os.urandom(250).hex()  # incompressible
    store.offer("big", FakeExecutable(noise * 4))
    store.drain()
    assert store.get("big") is None and "big" in store.too_large
    for name in "efghij":
        store.offer(name, FakeExecutable(f"HloModule {name} " + os.urandom(40).hex()))
        store.drain()
    assert store.size_bytes <= 400 and store.get("a") is None, "oldest evicted first"
    assert store.get("j") is not None


# --- agent: command runner with real jax -------------------------------------------------------


def run(runner_replies: queue.Queue[Any], runner: CommandRunner, command: Any) -> Any:
    runner.submit(command)
    return runner_replies.get(timeout=60)


def test_runner_traces_then_refuses_a_second_concurrent_trace(tmp_path: Path) -> None:
    import jax.numpy as jnp

    replies: queue.Queue[Any] = queue.Queue()
    runner = CommandRunner(replies.put, HloStore())
    (jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready()
    trace = xmon_pb2.StartTrace(duration_ms=1500, log_dir=str(tmp_path / "run"),
                                annotation_json='{"why": "test"}')  # fmt: skip
    runner.submit(xmon_pb2.DaemonCommand(command_id=1, start_trace=trace))
    busy = run(replies, runner, xmon_pb2.DaemonCommand(command_id=2, start_trace=trace))
    assert (busy.command_id, busy.ok, busy.error_code) == (2, False, "busy")
    hlo = run(replies, runner, xmon_pb2.DaemonCommand(command_id=3, get_hlo=xmon_pb2.GetHlo(
        fingerprint="unknown")))  # fmt: skip
    assert (hlo.command_id, hlo.error_code) == (3, "not_found"), "HLO requests are not blocked"
    done = replies.get(timeout=60)
    assert done.ok and done.command_id == 1, done.message
    [session] = trace_sessions(tmp_path / "run")
    assert [Path(p).parent for p in done.paths] == [session]
    assert (session / "xmon_capture.json").read_text() == '{"why": "test"}'


def test_runner_reports_unwritable_dirs_and_bad_durations(tmp_path: Path) -> None:
    replies: queue.Queue[Any] = queue.Queue()
    runner = CommandRunner(replies.put)
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad_dir = xmon_pb2.StartTrace(duration_ms=10, log_dir=str(blocker / "run"))
    result = run(replies, runner, xmon_pb2.DaemonCommand(start_trace=bad_dir))
    assert result.error_code == "not_writable" and "Not a directory" in result.message
    assert writable_dir(blocker) is not None and writable_dir(tmp_path) is None
    long = xmon_pb2.StartTrace(duration_ms=10**9, log_dir=str(tmp_path))
    assert run(replies, runner, xmon_pb2.DaemonCommand(start_trace=long)).error_code == "invalid"
    memory = xmon_pb2.SaveMemoryProfile(path=str(blocker / "m.prof"))
    result = run(replies, runner, xmon_pb2.DaemonCommand(save_memory_profile=memory))
    assert result.error_code == "not_writable"
    shutil.rmtree(tmp_path, ignore_errors=True)

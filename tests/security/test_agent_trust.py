"""The agent talks only to a daemon it can trust, sends no secrets from argv, and writes only
new files that are not links, whatever a daemon (or whoever listens on its path) asks."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from attack import Attacker

from xmon.agent.commands import CommandRunner
from xmon.agent.redact import redact_argv
from xmon.agent.transport import Transport
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

ARGV = ["train.py", "--api-token=SECRET-123", "--lr", "0.1"]


class RogueIngest(xmon_pb2_grpc.IngestServicer):
    """A listener that keeps every hello and asks each job to write a memory profile."""

    def __init__(self, target: Path) -> None:
        self.hellos: list[xmon_pb2.AgentHello] = []
        self.target = target

    def Connect(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        first = next(request_iterator)
        self.hellos.append(first.hello)
        yield xmon_pb2.DaemonMessage(welcome=xmon_pb2.Welcome(protocol_version=1))
        save = xmon_pb2.SaveMemoryProfile(path=str(self.target))
        yield xmon_pb2.DaemonMessage(command=xmon_pb2.DaemonCommand(save_memory_profile=save))
        threading.Event().wait(3)


@pytest.fixture
def rogue(shared_tmp: Path, attacker: Attacker) -> Iterator[tuple[Path, RogueIngest]]:
    """The attacker pre-created the job's runtime directory (mode 0777) and listens in it."""
    directory = shared_tmp / f"xmon-{os.getuid()}"
    directory.mkdir()
    os.chmod(directory, 0o777)
    attacker.own(directory)
    listener = RogueIngest(shared_tmp / "canary.txt")
    server = grpc.server(futures.ThreadPoolExecutor(4))
    xmon_pb2_grpc.add_IngestServicer_to_server(listener, server)
    socket_path = directory / "xmon.sock"
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    attacker.own(socket_path)
    yield socket_path, listener
    server.stop(None)


def test_the_agent_refuses_a_socket_another_user_controls(
    rogue: tuple[Path, RogueIngest], shared_tmp: Path
) -> None:
    socket_path, listener = rogue
    canary = shared_tmp / "canary.txt"
    canary.write_text("mine")
    commands: list[Any] = []

    def hello() -> xmon_pb2.AgentMessage:
        argv = redact_argv(ARGV, {})
        return xmon_pb2.AgentMessage(hello=xmon_pb2.AgentHello(protocol_version=1, argv=argv))

    transport = Transport(f"unix://{socket_path}", hello, commands.append, backoff=(0.05, 0.1))
    transport.start()
    try:
        threading.Event().wait(2)
    finally:
        transport.stop()
    assert listener.hellos == [] and commands == []
    assert "untrusted socket" in transport.counters.last_error
    assert f"belongs to uid {os.stat(socket_path).st_uid}" in transport.counters.last_error
    assert canary.read_text() == "mine"


def test_socket_problem_names_the_directory_another_user_owns(
    shared_tmp: Path, attacker: Attacker
) -> None:
    directory = shared_tmp / "runtime"
    directory.mkdir(mode=0o755)
    attacker.own(directory)
    assert "belongs to uid" in (paths.directory_problem(directory, {0}) or "")
    os.chown(directory, 0, 0)
    os.chmod(directory, 0o777)
    assert "writable by every user" in (paths.directory_problem(directory, {0}) or "")
    os.chmod(directory, 0o755)
    assert paths.directory_problem(directory, {0}) is None


def test_argv_secrets_are_redacted_unless_the_user_opts_in() -> None:
    argv = ["train.py", "--api-token=SECRET-123", "--password", "hunter2", "DB_SECRET=s3",
            "model.api_key=k", "--db", "postgres://me:pw@db/x", "--lr", "0.1"]  # fmt: skip
    assert redact_argv(argv, {}) == [
        "train.py", "--api-token=<redacted>", "--password", "<redacted>", "DB_SECRET=<redacted>",
        "model.api_key=<redacted>", "--db", "postgres://me:<redacted>@db/x", "--lr", "0.1",
    ]  # fmt: skip
    assert redact_argv(argv, {"XMON_SEND_SECRETS": "1"}) == argv


def _run(runner: CommandRunner, replies: queue.Queue[Any], path: Path) -> Any:
    save = xmon_pb2.SaveMemoryProfile(path=str(path), annotation_json="{}")
    runner.submit(xmon_pb2.DaemonCommand(save_memory_profile=save))
    return replies.get(timeout=60)


def test_memory_profiles_never_overwrite_or_follow_links(tmp_path: Path) -> None:
    replies: queue.Queue[Any] = queue.Queue()
    runner = CommandRunner(replies.put)
    canary = tmp_path / "canary.prof"
    canary.write_text("mine")
    assert not _run(runner, replies, canary).ok and canary.read_text() == "mine"
    link = tmp_path / "memory" / "x.prof"
    link.parent.mkdir()
    link.symlink_to(canary)
    assert not _run(runner, replies, link).ok and canary.read_text() == "mine"
    assert not _run(runner, replies, tmp_path / "notes.txt").ok
    assert not (tmp_path / "notes.txt").exists()
    fresh = _run(runner, replies, tmp_path / "memory" / "new.prof")
    assert fresh.ok and (tmp_path / "memory" / "new.prof").stat().st_size > 0

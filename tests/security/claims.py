"""Clients that claim a pid in their hello, each in a process of its own (any user's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from procs import REPO, base_env

# argv: uid:gid to become ("" to stay), socket, job name, then the pids to claim one after the
# other ("self": its own pid). Prints one line per claim: the pid and OK (welcomed) or the
# refusal's status code and reason. The last claim's stream stays open until stdin closes, so
# the daemon keeps its job. The interpreter may live where another user cannot read (a root
# venv): the claimant loads it as root, then becomes that user before it connects.
CLAIMS = """
import os, sys, threading, grpc
from xmon.proto import xmon_pb2, xmon_pb2_grpc
become, socket_path, name, *pids = sys.argv[1:]
if become:
    uid, gid = map(int, become.split(":"))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
done = threading.Event()
channel = grpc.insecure_channel("unix://" + socket_path)
stub = xmon_pb2_grpc.IngestStub(channel)
calls = []
for index, text in enumerate(pids):
    pid = os.getpid() if text == "self" else int(text)
    hello = xmon_pb2.AgentHello(protocol_version=1, pid=pid, job_name=name)
    def frames(hello=hello, last=index == len(pids) - 1):
        yield xmon_pb2.AgentMessage(hello=hello)
        if last:
            done.wait()
    call = stub.Connect(frames(), timeout=60)
    calls.append(call)
    try:
        next(call)
        print(pid, "OK", flush=True)
    except grpc.RpcError as exc:
        print(pid, exc.code().name, exc.details(), flush=True)
if os.environ.get("XMON_TEST_ORPHAN"):
    # The claimant's process exits at once; a child given its sockets keeps the connection,
    # so the stream lives on (a fork would run gRPC's fork handlers, which shut it down).
    import subprocess
    sockets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                sockets.append(int(fd))
        except OSError:
            pass  # the directory's own descriptor, closed by now
    child = subprocess.Popen(["sleep", "120"], pass_fds=sockets, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(child.pid, "child", flush=True)
    os._exit(0)
sys.stdin.read()
done.set()
"""


class Claimant:
    """A process that claims ``pids`` on the daemon's socket and holds its last stream."""

    def __init__(self, socket_path: Path, name: str, *pids: str, user: int | None = None,
                 group: int | None = None, prefix: tuple[str, ...] = (),
                 orphan: bool = False) -> None:  # fmt: skip
        """``prefix``: a command to run the claimant under (e.g. ``unshare`` into a new pid
        namespace, as a container would). ``orphan``: after its claims the claimant exits,
        leaving a forked child that holds its connection (its pid: ``self.child``)."""
        become = f"{user}:{group if group is not None else user}" if user is not None else ""
        self.popen = subprocess.Popen(
            [*prefix, sys.executable, "-c", CLAIMS, become, str(socket_path), name, *pids],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO, env=base_env(**({"XMON_TEST_ORPHAN": "1"} if orphan else {})),
        )  # fmt: skip
        self.pid = self.popen.pid
        assert self.popen.stdout is not None
        self.answers = [self.popen.stdout.readline().strip().split(maxsplit=2) for _ in pids]
        self.child = int(self.popen.stdout.readline().split()[0]) if orphan else None

    def codes(self) -> list[str]:
        """Each claim's answer: "OK" or the refusal's status code name."""
        return [answer[1] if len(answer) > 1 else "no answer" for answer in self.answers]

    def close(self) -> str:
        """End the claimant; its stderr (empty unless it failed)."""
        _, err = self.popen.communicate(timeout=30)
        return err

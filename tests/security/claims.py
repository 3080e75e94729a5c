"""Clients that claim a pid in their hello, each in a process of its own (any user's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.procs import REPO, base_env

# argv: uid:gid to become ("" to stay), socket, job name, then the pids to claim one after the
# other ("self": its own pid). Prints one line per claim: the pid and OK (welcomed) or the
# refusal's status code and reason. The last claim's stream stays open until stdin closes, so
# the daemon keeps its job. The interpreter may live where another user cannot read (a root
# venv): the claimant loads it as root, then becomes that user before it connects.
# XMON_TEST_PROOF says how it answers the daemon's request for proof (xmon.daemon.proof):
# "honest" names its thread with the token as the agent does, "lie" answers with the token
# without naming a thread, "none" offers no proof (an older agent). XMON_TEST_HOLD: it connects,
# prints "connected" and waits for a line on stdin before its claims.
CLAIMS = """
import os, queue, sys, threading, grpc
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
become, socket_path, name, *pids = sys.argv[1:]
proof = os.environ.get("XMON_TEST_PROOF", "honest")
if become:
    uid, gid = map(int, become.split(":"))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
done = threading.Event()
channel = grpc.insecure_channel("unix://" + socket_path)
if os.environ.get("XMON_TEST_HOLD"):
    grpc.channel_ready_future(channel).result(timeout=30)
    print("connected", flush=True)
    sys.stdin.readline()
stub = xmon_pb2_grpc.IngestStub(channel)
calls = []
for index, text in enumerate(pids):
    pid = os.getpid() if text == "self" else int(text)
    hello = xmon_pb2.AgentHello(protocol_version=1, pid=pid, job_name=name,
                                proves_process=proof != "none")
    answers = queue.Queue()
    def frames(hello=hello, last=index == len(pids) - 1, answers=answers):
        yield xmon_pb2.AgentMessage(hello=hello)
        yield answers.get()
        if last:
            done.wait()
    call = stub.Connect(frames(), timeout=60)
    calls.append(call)
    try:
        first = next(call)
        if first.WhichOneof("kind") == "prove":
            token = first.prove.token
            if proof == "honest":
                with open("/proc/thread-self/comm", "w") as comm:
                    comm.write(token)
            answers.put(xmon_pb2.AgentMessage(shown=xmon_pb2.ProcessShown(token=token)))
            next(call)
        else:
            answers.put(xmon_pb2.AgentMessage(shown=xmon_pb2.ProcessShown()))
        print(pid, "OK", flush=True)
    except grpc.RpcError as exc:
        answers.put(xmon_pb2.AgentMessage(shown=xmon_pb2.ProcessShown()))
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
                 orphan: bool = False, proof: str = "honest",
                 hold: bool = False) -> None:  # fmt: skip
        """``prefix``: a command to run the claimant under (e.g. ``unshare`` into a new pid
        namespace, as a container would). ``orphan``: after its claims the claimant exits,
        leaving a forked child that holds its connection (its pid: ``self.child``). ``proof``:
        "honest", "lie" or "none" (see CLAIMS). ``hold``: it connects and claims only once
        :meth:`claim` is called."""
        become = f"{user}:{group if group is not None else user}" if user is not None else ""
        env = {"XMON_TEST_PROOF": proof, **({"XMON_TEST_ORPHAN": "1"} if orphan else {}),
               **({"XMON_TEST_HOLD": "1"} if hold else {})}  # fmt: skip
        self.popen = subprocess.Popen(
            [*prefix, sys.executable, "-c", CLAIMS, become, str(socket_path), name, *pids],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO, env=base_env(**env),
        )  # fmt: skip
        self.pid = self.popen.pid
        self._claims = len(pids)
        self._orphan = orphan
        self._held = hold
        assert self.popen.stdout is not None
        self.answers: list[list[str]] = []
        self.child: int | None = None
        if hold:
            assert self.popen.stdout.readline().strip() == "connected"
        else:
            self.claim()

    def claim(self) -> None:
        """Make the claims (at once, unless held) and read their answers."""
        assert self.popen.stdin is not None and self.popen.stdout is not None
        if self._held:
            self._held = False
            self.popen.stdin.write("go\n")
            self.popen.stdin.flush()
        self.answers = [self.popen.stdout.readline().strip().split(maxsplit=2)
                        for _ in range(self._claims)]  # fmt: skip
        if self._orphan:
            self.child = int(self.popen.stdout.readline().split()[0])

    def codes(self) -> list[str]:
        """Each claim's answer: "OK" or the refusal's status code name."""
        return [answer[1] if len(answer) > 1 else "no answer" for answer in self.answers]

    def close(self) -> str:
        """End the claimant; its stderr (empty unless it failed)."""
        _, err = self.popen.communicate(timeout=30)
        return err

"""Binding a pid claim to the stream that made it.

The connection check (:mod:`xmon.daemon.peers`) shows that the claimed process holds *a*
connection to the daemon's socket; gRPC does not say which connection a stream came over. So a
claim of a process that has connected but not yet sent its hello (a job between the two, a view
such as ``xmon top``) passed that check from any stream.

The daemon therefore asks the stream itself for proof before its welcome (``ProveProcess``): a
random token that the agent must show where only the claimed process can put it and anyone can
read it, the name of one of its own threads. The kernel lets a thread's name
(``/proc/<pid>/task/<tid>/comm``) be set by that process alone (``prctl(PR_SET_NAME)`` or a
write to its own ``/proc/thread-self/comm``; another process, root included, gets ``EINVAL``),
and lists it world-readable, so a daemon running as ``xmon`` reads it as root does. An impostor
receives the token on its own stream but cannot name a thread of the victim; the victim's agent
names its thread only for a token that came on its own stream.
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from pathlib import Path

TOKEN_PREFIX = "xm"
TOKEN_CHARS = 15  # a thread name holds 15 bytes (TASK_COMM_LEN 16, with the NUL)
PROOF_SECONDS = 2.0  # for the agent's answer; its thread is named in microseconds
MAX_TASKS = 16384  # threads of the claimed process looked at, at most
READ_SECONDS = 0.5


def new_token() -> str:
    """15 characters: a prefix, then 13 of base32 (65 random bits)."""
    random = base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()
    return (TOKEN_PREFIX + random)[:TOKEN_CHARS]


def shows_token(pid: int, token: str, proc: Path = Path("/proc")) -> bool | None:
    """Whether a thread of process ``pid`` (in the daemon's pid namespace) is named ``token``;
    None when its threads cannot be read (no such process, ``/proc`` mounted with
    ``hidepid``, past the time bound)."""
    deadline = time.monotonic() + READ_SECONDS
    tasks = proc / str(pid) / "task"
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    wanted = token.encode()
    readable = False
    for name in names[:MAX_TASKS]:
        if time.monotonic() > deadline:
            return None
        try:
            with open(tasks / name / "comm", "rb") as comm:
                shown = comm.read(64).rstrip(b"\n")
        except OSError:
            continue  # the thread ended meanwhile
        readable = True
        if shown == wanted:
            return True
    return False if readable else None

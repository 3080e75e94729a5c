"""Which process of which multi-process job the agent lives in.

Every process of one ``jax.distributed`` job must report the same job key without talking to
the others. What they all share is what ``jax.distributed.initialize`` was given (or found:
on TPU VMs and under SLURM or Kubernetes it detects the coordinator itself): the coordinator's
address and the number of processes. The key is that pair, readable, so a user can find it
again in a query; a job rerun on the same coordinator is the same job, as a Kubernetes job's
name is. ``XMON_JOB_KEY`` (or ``attach(job_key=...)``) overrides it, e.g. with a run id.

A process that is not part of a distributed job gets a key of its own
(``host/job_name/pid``), so every job has one and a fleet of one is never judged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_KEY_CHARS = 128
# Where platforms name the worker a process runs on (TPU VMs; the Kubernetes JobSet and
# indexed-Job conventions), in order of preference; else the host name.
_WORKER_VARIABLES = ("TPU_WORKER_ID", "JOB_COMPLETION_INDEX", "CLOUD_TPU_TASK_ID")


@dataclass(frozen=True)
class ProcessIdentity:
    job_key: str
    job_key_declared: bool
    distributed: bool
    process_index: int
    process_count: int
    slice_index: int | None
    worker: str


def identify(
    job_name: str,
    devices: Sequence[Any],
    env: Mapping[str, str],
    declared_key: str | None = None,
    coordinator: tuple[str, int] | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> ProcessIdentity:
    """The identity of this process; ``devices`` are its local jax devices."""
    declared = declared_key or env.get("XMON_JOB_KEY", "")
    hostname = socket.gethostname()
    if declared:
        key = declared
    elif coordinator is not None:
        address, count = coordinator
        key = f"{address}/{count}"
    else:
        key = f"{hostname}/{job_name}/{os.getpid()}"
    slices: set[int] = {
        int(index) for d in devices if (index := getattr(d, "slice_index", None)) is not None
    }
    worker = next((env[name] for name in _WORKER_VARIABLES if env.get(name)), hostname)
    return ProcessIdentity(
        job_key=_printable(key)[:MAX_KEY_CHARS],
        job_key_declared=bool(declared),
        distributed=coordinator is not None,
        process_index=process_index,
        process_count=max(1, process_count),
        slice_index=next(iter(slices)) if len(slices) == 1 else None,
        worker=_printable(worker)[:MAX_KEY_CHARS],
    )


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)

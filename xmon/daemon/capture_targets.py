"""Which attached job a capture or HLO request means, and the checks before asking it.

Every refusal is a :class:`CaptureError` carrying the gRPC status the caller gets and a message
written for the person at the shell.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import grpc

from xmon.daemon.intake.links import AgentLink
from xmon.daemon.jobs import JobState
from xmon.daemon.received import clean_label

Code = grpc.StatusCode


class CaptureError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    """An attached job and the command channel to its agent."""

    state: JobState
    link: AgentLink

    @property
    def pid(self) -> int:
        return self.state.pid

    @property
    def job_name(self) -> str:
        return self.state.job_name

    def describe(self) -> str:
        return f"job {self.job_name!r} (pid {self.pid})"


def attached(jobs: dict[int, JobState], links: dict[int, AgentLink]) -> list[Target]:
    return [
        Target(state, links[stream_id])
        for stream_id, state in sorted(jobs.items(), key=lambda item: item[1].pid)
        if stream_id in links
    ]


def _listing(targets: list[Target]) -> str:
    if not targets:
        return "no job is attached to the daemon (start one with: xmon run -- python train.py)"
    return "attached: " + ", ".join(f"{t.job_name} (pid {t.pid})" for t in targets)


def find_job(targets: list[Target], job_name: str | None, pid: int | None) -> Target:
    """The job named by pid (and name, if both are given), by name, or the only one attached."""
    name = clean_label(job_name) if job_name else None
    if pid:
        matches = [t for t in targets if t.pid == pid]
        if not matches:
            raise CaptureError(Code.NOT_FOUND, f"no job with pid {pid}; {_listing(targets)}")
        if name is not None and matches[0].job_name != name:
            raise CaptureError(
                Code.NOT_FOUND, f"pid {pid} is job {matches[0].job_name!r}, not {name!r}"
            )
        return matches[0]
    if name is not None:
        matches = [t for t in targets if t.job_name == name]
        if not matches:
            raise CaptureError(Code.NOT_FOUND, f"no job named {name!r}; {_listing(targets)}")
        if len(matches) > 1:
            pids = ", ".join(str(t.pid) for t in matches)
            raise CaptureError(
                Code.FAILED_PRECONDITION,
                f"{len(matches)} jobs are named {name!r} (pids {pids}): choose one with --pid",
            )
        return matches[0]
    if len(targets) == 1:
        return targets[0]
    if not targets:
        raise CaptureError(Code.NOT_FOUND, _listing(targets))
    raise CaptureError(
        Code.FAILED_PRECONDITION,
        f"{len(targets)} jobs are attached, choose one with --job NAME or --pid PID; "
        + _listing(targets),
    )


def check_logdir(log_dir: str, default: Path) -> Path:
    """The logdir to capture into: the daemon's own, or an absolute directory path."""
    if not log_dir:
        return default
    path = Path(log_dir)
    if not path.is_absolute():
        raise CaptureError(Code.INVALID_ARGUMENT, f"logdir must be an absolute path: {log_dir}")
    if path.exists() and not path.is_dir():
        raise CaptureError(Code.FAILED_PRECONDITION, f"logdir {path} is not a directory")
    return path


def existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_free_space(path: Path, min_free: int) -> None:
    """Refuse before asking the job when the filesystem is (nearly) full."""
    if min_free <= 0:
        return
    where = existing_ancestor(path)
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return  # cannot tell: let the job try and report
    if free < min_free:
        raise CaptureError(
            Code.RESOURCE_EXHAUSTED,
            f"disk full: only {human_bytes(free)} free on {where}, a capture needs at least "
            f"{human_bytes(min_free)} ([profiling] capture_min_free_bytes)",
        )


def human_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


# Agent error codes (CommandResult.error_code) -> the status the caller gets, and a lead-in.
AGENT_ERRORS: dict[str, tuple[grpc.StatusCode, str]] = {
    "busy": (Code.ABORTED, "busy"),
    "not_writable": (Code.FAILED_PRECONDITION, "logdir not writable"),
    "no_space": (Code.RESOURCE_EXHAUSTED, "disk full"),
    "invalid": (Code.INVALID_ARGUMENT, "invalid request"),
    "not_found": (Code.NOT_FOUND, "not found"),
}


def agent_error(target: Target, error_code: str, message: str) -> CaptureError:
    code, lead = AGENT_ERRORS.get(error_code, (Code.INTERNAL, "failed"))
    message = message.removeprefix("busy: ")
    return CaptureError(code, f"{lead}: {target.describe()}: {message}")

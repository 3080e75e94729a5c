"""An agent's out-of-memory report, kept in the job's run directory.

::

    <logdir>/<job>-<pid>/oom/<YYYY_MM_DD_HH_MM_SS>_<host>.json   the report: error, largest
        arrays, program memory analysis, allocator stats
    <logdir>/<job>-<pid>/oom/<YYYY_MM_DD_HH_MM_SS>_<host>.prof   jax.profiler's device memory
        profile (gzip'd pprof), when the agent could take one

The run directory may belong to the job's user and the daemon may be root, so, as for
TensorBoard's files (exporters.tb_logdir), the directories are reached without following links
and each file is created new (``O_EXCL | O_NOFOLLOW``), never written through an existing one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from xmon.daemon.received import OomReport
from xmon.exporters import tb_logdir
from xmon.findings.oom import OomEvent

log = logging.getLogger("xmon.daemon")

DIRECTORY = "oom"
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SAME_SECOND = 16  # reports in one second get -1, -2, ... suffixes


def save(logdir: Path, job_name: str, pid: int, host: str, report: OomReport) -> tuple[str, ...]:
    """Write the report (and its profile); the paths written. Raises OSError."""
    run_fd = tb_logdir.open_run_dir(logdir, tb_logdir.run_name(job_name, pid))
    try:
        try:
            os.mkdir(DIRECTORY, 0o755, dir_fd=run_fd)
        except FileExistsError:
            pass
        oom_fd = tb_logdir.open_below(run_fd, (DIRECTORY,))
    finally:
        os.close(run_fd)
    try:
        when = report.event.wall_time or time.time()
        stem = tb_logdir.memory_profile_path(Path(), when, host).stem
        record = {"job_name": job_name, "pid": pid, **report.record}
        body = json.dumps(record, indent=1).encode()
        files = [(".json", body)]
        if report.memory_profile:
            files.append((".prof", report.memory_profile))
        names = _write_new(oom_fd, stem, files)
    finally:
        os.close(oom_fd)
    directory = tb_logdir.run_dir(logdir, job_name, pid) / DIRECTORY
    return tuple(str(directory / name) for name in names)


def _write_new(dir_fd: int, stem: str, files: list[tuple[str, bytes]]) -> list[str]:
    """Each (suffix, data) under one free stem; a stem taken by any file moves to the next."""
    for attempt in range(_SAME_SECOND):
        name = stem if attempt == 0 else f"{stem}-{attempt}"
        written: list[str] = []
        try:
            for suffix, data in files:
                _create(dir_fd, name + suffix, data)
                written.append(name + suffix)
            return written
        except FileExistsError:
            for done in written:
                os.unlink(done, dir_fd=dir_fd)
    raise FileExistsError(f"{stem}: {_SAME_SECOND} reports in one second")


def _create(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(name, _NEW_FILE, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(name, dir_fd=dir_fd)
        raise


class OomSink:
    """Takes the agents' reports on the daemon's loop: files first, then the finding."""

    def __init__(
        self,
        logdir: Callable[[], Path],
        note: Callable[[int, OomEvent], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logdir = logdir  # read at each report: a reload may move it
        self._note = note
        self._clock = clock

    def take(self, job_name: str, pid: int, host: str, report: OomReport) -> None:
        try:
            paths = save(self._logdir(), job_name, pid, host, report)
        except (OSError, ValueError) as exc:
            log.warning("job pid %d ran out of memory; its report was not saved: %s", pid, exc)
            paths = ()
        else:
            log.warning("job pid %d ran out of memory; report in %s", pid, paths[0])
        self._note(pid, dataclasses.replace(report.event, monotonic=self._clock(), paths=paths))

"""Captures from outside the job: the daemon asks the job's agent over its stream.

Path chosen: the agent calls ``jax.profiler.start_trace`` / ``stop_trace`` inside the job (with
the Python tracer off). That needs no profiler server in the job (``jax.profiler.start_server``
binds every interface without authentication, and remote capture needs the ``xprof`` client
library in the daemon), works on every backend, and the agent can answer "busy", report a full
disk and recover the profiler's state. Files are written by the job itself, as its own user,
into ``<logdir>/<job>-<pid>/plugins/profile/<timestamp>/`` — the job's TensorBoard run.

One capture per job at a time (a second one is answered ABORTED "busy"); the daemon checks
free space first and waits at most the capture's length plus a grace period for the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xmon import __version__
from xmon.config.profiling import ProfilingConfig
from xmon.daemon.capture_targets import (
    CaptureError,
    Code,
    Target,
    agent_error,
    attached,
    check_free_space,
    check_logdir,
    find_job,
)
from xmon.daemon.executions import ExecutionTracker
from xmon.daemon.hlo_requests import find_program
from xmon.daemon.intake.links import (
    AgentGone,
    Answer,
    Command,
    GetHlo,
    LinkBusy,
    SaveMemoryProfile,
    StartTrace,
)
from xmon.exporters import tb_logdir
from xmon.model import CaptureCount, Job

if TYPE_CHECKING:
    from xmon.daemon.hub import Hub

log = logging.getLogger("xmon.daemon")

ANSWER_GRACE_SECONDS = 30.0  # beyond the trace's own length, for the job to write it
HLO_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class CaptureSpec:
    job_name: str | None = None
    pid: int | None = None
    duration_seconds: float = 3.0
    log_dir: str = ""  # "" = the daemon's logdir
    memory: bool = False  # a device memory profile instead of a trace
    trigger: str = "manual"
    reason: str = "requested with xmon capture"

    @property
    def kind(self) -> str:
        return "memory" if self.memory else "trace"


@dataclass(frozen=True)
class CaptureOutcome:
    job_name: str
    pid: int
    kind: str
    log_dir: Path
    run_dir: Path
    paths: tuple[str, ...]
    message: str
    seconds: float


@dataclass(frozen=True)
class HloOutcome:
    job_name: str
    pid: int
    fingerprint: str
    program_name: str
    hlo_gzip: bytes


@dataclass
class _Running:
    spec: CaptureSpec
    started: float


class Profiler:
    def __init__(
        self,
        hub: Hub,
        config: ProfilingConfig,
        logdir: Path,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._hub = hub
        self.config = config
        self.logdir = logdir
        self._clock = clock
        self._wall = wall
        self._running: dict[int, _Running] = {}
        self._counts: dict[tuple[int, str, str], CaptureCount] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self.executions = ExecutionTracker(
            config.trace_count_max_bytes, wall, refused=hub.budget.refused
        )

    def busy_pids(self) -> set[int]:
        return set(self._running)

    def _targets(self) -> list[Target]:
        return attached(self._hub.jobs, self._hub.links)

    # -- captures ----------------------------------------------------------------------------
    async def capture(self, spec: CaptureSpec) -> CaptureOutcome:
        target = find_job(self._targets(), spec.job_name, spec.pid)
        if not spec.memory:
            self._check_duration(spec.duration_seconds)
        log_dir = check_logdir(spec.log_dir, self.logdir)
        run = tb_logdir.run_dir(log_dir, target.job_name, target.pid)
        running = self._running.get(target.pid)
        if running is not None:
            ago = self._clock() - running.started
            raise CaptureError(
                Code.ABORTED,
                f"busy: {target.describe()} is already capturing a {running.spec.kind} "
                f"({running.spec.trigger}, started {ago:.1f} s ago); try again when it ends",
            )
        check_free_space(run, self.config.capture_min_free_bytes)
        self._running[target.pid] = _Running(spec, self._clock())
        started = self._clock()
        try:
            result = await self._ask(target, self._command(spec, target, run), spec)
        except CaptureError as exc:
            self._count(target, spec, None, exc.message)
            raise
        finally:
            self._running.pop(target.pid, None)
        paths = tuple(result.paths)
        self._count(target, spec, paths, None)
        if not spec.memory and self.config.trace_count_max_bytes > 0:
            # Not awaited: the answer does not wait for the daemon to read the trace.
            window = result.traced_seconds or spec.duration_seconds
            self._background(self.executions.count(target.pid, paths, run, window))
        return CaptureOutcome(
            target.job_name, target.pid, spec.kind, log_dir, run, paths, result.message,
            self._clock() - started,
        )  # fmt: skip

    def _check_duration(self, seconds: float) -> None:
        low, high = self.config.capture_min_seconds, self.config.capture_max_seconds
        if not low <= seconds <= high:
            raise CaptureError(
                Code.INVALID_ARGUMENT,
                f"duration must be between {low:g} s and {high:g} s, got {seconds:g} s",
            )

    def _command(self, spec: CaptureSpec, target: Target, run: Path) -> Command:
        note = json.dumps(self._annotation(spec, target), indent=1)
        if spec.memory:
            path = tb_logdir.memory_profile_path(run, self._wall(), target.state.hello.hostname)
            return SaveMemoryProfile(path=str(path), annotation_json=note)
        return StartTrace(
            duration_ms=max(1, round(spec.duration_seconds * 1000)),
            log_dir=str(run),
            annotation_json=note,
        )

    def _annotation(self, spec: CaptureSpec, target: Target) -> dict[str, object]:
        now = self._wall()
        return {
            "job_name": target.job_name,
            "pid": target.pid,
            "kind": spec.kind,
            "trigger": spec.trigger,
            "reason": spec.reason,
            "requested_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "requested_at_unix": now,
            "duration_seconds": None if spec.memory else spec.duration_seconds,
            "xmon_version": __version__,
        }

    async def _ask(self, target: Target, command: Command, spec: CaptureSpec) -> Answer:
        timeout = (0 if spec.memory else spec.duration_seconds) + ANSWER_GRACE_SECONDS
        result = await self._send(target, command, timeout)
        if not result.ok:
            raise agent_error(target, result.error_code, result.message)
        if not result.paths:
            raise CaptureError(Code.INTERNAL, f"{target.describe()} wrote no file")
        return result

    async def _send(self, target: Target, command: Command, timeout: float) -> Answer:
        try:
            command_id, future = target.link.send(command)
        except (AgentGone, LinkBusy) as exc:
            raise CaptureError(Code.UNAVAILABLE, f"{target.describe()}: {exc}") from None
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            target.link.forget(command_id)
            raise CaptureError(
                Code.DEADLINE_EXCEEDED, f"{target.describe()} did not answer within {timeout:g} s"
            ) from None
        except AgentGone as exc:
            raise CaptureError(Code.UNAVAILABLE, f"{target.describe()}: {exc}") from None

    def _count(
        self, target: Target, spec: CaptureSpec, paths: tuple[str, ...] | None, error: str | None
    ) -> None:
        key = (target.pid, spec.kind, spec.trigger)
        count = self._counts.get(key) or CaptureCount(kind=spec.kind, trigger=spec.trigger)
        if paths is None:
            count = dataclasses.replace(
                count, failed_total=count.failed_total + 1, last_error=error
            )
        else:
            count = dataclasses.replace(
                count, ok_total=count.ok_total + 1, last_at=self._wall(),
                last_reason=spec.reason, last_paths=paths,
            )  # fmt: skip
        self._counts[key] = count

    # -- snapshot side -----------------------------------------------------------------------
    def annotate(self, jobs: tuple[Job, ...]) -> tuple[Job, ...]:
        """Jobs with their capture counts and the executions counted in their latest trace;
        what belongs to jobs that are gone is dropped."""
        live = {job.pid for job in jobs}
        for key in [k for k in self._counts if k[0] not in live]:
            del self._counts[key]
        counted = tuple(
            dataclasses.replace(job, captures=self.counts_for(job.pid)) if self._has(job) else job
            for job in jobs
        )
        return self.executions.annotate(counted)

    def _has(self, job: Job) -> bool:
        return any(key[0] == job.pid for key in self._counts)

    def counts_for(self, pid: int) -> tuple[CaptureCount, ...]:
        return tuple(c for key, c in sorted(self._counts.items()) if key[0] == pid)

    def start_triggered(self, spec: CaptureSpec) -> None:
        """Run a capture in the background (from the tick), logging how it went."""
        self._background(self._triggered(spec))

    def _background(self, work: Coroutine[object, object, object]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _triggered(self, spec: CaptureSpec) -> None:
        try:
            outcome = await self.capture(spec)
        except CaptureError as exc:
            log.warning("triggered %s capture (%s) failed: %s", spec.kind, spec.reason, exc.message)
            return
        log.info(
            "triggered %s of job %r pid %d (%s): %s",
            outcome.kind, outcome.job_name, outcome.pid, spec.reason, ", ".join(outcome.paths),
        )  # fmt: skip

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- a program's HLO ---------------------------------------------------------------------
    async def get_hlo(self, job_name: str | None, pid: int | None, fingerprint: str) -> HloOutcome:
        """The optimized HLO text (gzip) of the program ``fingerprint`` (or a unique prefix of
        it) names, asked of the job that has it."""
        target, program = find_program(self._targets(), job_name, pid, fingerprint)
        result = await self._send(target, GetHlo(program.fingerprint), HLO_TIMEOUT_SECONDS)
        if not result.ok:
            raise agent_error(target, result.error_code, result.message)
        return HloOutcome(
            target.job_name, target.pid, program.fingerprint, program.name, result.hlo_gzip
        )

"""Program executions counted in each job's most recent trace capture.

Nothing in the job counts dispatches (that would cost the job on every call). Instead, after a
trace capture (``xmon capture`` or a triggered one) the daemon reads the trace the job wrote and
counts each program's executions in it (xmon.execution.xplane), in a worker thread, and
keeps per job the counts by HLO module id with how long the trace recorded. Each snapshot then
maps the ids to the job's programs (``Program.program_ids``, which the agent reports). Reading
is best effort: a trace that cannot be read is logged and the previous counts stay; the capture
itself has already succeeded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from xmon.execution.xplane import DEFAULT_MAX_BYTES, TraceRefused, TraceUnreadable, count_files
from xmon.model import Job, Program

log = logging.getLogger("xmon.daemon")


@dataclass(frozen=True)
class TraceExecutions:
    """Executions by HLO module id in one trace of one job."""

    counts: Mapping[int, int]
    window_seconds: float  # how long the profiler recorded
    ended_at: float  # wall clock, when the daemon got the trace


def with_executions(program: Program, trace: TraceExecutions) -> Program:
    """The program with its executions in ``trace``: the sum over its module ids (a program
    recompiled during the trace ran under both); unknown without ids or when it was compiled
    after the trace ended. Counts the execution ledger took after the trace ended stand: the
    newer of the two describes the job now."""
    compiled_late = program.compiled_at is not None and program.compiled_at > trace.ended_at
    ledger_newer = (program.executions_counted_at or 0.0) > trace.ended_at
    if not program.program_ids or compiled_late or ledger_newer:
        return program
    executions = sum(trace.counts.get(i, 0) for i in set(program.program_ids))
    rate = executions / trace.window_seconds if trace.window_seconds > 0 else None
    return dataclasses.replace(
        program,
        executions=executions,
        executions_per_second=rate,
        executions_window_seconds=trace.window_seconds,
        executions_counted_at=trace.ended_at,
        executions_source="capture",
        executions_per_step=None,  # a capture counts no steps
    )


class ExecutionTracker:
    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        wall: Callable[[], float] = time.time,
        refused: Counter[str] | None = None,
    ) -> None:
        self._max_bytes = max_bytes
        self.refused: Counter[str] = Counter() if refused is None else refused
        self._wall = wall
        self._traces: dict[int, TraceExecutions] = {}
        # (pid, fingerprint) -> (program as reported, program with executions): a snapshot
        # reuses the annotated copy while neither the program nor the trace changed.
        self._annotated: dict[tuple[int, str], tuple[Program, Program]] = {}

    async def count(
        self, pid: int, paths: Iterable[str], run_dir: Path, window_seconds: float
    ) -> TraceExecutions | None:
        """Count the capture's trace files off the event loop; never raises."""
        ended_at = self._wall()
        paths = tuple(paths)
        try:
            counts = await asyncio.to_thread(count_files, paths, run_dir, self._max_bytes)
        except TraceRefused as exc:
            self.refused[exc.bound] += 1
            log.warning("not counting program executions of pid %d (bound %s): %s",
                        pid, exc.bound, exc)  # fmt: skip
            return None
        except TraceUnreadable as exc:
            log.warning("not counting program executions of pid %d: %s", pid, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a broken trace must not break the daemon
            log.warning("not counting program executions of pid %d: %r", pid, exc)
            return None
        trace = TraceExecutions(counts, window_seconds, ended_at)
        current = self._traces.get(pid)
        if current is not None and current.ended_at > ended_at:
            return None  # a later capture of the job was read first: keep the newer counts
        self._traces[pid] = trace
        self._annotated = {k: v for k, v in self._annotated.items() if k[0] != pid}
        log.info("counted %d executions of %d programs in %s over %.2f s",
                 sum(counts.values()), len(counts), ", ".join(paths), window_seconds)  # fmt: skip
        return trace

    def annotate(self, jobs: tuple[Job, ...]) -> tuple[Job, ...]:
        """Jobs whose programs carry their executions; traces of jobs that are gone are
        dropped."""
        live = {job.pid for job in jobs}
        gone = [pid for pid in self._traces if pid not in live]
        for pid in gone:
            del self._traces[pid]
        if gone:
            self._annotated = {k: v for k, v in self._annotated.items() if k[0] in live}
        return tuple(self._annotate_job(job) for job in jobs)

    def _annotate_job(self, job: Job) -> Job:
        trace = self._traces.get(job.pid)
        if trace is None:
            return job
        programs = tuple(self._annotate_program(job.pid, p, trace) for p in job.programs)
        return dataclasses.replace(job, programs=programs)

    def _annotate_program(self, pid: int, program: Program, trace: TraceExecutions) -> Program:
        key = (pid, program.fingerprint)
        cached = self._annotated.get(key)
        if cached is not None and cached[0] is program:
            return cached[1]
        annotated = with_executions(program, trace)
        self._annotated[key] = (program, annotated)
        return annotated

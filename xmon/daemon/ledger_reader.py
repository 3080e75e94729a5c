"""Reads a job's execution samples off the event loop, one at a time per job.

A sample is parsed in a worker thread (tens of milliseconds for a busy CPU job's 0.2 s); a
sample arriving while the job's previous one is still being read is dropped and counted, so a
buggy or hostile agent cannot queue work without bound; over all jobs, samples are read only
while the bytes being read stay under ``max_inflight_bytes`` (each may be 16 MiB: a thousand
agents must not make the daemon hold a thousand of them). Numbers that could not come from a
real session (non-finite, negative, longer than a minute; step begins outside the session or
under a microsecond apart) are refused before the parse and counted
(``bound="sample_numbers"``), and so is a sample the parse stops at one of its bounds
(:mod:`xmon.execution.xspace_bounds`). Each kind of refusal is logged in one line when it
starts, and again only after a sample has been read since.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter

from xmon.daemon.sanitize import WALL_TIME_MAX
from xmon.execution.ledger import JobLedger
from xmon.execution.samples import (
    SampleRefused,
    SampleUnreadable,
    parse_sample,
    step_begins_problem,
)
from xmon.proto import xmon_pb2

log = logging.getLogger("xmon.daemon")

MAX_SAMPLE_SECONDS = 60.0
MAX_INFLIGHT_BYTES = 64 * 1024 * 1024


class LedgerReader:
    def __init__(
        self, max_inflight_bytes: int = MAX_INFLIGHT_BYTES, refused: Counter[str] | None = None
    ) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self.max_inflight_bytes = max_inflight_bytes
        self.inflight_bytes = 0
        self.refused: Counter[str] = Counter() if refused is None else refused
        self._refusing: set[str] = set()  # bounds that refused a sample since the last read

    def submit(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample) -> bool:
        """Start reading the sample into the ledger; False when it was dropped."""
        if ledger.reading:
            ledger.samples_dropped_total += 1
            return False
        problem = implausible(sample)
        if problem is not None:
            self._refuse(ledger, SampleRefused("sample_numbers", problem))
            return False
        size = len(sample.xspace)
        if self.inflight_bytes + size > self.max_inflight_bytes:
            ledger.samples_dropped_total += 1
            self.refused["ledger_bytes"] += 1
            return False
        ledger.reading = True
        self.inflight_bytes += size
        task = asyncio.get_running_loop().create_task(self._read(ledger, sample, size))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _refuse(self, ledger: JobLedger, refusal: SampleRefused) -> None:
        ledger.samples_dropped_total += 1
        self.refused[refusal.bound] += 1
        if refusal.bound not in self._refusing:  # one line per change, not one per sample
            self._refusing.add(refusal.bound)
            log.warning("execution samples refused (bound %s): %s", refusal.bound, refusal)

    async def _read(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample, size: int) -> None:
        try:
            reading = await asyncio.to_thread(
                parse_sample,
                sample.xspace,
                sample.started_at,
                sample.duration_seconds,
                tuple(sample.step_begin_seconds),  # checked in submit
                sample.steps_marked,
            )
        except SampleRefused as refusal:
            self._refuse(ledger, refusal)
        except SampleUnreadable as exc:
            ledger.parse_errors_total += 1
            log.debug("execution sample unreadable: %s", exc)
        except Exception as exc:  # noqa: BLE001 - a bad sample must never stop the daemon
            ledger.parse_errors_total += 1
            log.warning("execution sample unreadable: %r", exc)
        else:
            ledger.add(reading)
            if self._refusing:
                log.info("execution samples read again")
                self._refusing.clear()
        finally:
            ledger.reading = False
            self.inflight_bytes -= size

    async def drain(self) -> None:
        """Wait for the samples being read (tests, shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def implausible(sample: xmon_pb2.ExecutionSample) -> str | None:
    """Why a sample's numbers could not come from a real profiler session, if they could not."""
    started, duration = sample.started_at, sample.duration_seconds
    if not (math.isfinite(started) and 0 < started <= WALL_TIME_MAX):
        return f"start time {started!r}"
    if not (math.isfinite(duration) and 0 < duration <= MAX_SAMPLE_SECONDS):
        return f"duration {duration!r} s"
    if not sample.xspace:
        return "no XSpace"
    return step_begins_problem(sample.step_begin_seconds, duration)

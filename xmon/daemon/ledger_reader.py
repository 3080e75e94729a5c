"""Reads a job's execution samples off the event loop, one at a time per job.

A sample is parsed in a thread of its own (tens of milliseconds for a busy CPU job's 0.2 s),
one sample after another, oldest first, with a pause as long as each read after it: reading
takes at most half of one core, and the loop that welcomes agents, answers views and
/metrics, and checks pid claims (in the default thread pool, which samples never fill) keeps
the rest. A sample arriving while the job's previous one waits or is read is dropped and
counted, so a buggy or hostile agent cannot queue work without bound; over all jobs at most
``max_waiting`` samples wait (past it one is dropped and counted, ``bound="ledger_waiting"``:
64 jobs sending samples that take 0.1 s each delayed a new agent's welcome by 23 s when each
was read in the shared pool), and samples are kept only while their bytes stay under
``max_inflight_bytes`` (each may be 16 MiB: a thousand agents must not make the daemon hold a
thousand of them). Numbers that could not come from a
real session (non-finite, negative, longer than a minute; step begins outside the session or
under a microsecond apart) are refused before the parse and counted
(``bound="sample_numbers"``), and so is a sample the parse stops at one of its bounds
(:mod:`xmon.execution.xspace_bounds`). Each kind of refusal is logged in one line when it
starts, and again only after a sample has been read since. A sample refused for its size (more
events or bytes than a sample may hold: a job of many small ops, fast steps) makes the daemon
ask the job for shorter samples, so that its next ones are read.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor

from xmon.daemon.bounds import WALL_TIME_MAX
from xmon.execution.ledger import JobLedger
from xmon.execution.samples import (
    ExecutionSample,
    SampleRefused,
    SampleUnreadable,
    parse_sample,
    step_begins_problem,
)
from xmon.wire.protocol import SAMPLE_TAKEN_MAX_SECONDS

log = logging.getLogger("xmon.daemon")

MAX_SAMPLE_SECONDS = SAMPLE_TAKEN_MAX_SECONDS
# Of samples waiting or being read: one at a time is read, so this is what waits (a real
# sample is 0.1-2 MiB; a 15 MiB one is a flood's).
MAX_INFLIGHT_BYTES = 32 * 1024 * 1024
MAX_WAITING = 32  # samples waiting for the reader over all jobs (a ~0.1 s read each: ~6 s)
READING_SHARE = 0.5  # of one core: after a read of t seconds the reader rests t
# Bounds a sample passes by recording too long (its events and bytes grow with its length):
# the job is asked for shorter ones (JobLedger.refused_as_too_large), which can be read.
SIZE_BOUNDS = frozenset({"xspace_events", "xspace_bytes"})


class LedgerReader:
    def __init__(
        self,
        max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
        refused: Counter[str] | None = None,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.max_inflight_bytes = max_inflight_bytes
        self.max_waiting = max_waiting
        self.inflight_bytes = 0  # of samples waiting or being read
        self.refused: Counter[str] = Counter() if refused is None else refused
        self._refusing: set[str] = set()  # bounds that refused a sample since the last read
        self._waiting: deque[tuple[JobLedger, ExecutionSample, int]] = deque()
        self._worker: asyncio.Task[None] | None = None
        # One thread: the parse is Python holding the GIL, so more threads would read no more
        # samples a second and take the GIL from the loop more often.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="xmon-samples")

    def submit(self, ledger: JobLedger, sample: ExecutionSample) -> bool:
        """Queue the sample to be read into the ledger; False when it was dropped."""
        if ledger.reading:
            ledger.samples_dropped_total += 1
            return False
        problem = implausible(sample)
        if problem is not None:
            self._refuse(ledger, SampleRefused("sample_numbers", problem))
            return False
        size = len(sample.xspace)
        if self.inflight_bytes + size > self.max_inflight_bytes:
            return self._drop(ledger, "ledger_bytes")
        if len(self._waiting) >= self.max_waiting:
            return self._drop(ledger, "ledger_waiting")
        ledger.reading = True
        self.inflight_bytes += size
        self._waiting.append((ledger, sample, size))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._read_waiting())
        return True

    def _drop(self, ledger: JobLedger, bound: str) -> bool:
        ledger.samples_dropped_total += 1
        self.refused[bound] += 1
        return False

    def _refuse(self, ledger: JobLedger, refusal: SampleRefused) -> None:
        ledger.samples_dropped_total += 1
        self.refused[refusal.bound] += 1
        if refusal.bound not in self._refusing:  # one line per change, not one per sample
            self._refusing.add(refusal.bound)
            log.warning("execution samples refused (bound %s): %s", refusal.bound, refusal)

    async def _read_waiting(self) -> None:
        while self._waiting:
            ledger, sample, size = self._waiting.popleft()
            started = time.monotonic()
            try:
                await self._read(ledger, sample)
            finally:
                ledger.reading = False
                self.inflight_bytes -= size
            took = time.monotonic() - started
            await asyncio.sleep(took * (1 - READING_SHARE) / READING_SHARE)

    async def _read(self, ledger: JobLedger, sample: ExecutionSample) -> None:
        try:
            reading = await asyncio.get_running_loop().run_in_executor(
                self._thread,
                parse_sample,
                sample.xspace,
                sample.started_at,
                sample.duration_seconds,
                sample.step_begin_seconds,  # checked in submit
                sample.steps_marked,
                sample.anchor_seconds,
                sample.conditionals,
            )
        except SampleRefused as refusal:
            self._refuse(ledger, refusal)
            if refusal.bound in SIZE_BOUNDS:
                ledger.refused_as_too_large(sample.duration_seconds)
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

    async def drain(self) -> None:
        """Wait for the samples waiting or being read (tests, shutdown)."""
        while self._worker is not None and not self._worker.done():
            await asyncio.gather(self._worker, return_exceptions=True)


def implausible(sample: ExecutionSample) -> str | None:
    """Why a sample's numbers could not come from a real profiler session, if they could not."""
    started, duration = sample.started_at, sample.duration_seconds
    if not (math.isfinite(started) and 0 < started <= WALL_TIME_MAX):
        return f"start time {started!r}"
    if not (math.isfinite(duration) and 0 < duration <= MAX_SAMPLE_SECONDS):
        return f"duration {duration!r} s"
    if not sample.xspace:
        return "no XSpace"
    anchor = sample.anchor_seconds
    if anchor is not None and not (math.isfinite(anchor) and 0 <= anchor <= duration):
        return f"anchor {anchor!r} s"
    return step_begins_problem(sample.step_begin_seconds, duration)

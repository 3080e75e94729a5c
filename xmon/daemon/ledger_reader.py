"""Reads a job's execution samples off the event loop, one at a time per job.

A sample is parsed in a worker thread (tens of milliseconds for a busy CPU job's 0.2 s); a
sample arriving while the job's previous one is still being read is dropped and counted, so a
buggy or hostile agent cannot queue work without bound; over all jobs, samples are read only
while the bytes being read stay under ``max_inflight_bytes`` (each may be 16 MiB: a thousand
agents must not make the daemon hold a thousand of them). Numbers that could not come from a
real session (non-finite, negative, longer than a minute) are refused the same way.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter

from xmon.execution.ledger import JobLedger
from xmon.execution.samples import SampleUnreadable, parse_sample
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

    def submit(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample) -> bool:
        """Start reading the sample into the ledger; False when it was dropped."""
        if ledger.reading or not _plausible(sample):
            ledger.samples_dropped_total += 1
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

    async def _read(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample, size: int) -> None:
        try:
            reading = await asyncio.to_thread(
                parse_sample,
                sample.xspace,
                sample.started_at,
                sample.duration_seconds,
                tuple(t for t in sample.step_begin_seconds if math.isfinite(t)),
                sample.steps_marked,
            )
        except SampleUnreadable as exc:
            ledger.parse_errors_total += 1
            log.debug("execution sample unreadable: %s", exc)
        except Exception as exc:  # noqa: BLE001 - a bad sample must never stop the daemon
            ledger.parse_errors_total += 1
            log.warning("execution sample unreadable: %r", exc)
        else:
            ledger.add(reading)
        finally:
            ledger.reading = False
            self.inflight_bytes -= size

    async def drain(self) -> None:
        """Wait for the samples being read (tests, shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _plausible(sample: xmon_pb2.ExecutionSample) -> bool:
    return (
        math.isfinite(sample.started_at)
        and sample.started_at > 0
        and math.isfinite(sample.duration_seconds)
        and 0 < sample.duration_seconds <= MAX_SAMPLE_SECONDS
        and bool(sample.xspace)
    )

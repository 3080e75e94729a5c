"""Reads a job's execution samples off the event loop, one at a time per job.

A sample is parsed in a worker thread (tens of milliseconds for a busy CPU job's 0.2 s); a
sample arriving while the job's previous one is still being read is dropped and counted, so a
buggy or hostile agent cannot queue work without bound. Numbers that could not come from a real
session (non-finite, negative, longer than a minute) are refused the same way.
"""

from __future__ import annotations

import asyncio
import logging
import math

from xmon.execution.ledger import JobLedger, SampleUnreadable, parse_sample
from xmon.proto import xmon_pb2

log = logging.getLogger("xmon.daemon")

MAX_SAMPLE_SECONDS = 60.0


class LedgerReader:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample) -> bool:
        """Start reading the sample into the ledger; False when it was dropped."""
        if ledger.reading or not _plausible(sample):
            ledger.samples_dropped_total += 1
            return False
        ledger.reading = True
        task = asyncio.get_running_loop().create_task(self._read(ledger, sample))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _read(self, ledger: JobLedger, sample: xmon_pb2.ExecutionSample) -> None:
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

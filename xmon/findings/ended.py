"""Jobs that ended while the daemon held a finding about how they would end.

A job that runs out of memory usually dies of it: its agent reports the error on its way out
(xmon.agent.oom), and then the job, and with it every finding about it, leaves the snapshot. A
user who runs ``xmon doctor`` after the crash must still learn why. So when a job leaves while
it has an ``oom`` finding (or a ``memory_leak`` one: a job the kernel's OOM killer ends
reports nothing), the finding stays ``KEEP_SECONDS`` as a host finding of kind ``ended_job``,
naming the job, with the original evidence, fix and files.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable

from xmon.findings.oom import OomEvent, detect_oom
from xmon.model import Finding, Job

KEEP_SECONDS = 3600.0
MAX_KEPT = 32
KINDS = frozenset({"oom", "memory_leak"})


class EndedJobs:
    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,  # the clock of OomEvent.monotonic
    ) -> None:
        self._wall, self._clock = wall, clock
        self._last: dict[int, tuple[str, tuple[Finding, ...]]] = {}  # pid -> (name, findings)
        self._ended: deque[tuple[float, Finding]] = deque(maxlen=MAX_KEPT)
        self._names: dict[int, str] = {}  # pid -> job name, of the jobs of the last tick
        # Out-of-memory reports by pid: a job that dies of one is often gone before a tick
        # shows its finding, so the report itself is kept until its job has gone.
        self._ooms: dict[int, OomEvent] = {}
        self._lock = threading.Lock()

    def note_oom(self, pid: int, event: OomEvent) -> None:
        """An agent's out-of-memory report (called from the daemon's gRPC threads)."""
        with self._lock:
            self._ooms[pid] = event
            while len(self._ooms) > MAX_KEPT:
                del self._ooms[next(iter(self._ooms))]

    def observe(self, jobs: tuple[Job, ...]) -> None:
        """The jobs of this tick: the ones gone since the last tick leave their findings."""
        now = self._wall()
        live = {job.pid for job in jobs}
        with self._lock:
            ooms = {pid: self._ooms.pop(pid) for pid in list(self._ooms) if pid not in live}
        for pid in [p for p in self._last if p not in live]:
            name, findings = self._last.pop(pid)
            if pid in ooms:  # the report says more than the finding the last tick had
                findings = tuple(f for f in findings if f.kind != "oom")
            self._ended.extend((now, ended(name, pid, f, now)) for f in findings)
        for pid, event in ooms.items():
            # A job that caught the error and ran on for long did not die of it: detect_oom
            # stops flagging it after its FINDING_SECONDS, and so does this.
            finding = detect_oom(event, self._clock(), event.wall_time, None, "")
            if finding is not None:
                name = self._names.get(pid, "a job")
                self._ended.append((now, ended(name, pid, finding, now)))
        self._names = {job.pid: job.job_name for job in jobs}
        for job in jobs:
            kept = tuple(f for f in job.findings if f.kind in KINDS)
            if kept:
                self._last[job.pid] = (job.job_name, kept)
            else:
                self._last.pop(job.pid, None)

    def findings(self) -> tuple[Finding, ...]:
        now = self._wall()
        while self._ended and now - self._ended[0][0] > KEEP_SECONDS:
            self._ended.popleft()
        return tuple(finding for _, finding in self._ended)


def ended(job_name: str, pid: int, finding: Finding, at: float) -> Finding:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    return dataclasses.replace(
        finding,
        kind="ended_job",
        summary=f"{job_name} (pid {pid}) ended with this {finding.kind} finding: {finding.summary}",
        since=at,
        subject=f"{job_name} (pid {pid})",
        evidence=(("ended at", when), ("finding", finding.kind), *finding.evidence),
    )

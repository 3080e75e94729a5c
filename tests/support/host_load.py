"""What the host's other processes do to a job under test, measured by the test itself: the
truth a verdict that depends on the host (host_bound's "the host is shared") is checked
against, so that the test passes on a quiet machine and on one where other work holds the
cores, and fails where the verdict does not match what the host did."""

from __future__ import annotations

import time

import psutil

from xmon.findings.host_bound import OTHERS_BUSY_CORES
from xmon.model import Finding

from support.process_tree import descendants

SHARED_SUMMARY = "the job's threads wait for a CPU the host's other processes hold"


def others_busy_cores(pid: int, seconds: float = 3.0) -> float:
    """Cores the host's processes other than ``pid`` (and its children) kept busy over the
    next ``seconds``: the host's busy CPU time less the job's, over the wall time."""
    job = psutil.Process(pid)

    def job_seconds() -> float:
        total = 0.0
        for process in (job, *descendants(pid)):
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def host_busy() -> float:
        times = psutil.cpu_times()
        return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))

    began, host_before, job_before = time.monotonic(), host_busy(), job_seconds()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    others = (host_busy() - host_before) - (job_seconds() - job_before)
    return max(0.0, min(float(psutil.cpu_count() or 1), others / elapsed))


def assert_host_bound_verdict_holds(finding: Finding, pid: int) -> None:
    """host_bound is a warning, or info where it says the host's other processes hold the
    cores; then the finding's own evidence and the test's reading of the host both show them
    busy (one on the time the busy ratio covers, the other now: a load that came and went in
    between is not something a test can call wrong)."""
    if finding.severity == "warning":
        return
    assert finding.severity == "info", finding
    assert SHARED_SUMMARY in finding.summary, finding
    evidence = dict(finding.evidence)
    assert float(evidence["other processes' busy cores"]) >= OTHERS_BUSY_CORES, finding
    measured = others_busy_cores(pid)
    assert measured >= OTHERS_BUSY_CORES, (
        f"host_bound said the host is shared, but its other processes kept {measured:.2f} "
        f"cores busy: {finding}"
    )

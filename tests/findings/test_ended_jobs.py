"""A job that ends with an out-of-memory (or leak) finding leaves it behind as a host finding
for an hour (xmon.findings.ended)."""

from __future__ import annotations

import dataclasses

from xmon.findings.ended import KEEP_SECONDS, MAX_KEPT, EndedJobs
from xmon.model import Finding

from views_support import job

OOM = Finding("oom", "error", "out of memory in jit_expand", 10.0, (("largest", "8MiB"),),
              fix="donate", detail="files: oom/1.json")  # fmt: skip
STALL = Finding("stall", "warning", "no step for 30 s", 10.0)


def test_a_job_that_dies_out_of_memory_leaves_its_finding_for_an_hour() -> None:
    now = [1000.0]
    ended = EndedJobs(wall=lambda: now[0])
    train = dataclasses.replace(job(), findings=(OOM, STALL))
    ended.observe((train,))
    assert ended.findings() == ()  # still running: the job's own findings say it
    now[0] = 1010.0
    ended.observe(())
    (left,) = ended.findings()  # the stall does not outlive the job; the oom does
    assert left.kind == "ended_job" and left.severity == "error"
    assert left.subject == f"{train.job_name} (pid {train.pid})"
    assert left.summary.endswith("out of memory in jit_expand") and left.since == 1010.0
    assert ("largest", "8MiB") in left.evidence and left.fix == "donate"
    assert left.detail == "files: oom/1.json"
    now[0] = 1010.0 + KEEP_SECONDS + 1
    assert ended.findings() == ()


def test_healthy_jobs_that_end_leave_nothing_and_the_kept_are_bounded() -> None:
    ended = EndedJobs()
    ended.observe((dataclasses.replace(job(), findings=(STALL,)),))
    ended.observe(())
    assert ended.findings() == ()
    for pid in range(MAX_KEPT + 5):
        ended.observe((dataclasses.replace(job(), pid=pid, findings=(OOM,)),))
        ended.observe(())
    assert len(ended.findings()) == MAX_KEPT

"""A job that ends with an out-of-memory (or leak) finding leaves it behind as a host finding
for an hour (xmon.findings.ended)."""

from __future__ import annotations

import dataclasses

from xmon.findings.ended import KEEP_SECONDS, MAX_KEPT, EndedJobs
from xmon.findings.oom import FINDING_SECONDS, LiveArrayRow, OomEvent
from xmon.model import Finding

from support.views import job

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


def oom_event(at: float) -> OomEvent:
    largest = LiveArrayRow((2048, 1024), "float32", "SingleDeviceSharding", 8 << 20)
    return OomEvent(1000.0, at, "RESOURCE_EXHAUSTED: Out of memory", "excepthook", (largest,),
                    3, 9 << 20, None, 1 << 44, None, ("/tb/oomdies-7/oom/a.json",))  # fmt: skip


def test_a_report_from_a_job_gone_before_any_tick_showed_its_finding_is_kept() -> None:
    clock = [50.0]
    ended = EndedJobs(wall=lambda: 2000.0, clock=lambda: clock[0])
    dying = dataclasses.replace(job(), pid=7, job_name="oomdies")
    ended.observe((dying,))  # its last tick: no finding yet
    ended.note_oom(7, oom_event(at=49.0))  # the report, then the stream closes
    ended.observe(())
    (left,) = ended.findings()
    assert left.kind == "ended_job" and left.severity == "error"
    assert left.subject == "oomdies (pid 7)" and "could not be allocated" in left.summary
    assert any("float32[2048,1024]" in value for _, value in left.evidence), left.evidence


def test_a_job_that_recovered_from_an_out_of_memory_error_and_ended_later_leaves_nothing() -> None:
    clock = [50.0]
    ended = EndedJobs(clock=lambda: clock[0])
    ended.note_oom(9, oom_event(at=50.0))
    ended.observe((dataclasses.replace(job(), pid=9),))
    clock[0] = 50.0 + FINDING_SECONDS + 1  # it went on with a smaller batch, then ended
    ended.observe(())
    assert ended.findings() == ()

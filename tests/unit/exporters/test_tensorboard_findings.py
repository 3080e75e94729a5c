"""A job's findings as TensorBoard text, read back with TensorBoard's own EventAccumulator under
the text plugin's tag: written when a finding appears, changes severity or ends, not every
export; bounded in bytes; written again into a rotated run file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from xmon.exporters.tb_findings import TEXT_MAX_BYTES, markdown, tag_of
from xmon.exporters.tensorboard import TensorBoardExporter
from xmon.model import Finding, Job

from support.tb_snapshots import STARTED, Clock, job, snapshot
from support.tb_texts import texts

STALL = Finding("stall", "warning", "no step has finished for 31 s | main thread in wait",
                STARTED + 5, evidence=(("seconds since last step", "31.0"),),
                fix="Read the main thread's stack below.", value=31.0,
                detail='Thread MainThread (1):\n  File "train.py", line 9, in wait\n')  # fmt: skip
STORM = Finding("recompile", "warning", "jit_step recompiled 4 times", STARTED + 2,
                subject="jit_step", fix="Pad or bucket shapes.")  # fmt: skip


def export(exporter: TensorBoardExporter, clock: Clock, *jobs: Job) -> None:
    clock.now += 1
    exporter.update(snapshot(STARTED + clock.now, jobs))


def test_findings_are_written_when_they_change_not_every_export(tmp_path: Path) -> None:
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=clock)
    base = job(steps=10)
    export(exporter, clock, base)  # no findings: no text
    export(exporter, clock, dataclasses.replace(job(steps=11), findings=(STORM,)))
    export(exporter, clock, dataclasses.replace(job(steps=12), findings=(STORM,)))  # unchanged
    stalled = (STALL, STORM)
    export(exporter, clock, dataclasses.replace(job(steps=13), findings=stalled))
    error = dataclasses.replace(STALL, severity="error")
    export(exporter, clock, dataclasses.replace(job(steps=14), findings=(error, STORM)))
    export(exporter, clock, dataclasses.replace(job(steps=15), findings=(error,)))  # storm over
    exporter.close()
    found = texts(tmp_path / "train-42")
    assert set(found) == {"findings/recompile/jit_step", "findings/stall"}
    storm = found["findings/recompile/jit_step"]
    assert [step for step, _ in storm] == [11, 15]
    assert storm[0][1].startswith("**WARNING** recompile: jit_step recompiled 4 times")
    assert "**fix:** Pad or bucket shapes." in storm[0][1]
    assert storm[1][1] == "**resolved** recompile (jit_step): no longer holds"
    stall = found["findings/stall"]
    assert [step for step, _ in stall] == [13, 14]
    assert stall[0][1].startswith("**WARNING** stall: no step has finished for 31 s \\| main")
    assert "| seconds since last step | 31.0 |" in stall[0][1]
    assert "since 2023-11-14 22:13:25 UTC" in stall[0][1]
    assert '```\nThread MainThread (1):\n  File "train.py", line 9, in wait' in stall[0][1]
    assert stall[1][1].startswith("**ERROR** stall")


def test_a_long_stack_is_cut_to_the_bound() -> None:
    stacks = "".join(f'  File "deep.py", line {n}, in f{n}\n' for n in range(5000))
    text = markdown(dataclasses.replace(STALL, detail=stacks))
    assert len(text.encode()) <= TEXT_MAX_BYTES and text.endswith("… (cut)\n```")
    assert "**fix:**" in text and '  File "deep.py", line 0, in f0' in text


def test_tags_are_safe_names() -> None:
    assert (
        tag_of("recompile", "jit(train step)/<lambda>")
        == "findings/recompile/jit_train_step_lambda_"
    )
    assert tag_of("stall", None) == "findings/stall"


def test_a_rotated_file_is_told_the_findings_again(tmp_path: Path) -> None:
    """The job's older file goes at the bytes bound: its findings must not go with it."""
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=clock, job_max_bytes=6000)
    for steps in range(10, 40):
        export(exporter, clock, dataclasses.replace(job(steps=steps), findings=(STALL,)))
    exporter.close()
    files = sorted((tmp_path / "train-42").glob("events.out.tfevents.*"))
    assert exporter.rotations_total >= 2 and 1 <= len(files) <= 2
    for file in files:  # each file that remains says the stall, once
        one = tmp_path / "one" / file.name
        one.parent.mkdir(exist_ok=True)
        one.write_bytes(file.read_bytes())
        assert len(texts(one.parent)["findings/stall"]) == 1
        one.unlink()


UNREACHABLE = Finding("tpu_metrics_unreachable", "warning", "no libtpu runtime metrics service "
                      "answers", STARTED + 1, subject="localhost:8431",
                      fix="Start the job with TPU_RUNTIME_METRICS_PORTS=8431.")  # fmt: skip


def host_export(exporter: TensorBoardExporter, clock: Clock, *findings: Finding) -> None:
    clock.now += 1
    exporter.update(dataclasses.replace(snapshot(STARTED + clock.now, (job(),)),
                                        findings=findings))  # fmt: skip


def test_host_findings_are_text_in_the_host_run_when_they_change(tmp_path: Path) -> None:
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=clock, wall=lambda: STARTED)
    host_export(exporter, clock)
    assert not (tmp_path / "host").exists()  # no host run until the host has a finding
    host_export(exporter, clock, UNREACHABLE)
    host_export(exporter, clock, UNREACHABLE)  # unchanged: nothing written
    host_export(exporter, clock)  # it no longer holds
    exporter.close()
    found = texts(tmp_path / "host")
    written = found["findings/tpu_metrics_unreachable/localhost_8431"]
    assert [t.split(" ", 1)[0] for _, t in written] == ["**WARNING**", "**resolved**"]
    assert "TPU_RUNTIME_METRICS_PORTS=8431" in written[0][1]
    # steps are Unix seconds by the anchored clock: the exporter started at STARTED, clock 100
    assert [step for step, _ in written] == [int(STARTED) + 2, int(STARTED) + 4]
    assert set(texts(tmp_path / "train-42")) == set()  # the job's run is not told of them


def test_the_host_run_is_never_a_job_s_run(tmp_path: Path) -> None:
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=clock)
    clock.now += 1
    named_host = dataclasses.replace(job(pid=7, name="host"), findings=(STORM,))
    exporter.update(dataclasses.replace(snapshot(STARTED + clock.now, (named_host,)),
                                        findings=(UNREACHABLE,)))  # fmt: skip
    exporter.close()
    assert set(texts(tmp_path / "host-7")) == {"findings/recompile/jit_step"}
    assert set(texts(tmp_path / "host")) == {"findings/tpu_metrics_unreachable/localhost_8431"}

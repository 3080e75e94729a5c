"""xmon doctor's text and exit status on synthetic jobs (the real daemon: tests/diagnosis)."""

from __future__ import annotations

from xmon.cli.doctor import EXIT_FINDINGS, EXIT_OK, exit_status, render
from xmon.model import Finding, Job

STALL = Finding("stall", "warning", "no step has finished for 30 s", 100.0,
                evidence=(("seconds since last step", "30.0"),), fix="Read the stack.",
                detail="Thread MainThread (1):\n  File \"t.py\", line 1, in <module>")  # fmt: skip
PEAK = Finding("no_peak", "info", "no peak FLOP/s known for cpu", 100.0, fix="Configure it.")


def job(*findings: Finding) -> Job:
    return Job(job_name="train", pid=4, hostname="h", platform="cpu", jax_version="",
               jaxlib_version="", findings=findings)  # fmt: skip


def test_a_warning_is_shown_with_evidence_fix_and_stack() -> None:
    text = render([job(STALL, PEAK)], now=130.0)
    assert "train (pid 4): 1 finding\n" in text
    assert "  WARNING stall: no step has finished for 30 s, for 30 s" in text
    assert "    seconds since last step  30.0" in text
    assert "    fix: Read the stack." in text and "Thread MainThread" in text
    assert "(1 info finding not shown: --all)" in text
    assert exit_status([job(STALL, PEAK)]) == EXIT_FINDINGS


def test_info_only_is_healthy() -> None:
    assert (
        render([job(PEAK)]) == "train (pid 4): no problems found (1 info finding: --all shows them)"
    )
    assert "INFO no_peak" in render([job(PEAK)], show_info=True)
    assert exit_status([job(PEAK)]) == EXIT_OK and exit_status([]) == EXIT_OK
    assert render([]) == "no job is attached to the daemon"


TPU_METRICS = Finding("tpu_metrics_unreachable", "warning", "no libtpu metrics service answers",
                      100.0, evidence=(("TPU chips", "4"),),
                      fix="TPU_RUNTIME_METRICS_PORTS=8431")  # fmt: skip
PREALLOCATED = Finding("gpu_preallocated", "info", "gpu 0 looks 75% full", 100.0, subject="gpu 0")


def test_host_findings_come_first_and_count_for_the_exit_status() -> None:
    text = render([job(PEAK)], now=130.0, host=(TPU_METRICS,), hostname="node0")
    assert text.startswith("host node0: 1 finding\n")
    assert "  WARNING tpu_metrics_unreachable: no libtpu metrics service answers, for 30 s" in text
    assert "    fix: TPU_RUNTIME_METRICS_PORTS=8431" in text
    assert text.endswith("train (pid 4): no problems found (1 info finding: --all shows them)")
    assert exit_status([job(PEAK)], (TPU_METRICS,)) == EXIT_FINDINGS
    assert exit_status([job(PEAK)], (PREALLOCATED,)) == EXIT_OK


def test_host_findings_without_jobs() -> None:
    text = render([], host=(PREALLOCATED,), hostname="node0")
    assert text == (
        "host node0: no problems found (1 info finding: --all shows them)\n\n"
        "no job is attached to the daemon"
    )
    assert "INFO gpu_preallocated: gpu 0 looks 75% full" in render([], True, host=(PREALLOCATED,))

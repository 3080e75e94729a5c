"""Job series of steps, utilisation and the execution ledger.

Hardware FLOPs (XLA's loop-aware count of what executed) and model FLOPs (what the user
declared) are separate series, and so are HFU and MFU: MFU only exists for a job that declares
its model FLOPs. Flags (inferred steps, lower-bound FLOPs) are 0/1 gauges beside the numbers
they qualify, so a dashboard or alert can show or exclude them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmon.model import Job

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder, JobKey


def add_step_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    s = job.steps
    b.add("xmon_job_steps_total", key, s.counted_total)  # absent, not 0, for inferred steps
    if s.inferred or s.steps_total:  # a job that never stepped has neither kind of step
        b.add("xmon_job_steps_inferred", (*key, s.inferred_from if s.inferred else ""), s.inferred)
    quantiles = (("0.5", s.p50_step_seconds), ("0.9", s.p90_step_seconds),
                 ("0.99", s.p99_step_seconds))  # fmt: skip
    b.summary("xmon_job_step_duration_seconds", key, quantiles, s.counted_total,
              s.step_seconds_total)  # fmt: skip
    b.add("xmon_job_last_step_duration_seconds", key, s.last_step_seconds)
    b.add("xmon_job_steps_per_second", key, s.steps_per_second)
    b.add("xmon_job_flops_per_step", key, s.flops_per_step)
    b.add("xmon_job_model_flops_per_step", key, s.model_flops_per_step)
    b.add("xmon_job_tokens_per_step", key, s.tokens_per_step)
    b.add("xmon_job_bytes_per_step", key, s.bytes_per_step)
    add_utilization_series(b, job, key)


def add_utilization_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    u = job.utilization
    if job.steps.flops_per_step is not None or u.achieved_flops_per_second is not None:
        b.add("xmon_job_flops_lower_bound", key, u.flops_lower_bound)  # qualifies known FLOPs
        b.add("xmon_job_flops_upper_bound", key, u.flops_upper_bound)
    b.add("xmon_job_achieved_flops_per_second", key, u.achieved_flops_per_second)
    b.add("xmon_job_achieved_model_flops_per_second", key, u.achieved_model_flops_per_second)
    b.add("xmon_job_tokens_per_second", key, u.tokens_per_second)
    b.add("xmon_job_achieved_bytes_per_second", key, u.achieved_bytes_per_second)
    b.add("xmon_job_model_flops_utilization_ratio", key, u.model_flops_utilization_ratio)
    b.add("xmon_job_hardware_flops_utilization_ratio", key, u.hardware_flops_utilization_ratio)
    b.add("xmon_job_memory_bandwidth_utilization_ratio", key, u.memory_bandwidth_utilization_ratio)
    b.add("xmon_job_peak_flops_per_second", key, u.peak_flops_per_second)
    b.add("xmon_job_peak_memory_bandwidth_bytes_per_second", key, u.peak_bytes_per_second)


def add_ledger_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    a, ledger = job.agent, job.ledger
    b.add("xmon_agent_ledger_samples_total", key, a.ledger_samples_total)
    b.add("xmon_agent_ledger_samples_skipped_total", key, a.ledger_samples_skipped_total)
    b.add("xmon_agent_ledger_samples_busy_total", key, a.ledger_samples_busy_total)
    b.add("xmon_job_ledger_parse_errors_total", key, ledger.parse_errors_total)
    b.add("xmon_job_ledger_samples", key, ledger.samples)
    if ledger.samples:  # the model's 0.0 without samples means "no window", not an empty one
        b.add("xmon_job_ledger_sampled_seconds", key, ledger.sampled_seconds)
        b.add("xmon_job_ledger_window_seconds", key, ledger.window_seconds)
    b.add("xmon_job_ledger_last_sample_timestamp_seconds", key, ledger.last_sample_at)
    b.add("xmon_agent_ledger_next_sample_timestamp_seconds", key, a.ledger_next_sample_at)
    b.add("xmon_job_ledger_sample_seconds_asked", key, ledger.sample_seconds_asked)
    b.add("xmon_job_ledger_sample_seconds_most", key, ledger.sample_seconds_most)

"""Rules over the processes of multi-process jobs (xmon.fleet): recording rules that join each
process's series with its job key and rank the processes, and alerts that name a straggler,
the process a hang started from, and a process that dropped out.

The thresholds are xmon.fleet.judge's, which ``xmon fleet`` applies to the same series.
"""

from __future__ import annotations

from dashboards.rule_types import Alert, Record
from xmon.fleet.judge import STALLED_FOR_A_HANG, STRAGGLER_MIN_RATIO, STRAGGLER_MIN_SECONDS

# Each process's series, labelled with its job key and process index (processes of jobs of
# one process are left out: there is nobody to compare them with).
JOIN = (
    "* on(instance, job_name, pid) group_left(job_key, process_index, process_count, worker)"
    ' xmon_job_fleet_info{process_count!="1"}'
)
WHO = ("process {{ $labels.process_index }} of job {{ $labels.job_key }} "
       "({{ $labels.worker }}, {{ $labels.instance }}, pid {{ $labels.pid }})")  # fmt: skip
STALLED = "xmon:job_process:stalled"
STRAGGLER_KEEP_FIRING = "2m"  # the view's hysteresis (judge.STRAGGLER_KEEP_SHARE) as time
BEGUN = "xmon:job_process:stalled_steps_begun_total"
HOST = "xmon:job_process:step_host_seconds"
FASTEST = "xmon:job:step_host_seconds:min"
NEXT_SLOWEST = "xmon:job:step_host_seconds:second_max"

RECORDS = (
    Record(HOST, f"xmon_job_step_host_seconds {JOIN}",
           "Per step, how long each process's devices wait for its host."),
    Record("xmon:job_process:steps_per_second", f"xmon_job_steps_per_second {JOIN}",
           "Each process's step rate (the same for all processes of a synchronous job)."),
    Record("xmon:job:goodput_ratio",
           f"min by (job_key, window) (xmon_job_goodput_ratio {JOIN})",
           "A multi-process job's goodput per window: its least productive process's (in a "
           "synchronous job every process waits for the slowest)."),
    Record("xmon:job:step_seconds",
           "1 / min by (job_key) (xmon:job_process:steps_per_second > 0)",
           "The job's step time: its slowest process's."),
    Record(FASTEST, f"min by (job_key) ({HOST})",
           "The job's shortest host seconds per step (its fastest process's)."),
    Record(NEXT_SLOWEST, f"min by (job_key) (topk by (job_key) (2, {HOST}))",
           "The job's second longest host seconds per step: what the job would wait for "
           "without its slowest process."),
    Record("xmon:job_process:step_host_excess_seconds",
           f"{HOST} - on(job_key) group_left {FASTEST}",
           "Straggler ranking: host seconds per step over the job's fastest process's (the "
           "largest is the straggler)."),
    Record("xmon:job_process:step_host_excess_ratio",
           "xmon:job_process:step_host_excess_seconds"
           " / on(job_key) group_left xmon:job:step_seconds",
           "The same excess as a share of the job's step time."),
    Record("xmon:job_process:step_host_straggler_seconds",
           f"topk by (job_key) (1, {HOST}) - on(job_key) group_left {NEXT_SLOWEST}",
           "The slowest process's host seconds per step over the next slowest's: what it "
           "costs the job every step (two processes: the whole gap, not half of it)."),
    Record("xmon:job_process:step_host_straggler_ratio",
           "xmon:job_process:step_host_straggler_seconds"
           " / on(job_key) group_left xmon:job:step_seconds",
           "The same cost as a share of the job's step time."),
    Record("xmon:job:step_host_skew_ratio",
           f"(max by (job_key) ({HOST}) - min by (job_key) ({HOST}))"
           " / xmon:job:step_seconds",
           "Cross-host skew: (largest - smallest host seconds per step) / step time."),
    Record(STALLED, f"xmon_job_stalled {JOIN}",
           "Stalled processes, with where each one's step thread waits (jax or host)."),
    Record(BEGUN, f"(xmon_job_steps_begun_total {JOIN}) and on(job_key, process_index) {STALLED}",
           "Steps begun by each stalled process."),
    Record("xmon:job_process:up",
           'max by (job_key, process_index, process_count, worker, instance) '
           '(xmon_job_fleet_info{process_count!="1"})',
           "The processes of each multi-process job that a daemon reports now."),
)  # fmt: skip

_SEVERAL_STALLED = f"on(job_key) (count by (job_key) ({STALLED}) >= {STALLED_FOR_A_HANG})"

ALERTS = (
    Alert("XmonFleetStraggler",
          f"xmon:job_process:step_host_straggler_ratio > {STRAGGLER_MIN_RATIO}"
          " and on(job_key, process_index) xmon:job_process:step_host_straggler_seconds"
          f" > {STRAGGLER_MIN_SECONDS}",
          ("xmon:job_process:step_host_straggler_ratio",
           "xmon:job_process:step_host_straggler_seconds"), "5m", "warning",
          f"Straggler: {WHO}",
          "Its devices wait for its host {{ $value | humanizePercentage }} of every step "
          "longer than the next slowest process's; with collectives every other process "
          "waits that long for it (data loading, preprocessing, a slow or busy host).",
          keep_firing_for=STRAGGLER_KEEP_FIRING),
    Alert("XmonFleetHang",
          f'({STALLED}{{waits_in="host"}} and {_SEVERAL_STALLED})'
          f" or on(job_key) ({BEGUN} == on(job_key) group_left min by (job_key) ({BEGUN})"
          f" and on(job_key) (max by (job_key) ({BEGUN}) > min by (job_key) ({BEGUN}))"
          f" and {_SEVERAL_STALLED})",
          (STALLED, BEGUN), "15s", "critical",
          f"Job hung; it stopped first at {WHO}",
          "Processes of the job finish no step. This one waits in its own code (a lock, I/O, "
          "a data loader) or never began the step the others wait in, while the others wait "
          "inside jax for it: look at its stack first (`xmon doctor` on its host)."),
    Alert("XmonFleetProcessMissing",
          "(max_over_time(xmon:job_process:up[10m])"
          " unless on(job_key, process_index) xmon:job_process:up)"
          " and on(job_key) xmon:job_process:up",
          ("max_over_time(xmon:job_process:up[10m])", "xmon:job_process:up"), "1m",
          "critical", "Process dropped out: process {{ $labels.process_index }} of job "
          "{{ $labels.job_key }} ({{ $labels.worker }}, {{ $labels.instance }})",
          "The process reported within the last 10 minutes and no daemon reports it now, "
          "while other processes of its job still do: it died, its host is down, or its "
          "daemon stopped."),
)  # fmt: skip

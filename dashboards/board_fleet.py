"""Fleet overview: hosts and slices, accelerators, memory and utilisation heatmaps, jobs."""

from __future__ import annotations

from dashboards.grafana import Board, Panel, Row, Variable, q

H = 'instance=~"$instance"'
JOB_LINK = ("job_name", "Job view",
            "/d/xmon-job/xmon-job?var-instance=${__data.fields.instance}"
            "&var-job_name=${__data.fields.job_name}&${__url_time_range}")  # fmt: skip
JOB = "{{instance}} {{job_name}} ({{pid}})"
DEVICE = "{{instance}} dev {{device}}"
JOB_KEY = "on(instance, job_name, pid)"


def _stats() -> Row:
    def stat(title: str, description: str, expr: str, unit: str = "none") -> Panel:
        return Panel(title, description, (q(expr),), "stat", unit, width=3, height=4)

    return Row("Fleet", (
        stat("Hosts up", "xmon daemons that have taken their first snapshot.",
             f"count(xmon_up{{{H}}} == 1)"),
        stat("Accelerators", "TPU chips and GPUs found by hardware collectors.",
             f"count(xmon_device_info{{{H}}})"),
        stat("Jobs", "JAX processes with the xmon agent attached.",
             f"count(xmon_job_info{{{H}}})"),
        stat("Job devices", "PJRT devices the attached jobs use.",
             f"count(xmon_job_device_info{{{H}}})"),
        stat("Fleet HFU", "Hardware FLOP/s of all jobs (what XLA counts as executed) over "
             "their devices' peak FLOP/s.",
             f"sum(xmon_job_achieved_flops_per_second{{{H}}})"
             f" / sum(xmon_job_peak_flops_per_second{{{H}}})", "percentunit"),
        stat("Fleet MFU", "Declared model FLOP/s over the peak FLOP/s of the jobs that declare "
             "model FLOPs (PaLM's MFU); no data when none does.",
             f"sum(xmon_job_achieved_model_flops_per_second{{{H}}})"
             f" / sum(xmon_job_peak_flops_per_second{{{H}}} and {JOB_KEY}"
             f" xmon_job_achieved_model_flops_per_second{{{H}}})", "percentunit"),
        stat("Host-bound jobs", "Stepping jobs whose every device was busy less than half the "
             "sampled time (the XmonJobHostBound alert's condition, without its 15 minutes).",
             f"count(max by (instance, job_name, pid) (xmon_job_device_busy_ratio{{{H}}}) < 0.5"
             f" and {JOB_KEY} (rate(xmon_job_steps_total{{{H}}}[$__rate_interval]) > 0"
             f" or (xmon_job_steps_per_second{{{H}}} > 0"
             f" and {JOB_KEY} xmon_job_steps_inferred{{{H}}} == 1)))"
             " or vector(0)"),
        stat("Collectors down", "Collectors whose last run failed, fleet-wide.",
             f"count(xmon_collector_up{{{H}}} == 0) or vector(0)"),
    ))  # fmt: skip


def _hosts() -> Row:
    return Row("Hosts and slices", (
        Panel("Hosts", "Each daemon's host, its TPU slice identity (xmon_slice_info) and "
              "xmon version.",
              (q(f"xmon_host_info{{{H}}}"), q(f"xmon_slice_info{{{H}}}"),
               q(f"xmon_build_info{{{H}}}")), "table", width=24, height=7),
        Panel("Hosts per slice", "Daemons reporting each slice name and accelerator type.",
              (q(f"count by (slice, accelerator_type) (xmon_slice_info{{{H}}})"),),
              "table", width=8),
        Panel("Jobs per slice", "Attached jobs on the hosts of each slice.",
              (q(f"count by (slice) (xmon_job_info{{{H}}}"
                 f" * on(instance) group_left(slice) xmon_slice_info{{{H}}})"),),
              "table", width=8),
        Panel("Accelerators by slice and kind", "Chips per slice and device kind.",
              (q(f"count by (slice, device_kind) (xmon_device_info{{{H}}}"
                 f" * on(instance) group_left(slice) xmon_slice_info{{{H}}})"),),
              "table", width=8),
        Panel("Accelerators by host and kind", "Chips per host and device kind over time.",
              (q(f"count by (instance, device_kind) (xmon_device_info{{{H}}})",
                 "{{instance}} {{device_kind}}"),), width=24),
    ))  # fmt: skip


def _heatmaps() -> Row:
    def heat(title: str, description: str, expr: str, legend: str, unit: str) -> Panel:
        return Panel(title, description, (q(expr, legend),), "heatmap", unit, height=9)

    return Row("Memory and utilisation", (
        heat("Device memory used", "Device memory in use over capacity, per chip.",
             f"xmon_device_memory_used_bytes{{{H}}} / xmon_device_memory_total_bytes{{{H}}}",
             DEVICE, "percentunit"),
        heat("Device busy", "TensorCore duty cycle (TPU) or kernel utilisation (GPU).",
             f"xmon_device_duty_cycle_ratio{{{H}}} or xmon_device_utilization_ratio{{{H}}}",
             DEVICE, "percentunit"),
        heat("PJRT memory in use per job device", "Live bytes each job holds per device.",
             f"xmon_job_device_memory_in_use_bytes{{{H}}}",
             "{{instance}} {{job_name}} dev {{device}}", "bytes"),
        heat("Job HFU", "Hardware FLOPs utilisation of each job.",
             f"xmon_job_hardware_flops_utilization_ratio{{{H}}}", JOB, "percentunit"),
        heat("Job MFU", "Model FLOPs utilisation of each job that declares its model FLOPs.",
             f"xmon_job_model_flops_utilization_ratio{{{H}}}", JOB, "percentunit"),
        heat("Job device busy", "Share of the sampled time each job device ran the job's "
             "programs; low while stepping: host-bound.",
             f"xmon_job_device_busy_ratio{{{H}}}", "{{instance}} {{job_name}} dev {{device}}",
             "percentunit"),
        heat("Host CPU", "CPU use of each host, all cores together.",
             f"xmon_host_cpu_utilization_ratio{{{H}}}", "{{instance}}", "percentunit"),
        heat("Host memory used", "Host memory in use over capacity.",
             f"xmon_host_memory_used_bytes{{{H}}} / xmon_host_memory_total_bytes{{{H}}}",
             "{{instance}}", "percentunit"),
    ))  # fmt: skip


def _jobs() -> Row:
    return Row("Jobs", (
        Panel("Jobs", "Every attached job with its HFU, MFU (where declared), device busy, "
              "median step time and step rate; job_name links to the job view.",
              (q(f"xmon_job_info{{{H}}}"), q(f"xmon_job_hardware_flops_utilization_ratio{{{H}}}"),
               q(f"xmon_job_model_flops_utilization_ratio{{{H}}}"),
               q(f"avg by (instance, job_name, pid) (xmon_job_device_busy_ratio{{{H}}})"),
               q(f'xmon_job_step_duration_seconds{{{H}, quantile="0.5"}}'),
               q(f"xmon_job_steps_per_second{{{H}}}"),
               q(f"count by (instance, job_name, pid) (xmon_job_device_info{{{H}}})")),
              "table", width=24, links=(JOB_LINK,)),
        Panel("Steps per second", "Recent step rate of each job.",
              (q(f"xmon_job_steps_per_second{{{H}}}", JOB),), width=8),
        Panel("HFU", "Hardware FLOPs utilisation of each job (what XLA counts as executed).",
              (q(f"xmon_job_hardware_flops_utilization_ratio{{{H}}}", JOB),),
              unit="percentunit", width=8),
        Panel("MFU", "Model FLOPs utilisation of each job that declares its model FLOPs.",
              (q(f"xmon_job_model_flops_utilization_ratio{{{H}}}", JOB),),
              unit="percentunit", width=8),
        Panel("Device busy", "Mean share of the sampled time each job's devices ran its "
              "programs.",
              (q(f"avg by (instance, job_name, pid) (xmon_job_device_busy_ratio{{{H}}})", JOB),),
              unit="percentunit", width=12, max=1),
        Panel("Compiles per minute", "XLA compiles of each job; steady training compiles "
              "nothing.",
              (q(f"60 * rate(xmon_job_compiles_total{{{H}}}[$__rate_interval])", JOB),),
              width=12),
    ))  # fmt: skip


F = 'instance=~"$instance", job_key=~"$job_key"'
PROCESS = "{{job_key}} p{{process_index}} ({{worker}})"
# Each process's series labelled with its job key and process index (jobs of one process left
# out), as the fleet recording rules do.
JOIN = (
    "* on(instance, job_name, pid) group_left(job_key, process_index, worker)"
    f' xmon_job_fleet_info{{{F}, process_count!="1"}}'
)


def _processes() -> Row:
    return Row("Multi-process jobs", (
        Panel("Processes", "Every process of the multi-process (jax.distributed) jobs across "
              "hosts: its job key, index and worker, how long its devices wait for its host "
              "each step and how much longer than the job's fastest process (the straggler "
              "has the most), seconds since its last step, and where it waits while stalled "
              "(xmon fleet shows the same).",
              (q(f'xmon_job_fleet_info{{{F}, process_count!="1"}}'),
               q(f"xmon_job_step_host_seconds{{{H}}} {JOIN}"),
               q(f"xmon:job_process:step_host_excess_ratio{{{F}}}"),
               q(f"xmon_job_seconds_since_last_step{{{H}}} {JOIN}"),
               q(f"xmon_job_stalled{{{H}}} {JOIN}")),
              "table", width=24, links=(JOB_LINK,)),
        Panel("Host seconds per step", "Per step, how long each process's devices wait for "
              "its host (step time x (1 - device busy)); with collectives the straggler's "
              "line is on top.",
              (q(f"xmon:job_process:step_host_seconds{{{F}}}", PROCESS),), unit="s"),
        Panel("Straggler excess", "Each process's host seconds per step over its job's "
              "fastest process's, as a share of the step (XmonFleetStraggler fires on the "
              "largest when it exceeds the next largest by 25% of the step for 5 minutes).",
              (q(f"xmon:job_process:step_host_excess_ratio{{{F}}}", PROCESS),),
              unit="percentunit"),
        Panel("Collective seconds per step", "Device time in collectives per step, waiting "
              "for the other processes included: the processes that wait for a straggler "
              "have the most.",
              (q(f"xmon_job_step_device_collective_seconds{{{H}}} {JOIN}", PROCESS),),
              unit="s"),
        Panel("Cross-host skew", "(largest - smallest host seconds per step) / step time, "
              "per job: the share of each step lost to the least balanced host.",
              (q('xmon:job:step_host_skew_ratio{job_key=~"$job_key"}', "{{job_key}}"),),
              unit="percentunit"),
        Panel("Seconds since last step", "Per process; in a hang all rise together, and "
              "XmonFleetHang names the process waiting in its own code.",
              (q(f"xmon_job_seconds_since_last_step{{{H}}} {JOIN}", PROCESS),), unit="s",
              width=24),
    ))  # fmt: skip


BOARD = Board(
    uid="xmon-fleet",
    title="xmon / Fleet",
    description="All hosts running the xmon daemon: accelerators by host and slice, memory "
    "and utilisation heatmaps, the JAX jobs attached, and the processes of multi-process jobs "
    "across hosts (straggler, skew, hangs).",
    variables=(
        Variable("instance", "Host", "label_values(xmon_up, instance)"),
        Variable(
            "job_key",
            "Multi-process job",
            'label_values(xmon_job_fleet_info{instance=~"$instance"}, job_key)',
        ),
    ),  # fmt: skip
    rows=(_stats(), _hosts(), _heatmaps(), _jobs(), _processes()),
)

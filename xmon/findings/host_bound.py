"""Host-bound / input-bound: the device waits for the host during each step.

The execution ledger measures each device's busy ratio (the union of its op intervals over the
sampled time, ``JobDevice.busy_ratio``). A job that steps regularly while its busiest device is
idle most of the time spends each step waiting for Python, the input pipeline or dispatch. On
CPU the virtual devices share the host's cores, so the busiest device stands for the job.

A job whose threads wait for a CPU (an oversubscribed host: :func:`starved`) is not judged: its
device idles while its Python waits for a core, which looks the same in the busy ratio as
waiting for input, and the fix is elsewhere (fewer processes per host, or CPU limits).
"""

from __future__ import annotations

from xmon.model import Finding, Job, ProcessSample

BUSY_WARNING = 0.5  # busiest device busy less than this share of the time: a warning
BUSY_ERROR = 0.1
REGULAR_P90_OVER_P50 = 2.0  # steps this regular: the wait is every step, not a hiccup
STARVED_WAIT_THREADS = 0.25  # threads waiting for a CPU, on average, at least this many
STARVED_WAIT_PER_CPU = 0.5  # and at least this share of the cores the process runs on


MIN_LEDGER_SAMPLES = 2  # one short sample is too little to call a job host-bound


def starved(process: ProcessSample | None) -> bool:
    """Whether the job's threads wait for a CPU much of the time they want one: the host is
    oversubscribed, and the job's step times and idle devices say more of the host than of it.
    A job that sleeps (waits for input) is not runnable then, so it does not count as waiting."""
    if process is None or process.cpu_wait_threads is None:
        return False
    return waits_for_cpu(process.cpu_wait_threads, process.cpu_utilization_ratio or 0.0)


def waits_for_cpu(wait_threads: float, cpu_cores: float) -> bool:
    """:func:`starved` on numbers: threads waiting for a CPU, and cores the process used."""
    return wait_threads >= STARVED_WAIT_THREADS and wait_threads >= STARVED_WAIT_PER_CPU * cpu_cores


def busiest(job: Job) -> float | None:
    ratios = [d.busy_ratio for d in job.devices if d.busy_ratio is not None]
    return max(ratios) if ratios else None


def detect_host_bound(job: Job, since: float, cpu_starved: bool | None = None) -> Finding | None:
    """``cpu_starved``: whether the job waited for a CPU over the time the busy ratio covers
    (the tracker averages it); None judges the snapshot's own process sample."""
    busy = busiest(job)
    steps = job.steps
    p50, p90 = steps.p50_step_seconds, steps.p90_step_seconds
    if busy is None or busy >= BUSY_WARNING or not steps.steps_per_second or not p50:
        return None
    if job.ledger.samples < MIN_LEDGER_SAMPLES:
        return None
    if starved(job.process) if cpu_starved is None else cpu_starved:
        return None
    regular = p90 is None or p90 <= REGULAR_P90_OVER_P50 * p50
    if not regular:
        return None
    waiting = 1.0 - busy
    return Finding(
        kind="host_bound",
        severity="error" if busy < BUSY_ERROR else "warning",
        summary=f"the device waits for the host {100 * waiting:.0f} % of each step "
        f"(busiest device busy {100 * busy:.0f} %, step {p50 * 1e3:.3g} ms)",
        since=since,
        evidence=(
            ("busiest device busy ratio", f"{busy:.3f}"),
            *(
                (f"device {d.info.id} busy ratio", f"{d.busy_ratio:.3f}")
                for d in job.devices
                if d.busy_ratio is not None
            ),
            ("median step seconds", f"{p50:.4g}"),
            ("p90 step seconds", f"{p90:.4g}" if p90 is not None else "unknown"),
            ("ledger samples", str(job.ledger.samples)),
            *_process(job.process),
        ),
        fix=_fix(job.process),
        value=waiting,
    )


def _process(process: ProcessSample | None) -> tuple[tuple[str, str], ...]:
    if process is None or process.cpu_utilization_ratio is None:
        return ()
    return (("job process CPU (cores)", f"{process.cpu_utilization_ratio:.2f}"),)


def _fix(process: ProcessSample | None) -> str:
    busy_cpu = process is not None and (process.cpu_utilization_ratio or 0.0) >= 0.9
    where = (
        "The job's process keeps a core busy: profile the Python between steps (py-spy top)."
        if busy_cpu
        else "The job's process is mostly idle between steps: it waits for input (I/O, a "
        "queue, a sleep)."
    )
    return (
        f"{where} Prefetch batches on background threads (tf.data / grain prefetch, "
        "flax.jax_utils.prefetch_to_device), avoid host round trips inside the step "
        "(.item(), np.asarray, printing device values), and put more work in each jitted "
        "step (scan several micro-steps)."
    )

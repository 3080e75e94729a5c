"""Host-bound / input-bound: the device waits for the host during each step.

The execution ledger measures each device's busy ratio (the union of its op intervals over the
sampled time, ``JobDevice.busy_ratio``). A job that steps regularly while its busiest device is
idle most of the time spends each step waiting for Python, the input pipeline or dispatch. On
CPU the virtual devices share the host's cores, so the busiest device stands for the job.

A job whose threads wait for a CPU (:func:`starved`) is told apart by evidence: where other
processes keep the host's cores busy (an oversubscribed host), its device idles while its
Python waits for a core, the fix is elsewhere (fewer processes per host, CPU limits), and the
finding says so at ``info``; where the job's own threads fill the cores (a numpy or tokenising
loader beside XLA's threads), it is host-bound, and said to be. Either is a ``warning`` at
most, as the shipped alert: a job that sleeps between steps is slow, not broken.
"""

from __future__ import annotations

from xmon.model import Finding, HostSample, Job, ProcessSample

BUSY_WARNING = 0.5  # busiest device busy less than this share of the time: a warning
OTHERS_BUSY_CORES = 0.5  # cores other processes keep busy: at least this, the host is shared
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


def others_busy_cores(job: Job, host: HostSample | None) -> float | None:
    """Cores the host's other processes keep busy: the host's busy cores less the job's."""
    process = job.process
    if host is None or host.cpu_utilization_ratio is None or process is None:
        return None
    job_cores = process.cpu_utilization_ratio or 0.0
    return max(0.0, host.cpu_utilization_ratio * host.cpu_count - job_cores)


def on_shared_host(job: Job, cpu_starved: bool | None, host: HostSample | None) -> bool:
    """Whether the job's threads wait for a CPU that the host's other processes hold (an
    oversubscribed host): its devices then idle for the host's sake, not the job's.
    ``cpu_starved`` None judges the snapshot's own process sample."""
    waits = starved(job.process) if cpu_starved is None else cpu_starved
    others = others_busy_cores(job, host)
    return waits and (others is None or others >= OTHERS_BUSY_CORES)


def detect_host_bound(
    job: Job,
    since: float,
    cpu_starved: bool | None = None,
    host: HostSample | None = None,
) -> Finding | None:
    """``cpu_starved``: whether the job waited for a CPU over the time the busy ratio covers
    (the tracker averages it); None judges the snapshot's own process sample. ``host``: who
    else keeps the cores busy, to tell a shared host from a job that fills them itself."""
    busy = busiest(job)
    steps = job.steps
    p50, p90 = steps.p50_step_seconds, steps.p90_step_seconds
    if busy is None or busy >= BUSY_WARNING or not steps.steps_per_second or not p50:
        return None
    if job.ledger.samples < MIN_LEDGER_SAMPLES:
        return None
    regular = p90 is None or p90 <= REGULAR_P90_OVER_P50 * p50
    if not regular:
        return None
    waits = starved(job.process) if cpu_starved is None else cpu_starved
    others = others_busy_cores(job, host)
    shared = on_shared_host(job, waits, host)
    waiting = 1.0 - busy
    summary = (
        f"the device waits for the host {100 * waiting:.0f} % of each step "
        f"(busiest device busy {100 * busy:.0f} %, step {p50 * 1e3:.3g} ms)"
    )
    if shared:
        summary += ", and the job's threads wait for a CPU the host's other processes hold"
    elif waits:
        summary += ", its own threads filling the cores"
    return Finding(
        kind="host_bound",
        severity="info" if shared else "warning",
        summary=summary,
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
            *((("other processes' busy cores", f"{others:.2f}"),) if others is not None else ()),
        ),
        fix=SHARED_HOST_FIX if shared else _fix(job.process),
        value=waiting,
    )


SHARED_HOST_FIX = (
    "The host is oversubscribed: the job's threads wait for a core that other processes hold, "
    "so its device idles while its Python waits. Run fewer processes per host, give the job "
    "dedicated cores (taskset, a CPU limit on the others), or move the other work elsewhere."
)


def _process(process: ProcessSample | None) -> tuple[tuple[str, str], ...]:
    if process is None or process.cpu_utilization_ratio is None:
        return ()
    rows = [("job process CPU (cores)", f"{process.cpu_utilization_ratio:.2f}")]
    if process.cpu_wait_threads is not None:
        rows.append(("job threads waiting for a CPU", f"{process.cpu_wait_threads:.2f}"))
    return tuple(rows)


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

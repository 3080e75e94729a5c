"""Setup problems: numbers xmon cannot give for this job, and what to change so it can.

These are ``info`` findings (the job itself is fine) except a persistent compilation cache
that is asked often and never hits, which costs compile time on every start.
"""

from __future__ import annotations

from xmon.execution.xspace_bounds import SAMPLE_BOUNDS
from xmon.model import Finding, Job

NO_STEPS_AFTER_SECONDS = 60.0  # attached this long with programs and no step: say so
CACHE_MIN_REQUESTS = 20
# A program run once every k inferred steps, k whole (within this share) and at most
# CYCLE_MOST: the inferred step may be a micro-step of gradient accumulation
CYCLE_WHOLE_SHARE = 0.05
CYCLE_MOST = 64


def detect_setup(job: Job, age_seconds: float, since: float) -> list[Finding]:
    found = [
        _no_steps(job, age_seconds, since),
        _no_peak(job, since),
        _no_model_flops(job, since),
        _inferred_step_may_be_a_micro_step(job, since),
        _cache_never_hits(job, since),
        _capabilities_missing(job, since),
        _ledger_kept_busy(job, age_seconds, since),
        _ledger_pending(job, age_seconds, since),
        _samples_too_large(job, since),
    ]
    return [f for f in found if f is not None]


def _no_steps(job: Job, age_seconds: float, since: float) -> Finding | None:
    steps = job.steps
    if steps.steps_total or steps.inferred or age_seconds < NO_STEPS_AFTER_SECONDS:
        return None
    if not job.programs:
        return None  # nothing compiled yet: the job has not started its work
    asked = job.ledger.sample_seconds_asked
    if asked is not None:
        return Finding(
            kind="steps_not_inferred_yet",
            severity="info",
            summary="no step markers; the steps are longer than a sample, so samples grow until "
            "they hold whole periods of the busiest program to infer steps from",
            since=since,
            evidence=(
                ("sample length asked", f"{asked:.1f} s"),
                ("ledger samples", str(job.ledger.samples)),
                ("next sample", _next_sample(job)),
            ),
            fix="Nothing to do: steps, FLOPs per step and HFU come once a sample holds three "
            "starts of the busiest program (a job of 2 s steps is inferred about 7 minutes in "
            "at the default pace). Marking the step (`with xmon.step():`) gives them from the "
            "first sample.",
        )
    return Finding(
        kind="no_steps",
        severity="info",
        summary="no step markers, and no repeated program to infer steps from",
        since=since,
        evidence=(
            ("seconds attached", f"{age_seconds:.0f}"),
            ("programs compiled", str(len(job.programs))),
            ("ledger samples", str(job.ledger.samples)),
        ),
        fix="Mark the training step: `with xmon.step():` around it, `@xmon.step` on it, or "
        "jax.profiler.StepTraceAnnotation. Step time, MFU, triggers and the stall finding "
        "need steps.",
    )


def _next_sample(job: Job) -> str:
    due = job.agent.ledger_next_sample_at
    if due is None:
        return "recording now"
    return f"due in {max(0.0, due - job.last_report_at):.0f} s"


LEDGER_PENDING_AFTER_SECONDS = 30.0  # stepping this long with no ledger sample in: say when


def _ledger_pending(job: Job, age_seconds: float, since: float) -> Finding | None:
    """A marked job whose ledger has no sample yet: what stands on it is absent until the
    first one, which for long steps is spaced far out to keep the duty cycle."""
    if (
        not job.steps.steps_total
        or job.ledger.samples
        or age_seconds < LEDGER_PENDING_AFTER_SECONDS
    ):
        return None
    if job.agent.ledger_samples_busy_total or not _available(job, "ledger"):
        return None  # said by ledger_kept_busy and capability_unavailable
    if job.ledger.sample_seconds_most is not None:
        return None  # samples came, too large to read: said by samples_too_large
    return Finding(
        kind="ledger_pending",
        severity="info",
        summary="FLOPs per step, HFU, executions and device busy come from the execution "
        "ledger, whose first whole-step sample is not in yet",
        since=since,
        evidence=(
            ("next sample", _next_sample(job)),
            ("median step", f"{job.steps.p50_step_seconds or 0.0:.3g} s"),
            ("samples taken", str(job.agent.ledger_samples_total)),
        ),
        fix="Nothing to do: a sample records at least two step begins, and samples are spaced "
        "to keep the ledger at 1 % of the job's time (after a sample of r seconds the next "
        "waits 100 r), so with steps of 10 s the numbers come about 20 minutes apart.",
    )


def _samples_too_large(job: Job, since: float) -> Finding | None:
    """Samples refused for their size and none read since: the daemon asked for shorter ones
    (halving each time), and what stands on the ledger is absent until one is read."""
    ledger = job.ledger
    if ledger.sample_seconds_most is None or ledger.samples:
        return None
    return Finding(
        kind="samples_too_large",
        severity="info",
        summary="the job's execution samples held more events than the daemon reads; it asked "
        "for shorter ones, and FLOPs per step, HFU, executions and busy come once one is read",
        since=since,
        evidence=(
            ("longest sample asked", f"{ledger.sample_seconds_most:.3g} s"),
            ("samples dropped", str(ledger.samples_dropped_total)),
            ("next sample", _next_sample(job)),
        ),
        fix="Nothing to do while the samples shorten (each refusal halves them, down to 10 ms; "
        "marked samples still hold a whole step). If a single step holds more events than a "
        f"sample may ({SAMPLE_BOUNDS.max_events:,}: tens of thousands of tiny ops a step), "
        "FLOPs per step and HFU need a capture (`xmon capture`) instead.",
    )


def _available(job: Job, capability: str) -> bool:
    return all(c.available for c in job.capabilities if c.name == capability)


def _stepping(job: Job) -> bool:
    """Steps marked, or inferred (a job run with no code change): MFU and HFU are per step."""
    return bool(job.steps.steps_total or job.steps.inferred)


def _no_peak(job: Job, since: float) -> Finding | None:
    u = job.utilization
    if not _stepping(job) or u.peak_flops_per_second is not None:
        return None
    kinds = sorted({d.info.device_kind for d in job.devices}) or ["unknown"]
    return Finding(
        kind="no_peak",
        severity="info",
        summary=f"no peak FLOP/s known for {', '.join(kinds)}: MFU and HFU are absent",
        since=since,
        evidence=(("device kind", ", ".join(kinds)),),
        fix=f'Configure it: [peaks."{kinds[0]}"] flops_per_second = ... in the daemon config, '
        "or XMON_PEAKS.",
    )


def _no_model_flops(job: Job, since: float) -> Finding | None:
    steps = job.steps
    if not _stepping(job) or steps.model_flops_per_step is not None:
        return None
    if job.utilization.peak_flops_per_second is None:
        return None  # no_peak says more
    return Finding(
        kind="no_model_flops",
        severity="info",
        summary="MFU is absent: the job declares no model FLOPs per step"
        + (
            " (HFU is shown)"
            if job.utilization.hardware_flops_utilization_ratio is not None
            else ""
        ),
        since=since,
        evidence=(("hardware FLOPs per step", _num(steps.flops_per_step)),),
        fix="Declare them once: xmon.declare_model_flops(6 * n_params * tokens_per_step, "
        "tokens_per_step=...) or xmon.step(flops=...).",
    )


def _inferred_step_may_be_a_micro_step(job: Job, since: float) -> Finding | None:
    """Without markers a step is the busiest program's execution. A program run once every k
    of them, exactly, may be the optimizer's update after k accumulated micro-steps (then the
    job runs k times fewer steps, each k times the work) or an eval or logging program every
    k steps (then the steps are right): the samples cannot tell the two apart, so the job is
    told which, and how to say."""
    steps = job.steps
    if not steps.inferred or not steps.inferred_from:
        return None
    cycles = []
    for program in job.programs:
        per_step = program.executions_per_step  # the step's own program runs once a step
        if not per_step or not 0 < per_step < 1:
            continue
        every = 1.0 / per_step
        whole = round(every)
        if 2 <= whole <= CYCLE_MOST and abs(every - whole) <= CYCLE_WHOLE_SHARE * whole:
            cycles.append((whole, program.name))
    if not cycles:
        return None
    every, name = min(cycles)
    if name == steps.inferred_from:
        name = f"another program named {name}"
    return Finding(
        kind="inferred_step_ambiguous",
        severity="info",
        summary=f"steps are inferred from {steps.inferred_from}, and {name} runs once every "
        f"{every} of them: if it is the optimizer's update after {every} accumulated "
        f"micro-steps, the job runs {every} times fewer steps than shown, each {every} times "
        "the FLOPs",
        since=since,
        evidence=(
            ("steps inferred from", steps.inferred_from),
            (f"{name} executions per inferred step", f"{1 / every:.3g}"),
            ("inferred steps per second", _num(steps.steps_per_second)),
        ),
        fix="Mark the step around the micro-steps and the update (`with xmon.step():`, or "
        "jax.profiler.StepTraceAnnotation): steps, FLOPs per step and HFU then count whole "
        f"steps. Nothing to do if {name} is an eval or logging program run every {every} steps.",
    )


def _cache_never_hits(job: Job, since: float) -> Finding | None:
    c = job.compile
    if c.cache_requests_total < CACHE_MIN_REQUESTS or c.cache_hits_total:
        return None
    return Finding(
        kind="cache_never_hits",
        severity="info",
        summary=f"the persistent compilation cache was asked {c.cache_requests_total} times "
        "and never hit",
        since=since,
        evidence=(
            ("cache requests", str(c.cache_requests_total)),
            ("cache hits", "0"),
            ("cache misses", str(c.cache_misses_total)),
        ),
        fix="Normal on a first run. On later runs: programs compiled faster than "
        "jax_persistent_cache_min_compile_time_secs (1 s) are never written; lower it, check "
        "that jax_compilation_cache_dir is the same shared path on every run and host, and "
        "that the jax version and flags do not change between runs.",
    )


# Samples skipped for a busy profiler, none taken in the ledger's window: a trace of a few
# steps ends within one sample period; three (a minute at the default duty) with none taken is the
# job's own trace kept running. Counted in the job's samples, not seconds, so the judgement
# follows the configured duty.
LEDGER_BUSY_SKIPS = 3


def _ledger_kept_busy(job: Job, age_seconds: float, since: float) -> Finding | None:
    """The job traces itself (jax.profiler.start_trace for its whole run): the profiler is
    one per process, so the ledger never samples and what stands on it is absent."""
    a = job.agent
    if job.ledger.samples or a.ledger_samples_busy_total < LEDGER_BUSY_SKIPS:
        return None
    return Finding(
        kind="ledger_kept_busy",
        severity="warning",
        summary="the execution ledger cannot sample: the profiler is busy, most likely with the "
        "job's own trace; FLOPs per step, HFU, executions and device busy are absent",
        since=since,
        evidence=(
            ("samples skipped, profiler busy", str(a.ledger_samples_busy_total)),
            ("samples taken", str(a.ledger_samples_total)),
            ("seconds attached", f"{age_seconds:.0f}"),
        ),
        fix="A process has one profiler. Trace a few steps, not the whole run "
        "(`with jax.profiler.trace(dir):` around them, or `xmon capture --job NAME` on demand); "
        "the ledger samples again once the trace stops.",
        value=float(a.ledger_samples_busy_total),
    )


# What a user loses with each capability missing, in the finding's words.
_LOST = {
    "ledger": "executions per program, FLOPs per step, HFU, device busy ratio, inferred steps",
    "catalogue": "the program catalogue (xmon programs) and every number from it",
    "loop_cost": "loop-aware FLOPs (loop bodies are counted once: FLOPs are a lower bound)",
    "recompile_cause": "which argument changed in the recompile finding",
    "stall_stacks": "thread stacks in the stall finding",
    "memory_readings": "device memory on CPU",
    "job_identity": "the job key of a multi-process job (fleet judgements)",
}


def _capabilities_missing(job: Job, since: float) -> Finding | None:
    missing = [c for c in job.capabilities if not c.available]
    if not missing:
        return None
    names = ", ".join(c.name for c in missing)
    return Finding(
        kind="capability_unavailable",
        severity="warning",
        summary=f"xmon cannot measure everything on jax {job.jax_version or '?'}: {names} "
        "unavailable",
        since=since,
        evidence=tuple((c.name, c.unavailable_reason) for c in missing),
        fix="Missing: "
        + "; ".join(_LOST.get(c.name, c.name) for c in missing)
        + ". xmon supports jax 0.10 to 0.12 on Python 3.11 to 3.13: use one of those, or an "
        "xmon release that supports this jax. The reason says what this jax lacks.",
        subject=names,
        value=float(len(missing)),
    )


def _num(value: float | None) -> str:
    return f"{value:.4g}" if value is not None else "unknown"

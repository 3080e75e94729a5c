"""Low goodput: the job's productive share of its wall time is below the floor, and one badput
bucket holds much of the rest (xmon.goodput). Named with the bucket and the fix for it.

Judged over the process's life once it has run ``MIN_WALL_SECONDS`` (start-up and the first
compiles are most of a young job's time, rightly, and say nothing yet). The floor is the
daemon's ``goodput_floor`` (the alert XmonJobLowGoodput reads the same one from /metrics).
"""

from __future__ import annotations

from xmon.findings.host_bound import SHARED_HOST_FIX
from xmon.model import Finding, Goodput

DEFAULT_FLOOR = 0.5
MIN_WALL_SECONDS = 300.0
MIN_BUCKET_SHARE = 0.1  # the bucket named holds at least this share of the wall time

# What each badput bucket is, and what to do about it.
FIXES: dict[str, tuple[str, str]] = {
    "host_wait": (
        "the devices waited for the host inside steps",
        "feed the devices ahead: prefetch batches (a background loader, jax.device_put ahead "
        "of the step), move input work off the step's thread; the host_bound finding has the "
        "evidence",
    ),
    "startup": (
        "start-up before the first step",
        "initialise on device in one jitted function rather than eagerly per parameter, cache "
        "the prepared dataset, import less at start",
    ),
    "compile": (
        "compiling",
        "turn on jax's persistent compilation cache (jax.config.update("
        "'jax_compilation_cache_dir', PATH)), and stop recompiles (the recompile finding names "
        "the function and the argument that changes)",
    ),
    "checkpoint_save": (
        "the training thread blocked saving checkpoints",
        "save asynchronously (Orbax's CheckpointManager with enable_async_checkpointing, or "
        "AsyncCheckpointer), or save less often",
    ),
    "checkpoint_restore": (
        "restoring checkpoints",
        "restore once per process start, from storage near the job; restore only the state "
        "the job needs",
    ),
    "stall": (
        "stalls: steps stopped for far longer than a step",
        "look at where the job waits when it stalls (the stall finding's stacks): a data "
        "loader, a lock, a collective waiting for another process",
    ),
    "idle": (
        "idle after the last step",
        "the job holds its devices after its last step: end the process when training ends",
    ),
    "unattributed": (
        "time xmon could not attribute (before a late attach)",
        "attach at the start: `xmon run -- python train.py`, or xmon.attach() before jax runs",
    ),
    "steps_unmeasured": (
        "stepping before the first device busy reading",
        "wait for the execution ledger's first sample (xmon_agent_ledger_samples_total)",
    ),
}


def detect_low_goodput(
    goodput: Goodput | None, since: float, floor: float = DEFAULT_FLOOR, shared_host: bool = False
) -> Finding | None:
    """``shared_host``: the job's threads wait for a CPU other processes hold
    (xmon.findings.host_bound.on_shared_host). Host wait is then the host's doing, not the
    job's: said at ``info``, with the host's fix, as host_bound says it."""
    if goodput is None or goodput.ratio is None or goodput.wall_seconds < MIN_WALL_SECONDS:
        return None
    if goodput.ratio >= floor or goodput.biggest_badput is None:
        return None
    bucket = goodput.biggest_badput
    seconds = goodput.bucket(bucket)
    share = seconds / goodput.wall_seconds
    if share < MIN_BUCKET_SHARE:
        return None  # badput spread thin: no one fix to give
    what, fix = FIXES.get(bucket, (bucket, ""))
    host_held = shared_host and bucket == "host_wait"
    if host_held:
        fix = SHARED_HOST_FIX
    evidence = [("goodput over the process's life", f"{goodput.ratio:.0%}")]
    if goodput.ratio_5m is not None:
        evidence.append(("goodput over the last 5 minutes", f"{goodput.ratio_5m:.0%}"))
    evidence.append(("wall time", f"{goodput.wall_seconds:.0f} s"))
    evidence.extend(
        (f"{name} seconds", f"{value:.1f}") for name, value in goodput.seconds if value > 0
    )
    return Finding(
        kind="low_goodput",
        severity="info" if host_held else "warning",
        summary=f"goodput {goodput.ratio:.0%} (floor {floor:.0%}): {what} took "
        f"{seconds:.0f} s, {share:.0%} of the wall time"
        + (", while the job's threads waited for a CPU other processes hold" if host_held else ""),
        since=since,
        subject=bucket,
        value=goodput.ratio,
        evidence=tuple(evidence),
        fix=fix,
    )

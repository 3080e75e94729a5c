"""Work per second and per step from the execution ledger: pure functions, no I/O, no clocks.

A job's hardware FLOP/s is the sum over its programs of executions per second × loop-aware
FLOPs of one execution × devices it runs on. Per-step figures divide by steps per second, from
the job's step markers, or, without markers, from the executions of the program that took the
most device time (the step XProf infers without step annotations). So a train step compiled by
a warm-up call or ahead of time, two programs sharing a name, a micro-step run k times per step
and an eval program run every N steps all count as often as they run.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xmon.execution.branches import mixed_cost
from xmon.execution.ledger import LedgerRates
from xmon.model import Program, StepBreakdown

LEDGER = "ledger"


def flops_per_token(
    n_params: float, n_layers: int = 0, context: int = 0, d_model: int = 0
) -> float:
    """Model FLOPs per token of a dense decoder's training step: 6·N (forward 2·N, backward
    4·N; Kaplan et al. 2020) plus 12·L·T·d for attention when layers, context length and width
    are given (PaLM, appendix B). N counts the non-embedding parameters."""
    return 6.0 * n_params + 12.0 * n_layers * context * d_model


def unclaimed_ids(programs: Sequence[Program], rates: LedgerRates) -> dict[str, tuple[int, ...]]:
    """Sample program ids no program of the job claims, by the fingerprint of the program they
    stand for: the newest of the job's programs with the name the sample gives the id. The
    profiler's program id on GPU can differ from the module ids the agent read from the
    executable; the kernels still name their program. A name that several unclaimed ids share
    (two programs called ``jit_step``, whose ids the catalogue does not hold yet) is ambiguous:
    those ids are left uncounted rather than all given to one program, unless the samples also
    show ids the catalogue holds under that name. Then the ids match on this platform, and the
    unclaimed ones are older executables of that name past the ids a program keeps (a function
    compiled again every step): they stand for its newest program, whose cost is the one known."""
    claimed = {i for p in programs for i in p.program_ids}
    seen_claimed = {name for i, name in rates.program_names.items() if i in claimed}
    newest: dict[str, Program] = {}
    for program in programs:
        known = newest.get(program.name)
        if known is None or (program.compiled_at or 0.0) >= (known.compiled_at or 0.0):
            newest[program.name] = program
    by_name: defaultdict[str, list[int]] = defaultdict(list)
    for sample_id, name in rates.program_names.items():
        if sample_id not in claimed:
            by_name[name].append(sample_id)
    found: dict[str, tuple[int, ...]] = {}
    for name, ids in by_name.items():
        stands_for = newest.get(name)
        if stands_for is not None and (len(ids) == 1 or name in seen_claimed):
            found[stands_for.fingerprint] = tuple(ids)
    return found


def with_ledger(
    program: Program,
    rates: LedgerRates,
    steps_per_second: float | None,
    extra_ids: Sequence[int] = (),
) -> Program:
    """The program with its executions in the ledger: the sum over its module ids (a program
    recompiled while sampled ran under both) and ``extra_ids`` (see :func:`unclaimed_ids`).
    Unchanged without ids or before any sample.

    Executions per second are executions per step times the job's step rate where one is given
    (step markers: measured outside the samples, so unslowed by the profiler), else the rate
    the samples saw."""
    ids = set(program.program_ids) | set(extra_ids)
    if not ids or rates.samples == 0:
        return program
    per_step_known = bool(rates.executions_per_step)  # then a program not in it ran 0 times
    per_step_value = sum(rates.executions_per_step.get(i, 0.0) for i in ids)
    if steps_per_second is not None and per_step_known:
        per_second = per_step_value * steps_per_second
    else:
        per_second = sum(rates.executions_per_second.get(i, 0.0) for i in ids)
    device_times = [
        (rates.device_seconds_per_execution[i], rates.executions.get(i, 0))
        for i in ids
        if i in rates.device_seconds_per_execution
    ]
    counted = dataclasses.replace(
        program,
        executions=sum(rates.executions.get(i, 0) for i in ids),
        executions_per_second=per_second,
        executions_per_step=per_step_value if per_step_known else None,
        executions_window_seconds=rates.sampled_seconds,
        executions_counted_at=rates.last_sample_at,
        executions_source=LEDGER,
        device_seconds_per_execution=_weighted_mean(device_times),
    )
    return with_branch_mix(counted, rates, ids)


def with_branch_mix(program: Program, rates: LedgerRates, ids: Iterable[int]) -> Program:
    """The program with its FLOPs and bytes counting each of its conditionals' branches as
    often as the samples saw them run (xmon.execution.branches), no longer an upper bound.
    Unchanged unless every conditional that made it one ran in the samples, under one of its
    module ``ids`` (the one that ran the most where several did)."""
    if not program.conditionals or not program.flops_upper_bound:
        return program
    ran = sorted(ids, key=lambda i: rates.executions.get(i, 0), reverse=True)
    flops = moved = 0.0
    for conditional in program.conditionals:
        mix = next((m for i in ran if (m := rates.branch_mixes.get((i, conditional.name)))), None)
        if mix is None:
            return program
        added_flops, added_bytes = mixed_cost(conditional, mix)
        flops += added_flops
        moved += added_bytes
    return dataclasses.replace(
        program,
        flops=None if program.flops is None else max(0.0, program.flops + flops),
        bytes_accessed=(
            None if program.bytes_accessed is None else max(0.0, program.bytes_accessed + moved)
        ),
        flops_upper_bound=False,
        flops_branch_mix=True,
    )


def _weighted_mean(pairs: Sequence[tuple[float, int]]) -> float | None:
    if not pairs:
        return None
    weight = sum(max(1, n) for _, n in pairs)
    return sum(value * max(1, n) for value, n in pairs) / weight


@dataclass(frozen=True)
class ExecutedWork:
    """What a job's programs did per step over the ledger's window, all devices together."""

    flops_per_step: float | None = None
    bytes_per_step: float | None = None
    lower_bound: bool = False  # a program that ran has FLOPs that are a lower bound, or none
    upper_bound: bool = False  # a program that ran counts a conditional's costliest branch


def executed_work(programs: Iterable[Program]) -> ExecutedWork:
    """Sum of executions per step × per-device cost × devices over the programs that ran."""
    ran = [p for p in programs if p.executions_source == LEDGER and p.executions_per_step]
    if not ran:
        return ExecutedWork()
    flops = bytes_ = 0.0
    lower_bound = upper_bound = False
    for program in ran:
        per_step = (program.executions_per_step or 0.0) * max(1, program.num_devices)
        if program.flops is None:
            lower_bound = True
        else:
            flops += per_step * program.flops
            lower_bound = lower_bound or program.flops_lower_bound
            upper_bound = upper_bound or program.flops_upper_bound
        if program.bytes_accessed is not None:
            bytes_ += per_step * program.bytes_accessed
    return ExecutedWork(flops, bytes_, lower_bound, upper_bound)


def step_program(programs: Iterable[Program]) -> Program | None:
    """The program that stands for a step when the job marks none: the one that used the most
    device time in the ledger (executions/s × device time per execution × devices)."""
    best, best_time = None, 0.0
    for program in programs:
        rate = program.executions_per_second
        seconds = program.device_seconds_per_execution
        if program.executions_source != LEDGER or not rate or seconds is None:
            continue
        device_time = rate * seconds * max(1, program.num_devices)
        if device_time > best_time:
            best, best_time = program, device_time
    return best


def busy_by_device(
    busy_ratio: Mapping[int, float], device_ids: Sequence[int], ordinals: Mapping[int, int]
) -> dict[int, float]:
    """Busy ratio per job device id. The profiler names devices by their local ordinal:
    ``ordinals`` maps device id to it where known (PJRT's local_hardware_id), else a device's
    position among the job's devices stands in. The CPU backend names its devices by their
    id instead (2048 for process 1's device in a multi-process job, whose local ordinal is 0):
    the id is tried when the ordinal is not there. Devices the samples saw idle get 0."""
    result = {}
    for position, device_id in enumerate(sorted(device_ids)):
        ordinal = ordinals.get(device_id, position)
        result[device_id] = busy_ratio.get(ordinal, busy_ratio.get(device_id, 0.0))
    return result


STEP_DEVICE_SHARE = 0.1  # of the busiest device's busy ratio: below, a device is not the step's


def step_devices(busy: Mapping[int, float]) -> list[int]:
    """The devices a step uses: those busy at least ``STEP_DEVICE_SHARE`` of the busiest."""
    busiest = max(busy.values(), default=0.0)
    return [d for d, ratio in busy.items() if ratio >= STEP_DEVICE_SHARE * busiest] or list(busy)


def step_busy_ratio(busy: Mapping[int, float]) -> float | None:
    """The mean busy ratio of the devices a step uses (None without a reading): the share of
    stepping time the devices computed (xmon.goodput.split)."""
    if not busy:
        return None
    return min(1.0, _mean_over(busy, step_devices(busy)))


def _mean_over(values: Mapping[int, float], devices: Sequence[int]) -> float:
    """The mean of per-device ``values`` over ``devices`` (a device without one counts 0)."""
    return sum(values.get(d, 0.0) for d in devices) / len(devices)


def marked_step_busy_share(
    device_seconds_per_step: Mapping[int, float], steps: int, stepping_seconds: float
) -> float | None:
    """The share of a marked job's stepping its devices computed: the busy seconds per step
    of the devices the step uses (xmon.execution.ledger, measured in samples), times the
    steps it marked, over the seconds those steps took (at most 1). None without a reading
    or steps."""
    if not device_seconds_per_step or steps <= 0 or stepping_seconds <= 0:
        return None
    per_step = _mean_over(device_seconds_per_step, step_devices(device_seconds_per_step))
    return min(1.0, per_step * steps / stepping_seconds)


def step_breakdown(
    busy: Mapping[int, float], collective: Mapping[int, float], steps_per_second: float | None
) -> StepBreakdown | None:
    """Where a step's time goes on a process's devices: ``busy`` and ``collective`` are each
    device's busy and collective ratios (xmon.execution.ledger), averaged over the devices the
    step uses: those busy at least ``STEP_DEVICE_SHARE`` of the busiest one's. A step on one of
    four devices averaged with three idle ones showed compute -80 %, host time +12 %. None
    without a step rate or a sample."""
    if not steps_per_second or steps_per_second <= 0 or not busy:
        return None
    step = 1.0 / steps_per_second
    used = step_devices(busy)
    mean_busy = min(1.0, _mean_over(busy, used))
    mean_collective = min(mean_busy, _mean_over(collective, used))
    return StepBreakdown(
        step_seconds=step,
        compute_seconds=(mean_busy - mean_collective) * step,
        collective_seconds=mean_collective * step,
        host_seconds=(1.0 - mean_busy) * step,
    )

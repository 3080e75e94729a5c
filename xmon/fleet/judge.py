"""Judging the processes of one multi-process job: pure functions, no I/O, no clocks.

The same rules as the shipped Prometheus rules (dashboards/alerts.py builds their PromQL from
the constants here), so ``xmon fleet`` and an alert never disagree:

* **Straggler.** With collectives, every process's step takes as long as the slowest one's, so
  step times cannot tell processes apart. Host time per step can (xmon_job_step_host_seconds:
  how long the process's devices wait for their host): the straggler's devices wait for its
  host, the others' wait in collectives for the straggler. The process with the longest host
  time is the straggler when it exceeds the next longest by more than ``STRAGGLER_MIN_RATIO``
  of the step (and ``STRAGGLER_MIN_SECONDS``): that excess is what it costs every step (the
  job without it would wait for the next slowest host). Measured against the median, two
  processes showed half the gap (the median is their midpoint). A straggler already named
  stays named until its excess falls under ``STRAGGLER_KEEP_SHARE`` of those thresholds, so a
  lag near the threshold does not flicker in and out. Processes are ranked by host time over
  the job's fastest process's.
* **Skew.** (largest - smallest host time per step) / step time: the share of each step the
  job loses to its least balanced host.
* **Hang.** When two or more processes of a job are stalled (the agent's rule: no step for
  max(10 x median step, 20 s)), the one that stopped first is the one whose step thread waits
  in its own host code while the others wait inside jax for it. Where every stalled process
  waits inside jax, the one that began the fewest steps is named (it never reached the step
  the others wait in).
* **Dropout.** A process index of the job (0 .. process_count - 1) that no daemon reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

STRAGGLER_MIN_RATIO = 0.25  # of the job's step time: below, the ranking shows it, nothing marks it
STRAGGLER_MIN_SECONDS = 0.005  # per step: below this a host's lag is noise on any machine
STRAGGLER_KEEP_SHARE = 0.8  # of both thresholds: a named straggler stays named above them
STALLED_FOR_A_HANG = 2  # processes of one job stalled at once


@dataclass(frozen=True)
class ProcessReading:
    """What the fleet knows of one process (from Prometheus or a snapshot)."""

    job_key: str
    process_index: int
    process_count: int
    instance: str  # the daemon that reports it (host:port)
    worker: str
    job_name: str
    pid: int
    steps_total: float | None = None
    steps_begun: float | None = None
    steps_per_second: float | None = None
    seconds_since_last_step: float | None = None
    host_seconds: float | None = None  # per step
    compute_seconds: float | None = None
    collective_seconds: float | None = None
    stalled_waits_in: str | None = None  # jax | host | unknown while stalled
    goodput_ratio: float | None = None  # productive share of the last 5 minutes (xmon.goodput)


@dataclass(frozen=True)
class Straggler:
    process_index: int
    excess_seconds: float  # host seconds per step over the next slowest process's
    excess_ratio: float  # of the job's step time


@dataclass(frozen=True)
class FleetVerdict:
    job_key: str
    process_count: int
    processes: tuple[ProcessReading, ...]  # by process index
    step_seconds: float | None
    straggler: Straggler | None
    excess_ratio: dict[int, float]  # process index -> host excess over the fastest / step
    skew_ratio: float | None
    hang_first: tuple[int, ...]  # process indexes named as having stopped first
    stalled: tuple[int, ...]
    missing: tuple[int, ...]  # the first MISSING_LISTED process indexes that no daemon reports
    missing_count: int = 0  # all of them
    # The job's goodput: its least productive process's (every process of a synchronous job
    # waits for the slowest); None before any process has a reading
    goodput_ratio: float | None = None


MISSING_LISTED = 64  # missing processes named one by one; the rest are counted


def group_by_job(readings: Iterable[ProcessReading]) -> dict[str, list[ProcessReading]]:
    jobs: dict[str, list[ProcessReading]] = {}
    for reading in readings:
        jobs.setdefault(reading.job_key, []).append(reading)
    return jobs


def judge(
    job_key: str, readings: Sequence[ProcessReading], named_before: int | None = None
) -> FleetVerdict:
    """``named_before``: the process named the job's straggler by the last judgement (a view
    that watches), which stays named while it lags past the lower thresholds."""
    processes = tuple(sorted(readings, key=lambda r: (r.process_index, r.instance)))
    count = max((r.process_count for r in processes), default=0)
    step = job_step_seconds(processes)
    excess = host_excess_ratios(processes, step)
    return FleetVerdict(
        job_key=job_key,
        process_count=count,
        processes=processes,
        step_seconds=step,
        straggler=straggler(processes, step, named_before),
        excess_ratio=excess,
        skew_ratio=skew_ratio(processes, step),
        hang_first=hang_first(processes),
        stalled=tuple(r.process_index for r in processes if r.stalled_waits_in is not None),
        missing=first_missing(count, processes),
        missing_count=count
        - len({r.process_index for r in processes if 0 <= r.process_index < count}),
        goodput_ratio=min(
            (r.goodput_ratio for r in processes if r.goodput_ratio is not None), default=None
        ),
    )


def first_missing(count: int, processes: Sequence[ProcessReading]) -> tuple[int, ...]:
    """The first ``MISSING_LISTED`` indexes below ``count`` no process reports. The count is
    what one agent says (``process_count=2147483647`` made a set of every index: 2.3 GB), so
    the work is bounded by the processes reporting, never by the count."""
    reported = {r.process_index for r in processes}
    missing: list[int] = []
    index = 0
    while index < count and len(missing) < MISSING_LISTED:
        if index not in reported:
            missing.append(index)
        index += 1
    return tuple(missing)


def job_step_seconds(processes: Sequence[ProcessReading]) -> float | None:
    """The job's step time: its slowest process's (they are the same with collectives)."""
    rates = [r.steps_per_second for r in processes if r.steps_per_second]
    return 1.0 / min(rates) if rates else None


def _host_times(processes: Sequence[ProcessReading]) -> dict[int, float]:
    return {r.process_index: r.host_seconds for r in processes if r.host_seconds is not None}


def host_excess_ratios(
    processes: Sequence[ProcessReading], step_seconds: float | None
) -> dict[int, float]:
    """Each process's host seconds per step over the job's fastest process's, as a share of
    the step: the ranking (the straggler first)."""
    hosts = _host_times(processes)
    if len(hosts) < 2 or not step_seconds:
        return {}
    fastest = min(hosts.values())
    return {index: (seconds - fastest) / step_seconds for index, seconds in hosts.items()}


def straggler(
    processes: Sequence[ProcessReading],
    step_seconds: float | None,
    named_before: int | None = None,
) -> Straggler | None:
    """The process whose host time exceeds the next longest by both thresholds (by their
    ``STRAGGLER_KEEP_SHARE`` if it was ``named_before``), with that excess."""
    hosts = _host_times(processes)
    if len(hosts) < 2 or not step_seconds:
        return None
    ranked = sorted(hosts.items(), key=lambda item: (-item[1], item[0]))
    (index, seconds), (_, next_slowest) = ranked[0], ranked[1]
    excess = seconds - next_slowest
    share = STRAGGLER_KEEP_SHARE if index == named_before else 1.0
    if excess <= share * STRAGGLER_MIN_SECONDS or excess / step_seconds <= (
        share * STRAGGLER_MIN_RATIO
    ):
        return None
    return Straggler(index, excess, excess / step_seconds)


def skew_ratio(processes: Sequence[ProcessReading], step_seconds: float | None) -> float | None:
    hosts = list(_host_times(processes).values())
    if len(hosts) < 2 or not step_seconds:
        return None
    return (max(hosts) - min(hosts)) / step_seconds


def hang_first(processes: Sequence[ProcessReading]) -> tuple[int, ...]:
    stalled = [r for r in processes if r.stalled_waits_in is not None]
    if len(stalled) < STALLED_FOR_A_HANG:
        return ()
    in_host = tuple(r.process_index for r in stalled if r.stalled_waits_in == "host")
    if in_host:
        return in_host
    begun = {r.process_index: r.steps_begun for r in stalled if r.steps_begun is not None}
    if len(set(begun.values())) < 2:
        return ()
    fewest = min(begun.values())
    return tuple(index for index, n in begun.items() if n == fewest)

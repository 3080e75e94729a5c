"""The execution ledger: a job's recent execution samples (:mod:`xmon.execution.samples`) and
the rates they give: executions per second and per step of each program, device time per
execution, each device's busy and collective ratios.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xmon.execution.branches import BranchMix, BranchTally, branch_mix
from xmon.execution.samples import SampleReading
from xmon.wire.protocol import SAMPLE_MAX_BYTES, SAMPLE_MIN_SECONDS, SAMPLE_RECORD_MAX_SECONDS

DEFAULT_WINDOW_SAMPLES = 6
# A sample of a job without markers holds whole periods of its busiest program from three
# starts on (samples.MIN_CORE_EXECUTIONS); asked for 3.5 periods, one started late still does.
PERIODS_WANTED = 3.5
LENGTHEN_UNKNOWN = 4.0  # with under two starts seen, the next sample is this much longer
# A program rarer than the steps (an eval every N steps) is counted exactly over its own whole
# periods (samples.rarer_periods), which need two of its starts in a sample: samples are asked
# to last this many of its periods, for programs that used at least RARER_DEVICE_SHARE of the
# device time (a count off by one of a smaller one moves the step's work by less). At most
# RARER_SAMPLE_MAX_SECONDS (the duty cycle stays: samples of 5 s come every 500 s at 1 %), and
# no longer than the job's samples take to reach RARER_SAMPLE_BYTES: an eighth of the largest
# sample the daemon reads, which keeps a job of many small ops (16 bytes an event or more)
# under the sample's event bound as well.
RARER_PERIODS_WANTED = 2.5
RARER_SAMPLE_MAX_SECONDS = 5.0
RARER_SAMPLE_BYTES = SAMPLE_MAX_BYTES // 8
RARER_DEVICE_SHARE = 0.02
# A sample refused for its size (more events or bytes than the daemon reads): the next ones
# are asked to record at most this share of it, down to the shortest sample an agent takes.
SHORTEN_TOO_LARGE = 0.5


@dataclass(frozen=True)
class LedgerRates:
    """A job's rates over its recent samples; empty mappings before any sample."""

    samples: int
    sampled_seconds: float
    window_seconds: float
    last_sample_at: float | None
    executions_per_second: Mapping[int, float]  # program id -> executions / core seconds
    executions_per_step: Mapping[int, float]  # program id -> executions / steps in the cores
    executions: Mapping[int, int]  # program id -> executions counted
    steps_per_second: float | None  # as the samples saw it (the profiler slows a job a little)
    device_seconds_per_execution: Mapping[int, float]  # program id -> mean on one device
    busy_ratio: Mapping[int, float]  # device ordinal -> busy seconds / sampled seconds
    # device ordinal -> collective seconds / sampled seconds (within busy_ratio)
    collective_ratio: Mapping[int, float] = field(default_factory=dict)
    # The same two ratios as the median over samples of each sample's own: one sample taken
    # while the process was descheduled (a loaded host) does not move them. What a step's
    # breakdown and the fleet's straggler judgement read.
    busy_ratio_median: Mapping[int, float] = field(default_factory=dict)
    collective_ratio_median: Mapping[int, float] = field(default_factory=dict)
    program_names: Mapping[int, str] = field(default_factory=dict)  # where samples name them
    # (program id, conditional) -> how its branches ran (xmon.execution.branches)
    branch_mixes: Mapping[tuple[int, str], BranchMix] = field(default_factory=dict)


class JobLedger:
    """A job's most recent samples (bounded), and the rates they give."""

    def __init__(self, window_samples: int = DEFAULT_WINDOW_SAMPLES) -> None:
        self._samples: deque[SampleReading] = deque(maxlen=max(1, window_samples))
        self.parse_errors_total = 0
        self.samples_dropped_total = 0
        self.reading = False  # a sample of this job is being parsed
        self._rates: LedgerRates | None = None
        # (program id, wall clock at the sample's end) of the program last seen starting, kept
        # past the window: a stalled job's samples show nothing running
        self.last_seen: tuple[int, float] | None = None
        # How long the job's samples should record, where they are too short to hold whole
        # periods of its busiest program (no markers, long steps) or two runs of a rarer one;
        # None: nothing asked yet, 0: as configured again.
        self.sample_seconds_wanted: float | None = None
        # The longest its samples should record (beyond whole steps), where they were refused
        # for their size: each refusal halves the length that was refused; None: no limit.
        self.sample_seconds_most: float | None = None
        # Over the job's life, the samples taken through its stepping (xmon.goodput.split):
        # each device's busy seconds in them, and their seconds
        self._stepping_busy: defaultdict[int, float] = defaultdict(float)
        self._stepping_seconds = 0.0
        self._stepping_marked = False  # those samples saw marked steps
        # Over the job's life, the marked samples' cores: each device's busy seconds in them,
        # and the steps they held
        self._core_busy: defaultdict[int, float] = defaultdict(float)
        self._core_steps = 0.0

    def add(self, reading: SampleReading) -> None:
        if reading.steps_marked and not all(r.steps_marked for r in self._samples):
            # The job's first marked steps: samples from before them (imports, initialisation,
            # the first compiles) say nothing of its steps, and would make a busy job look idle
            self._samples = deque(
                (r for r in self._samples if r.steps_marked), maxlen=self._samples.maxlen
            )
        self._samples.append(reading)
        self._rates = None
        if reading.steps_marked and not self._stepping_marked:
            # as the window above: the programs run before the first marked step (initialising,
            # warming up) are not the steps, whose busy share this is
            self._stepping_busy.clear()
            self._stepping_seconds = 0.0
            self._stepping_marked = True
            self._core_busy.clear()
            self._core_steps = 0.0
            if self.sample_seconds_wanted:
                # asked of its start-up's programs before it marked steps: marked samples hold
                # whole steps, and the length asked for those programs is no longer wanted
                self.sample_seconds_wanted = 0.0
        if stepped_through(reading):
            for device, seconds in reading.device_busy_seconds.items():
                self._stepping_busy[device] += seconds
            self._stepping_seconds += reading.duration_seconds
        core_busy, core_steps = reading.core_busy_seconds, reading.steps_in_core
        if holds_marked_steps(reading) and core_busy is not None and core_steps is not None:
            for device, seconds in core_busy.items():
                self._core_busy[device] += seconds
            self._core_steps += core_steps
        for wanted in (unmarked_sample_seconds(reading), rarer_sample_seconds(self._samples)):
            if wanted is not None and wanted > (self.sample_seconds_wanted or 0.0):
                self.sample_seconds_wanted = wanted
        if reading.last_started is not None:
            self.last_seen = (reading.last_started, reading.started_at + reading.duration_seconds)

    def refused_as_too_large(self, duration_seconds: float) -> None:
        """A sample of ``duration_seconds`` held more than the daemon reads (events or bytes):
        ask for samples of half that length (its read stopped at the bound, so by how much it
        was past it is not known), never longer than asked before, at least
        SAMPLE_MIN_SECONDS."""
        if not math.isfinite(duration_seconds) or duration_seconds <= 0:
            return
        shorter = max(SAMPLE_MIN_SECONDS, SHORTEN_TOO_LARGE * duration_seconds)
        self.sample_seconds_most = min(self.sample_seconds_most or shorter, shorter)

    @property
    def sample_seconds_asked(self) -> float | None:
        """The length the job's samples are asked to have, as views show it: None where
        nothing is asked, or the ask was taken back (0, as configured)."""
        return self.sample_seconds_wanted or None

    def stepping_busy_ratio(self) -> dict[int, float]:
        """Each device's busy share of the job's stepping, over every sample of its life taken
        through its stepping (:func:`stepped_through`); empty before one."""
        seconds = self._stepping_seconds
        if seconds <= 0:
            return {}
        return {d: min(1.0, busy / seconds) for d, busy in self._stepping_busy.items()}

    def stepping_device_seconds_per_step(self) -> dict[int, float]:
        """Each device's busy seconds per marked step: its busy seconds in the cores of the
        marked samples of the job's life (:func:`holds_marked_steps`) over the steps those
        held. Empty before such a sample.

        The profiler slows a job's host side while it records (a step of 60 ms of matmul and
        20 ms on the host ran 15 % fewer steps a second in samples), not its devices' work:
        the busy share inside samples is lower than the job's, its busy seconds per step are
        not. Counted over the cores' whole steps, not over the samples: a sample starts
        anywhere in a step and stops inside another, and where steps differ (a compile every
        third step, an eval) the part outside its core would weigh one kind of step."""
        if self._core_steps <= 0:
            return {}
        return {d: busy / self._core_steps for d, busy in self._core_busy.items()}

    def rates(self) -> LedgerRates:
        if self._rates is None:
            self._rates = ledger_rates(self._samples)
        return self._rates


def unmarked_sample_seconds(reading: SampleReading) -> float | None:
    """How long a job without markers should record its samples to hold whole periods of its
    busiest program, where ``reading`` did not (None where it did, or the job marks steps):
    PERIODS_WANTED of its period where two starts gave one, else LENGTHEN_UNKNOWN times this
    sample (a step longer than it), at most the longest sample."""
    if reading.steps_marked or reading.whole_periods or reading.dominant is None:
        return None
    if reading.dominant_period is not None:
        wanted = PERIODS_WANTED * reading.dominant_period
    else:
        wanted = LENGTHEN_UNKNOWN * reading.duration_seconds
    return min(SAMPLE_RECORD_MAX_SECONDS, wanted)


def rarer_sample_seconds(samples: Iterable[SampleReading]) -> float | None:
    """How long samples should record to hold two starts of each program that ran less
    often than once a sample and used at least RARER_DEVICE_SHARE of the device time:
    RARER_PERIODS_WANTED of its period (the stepped samples' core seconds over its runs in
    them), at most RARER_SAMPLE_MAX_SECONDS and RARER_SAMPLE_BYTES; None where no such
    program ran, samples already hold whole periods of each
    (:func:`xmon.execution.samples.rarer_periods`), or are already as long."""
    stepped = [s for s in samples if s.steps_in_core and s.dominant is not None and s.whole_periods]
    held = {p for s in stepped for p in s.program_periods}
    dominants = {s.dominant for s in stepped}
    runs: defaultdict[int, int] = defaultdict(int)
    device: defaultdict[int, float] = defaultdict(float)
    most: defaultdict[int, int] = defaultdict(int)  # the most runs one sample held
    for sample in stepped:
        for program, n in sample.executions.items():
            runs[program] += n
            most[program] = max(most[program], n)
        for program, seconds in sample.program_device_seconds.items():
            device[program] += seconds
    total = sum(device.values())
    core = sum(s.core_seconds for s in stepped)
    # rarer than the steps' program: long steps run every program once a sample
    ruler = sum(s.executions.get(s.dominant, 0) for s in stepped if s.dominant is not None)
    periods = [
        core / n
        for program, n in runs.items()
        if 0 < n < ruler and most[program] <= 1 and program not in held
        and program not in dominants and device[program] >= RARER_DEVICE_SHARE * total
    ]  # fmt: skip
    if not periods or core <= 0:
        return None
    wanted = min(RARER_SAMPLE_MAX_SECONDS, RARER_PERIODS_WANTED * max(periods))
    rate = max(
        (s.recorded_bytes / s.duration_seconds for s in stepped if s.duration_seconds > 0),
        default=0.0,
    )
    if rate > 0:
        wanted = min(wanted, RARER_SAMPLE_BYTES / rate)
    return wanted if wanted > max(s.duration_seconds for s in stepped) else None


def ledger_rates(samples: Iterable[SampleReading]) -> LedgerRates:
    """Rates over samples: sums of counts over sums of the windows they were counted in."""
    samples = list(samples)
    executions: defaultdict[int, int] = defaultdict(int)
    device_seconds: defaultdict[int, float] = defaultdict(float)
    device_runs: defaultdict[int, int] = defaultdict(int)
    busy: defaultdict[int, float] = defaultdict(float)
    collective: defaultdict[int, float] = defaultdict(float)
    for sample in samples:
        for device, seconds in sample.device_collective_seconds.items():
            collective[device] += seconds
        for program, n in sample.executions.items():
            executions[program] += n
        for program, seconds in sample.program_device_seconds.items():
            device_seconds[program] += seconds
        for program, runs in sample.program_device_runs.items():
            device_runs[program] += runs
        for device, seconds in sample.device_busy_seconds.items():
            busy[device] += seconds
    tallies: dict[tuple[int, str], BranchTally] = {}
    for sample in samples:
        for key, found in sample.branch_tallies.items():
            tallies[key] = found if key not in tallies else tallies[key] + found
    mixes = {key: mix for key, found in tallies.items() if (mix := branch_mix(found))}
    core = sum(s.core_seconds for s in samples)
    sampled = sum(s.duration_seconds for s in samples)
    per_step, steps, stepped_core, from_periods = _per_step(samples)
    per_second = {p: n / core for p, n in executions.items()} if core > 0 else {}
    step_rate = steps / stepped_core if steps and stepped_core > 0 else None
    if step_rate is not None:
        # a rarer program's per-step count comes from its own whole periods: its rate follows
        per_second.update({p: per_step[p] * step_rate for p in from_periods})
    return LedgerRates(
        samples=len(samples),
        sampled_seconds=sampled,
        window_seconds=(
            samples[-1].started_at + samples[-1].duration_seconds - samples[0].started_at
            if samples
            else 0.0
        ),
        last_sample_at=samples[-1].started_at + samples[-1].duration_seconds if samples else None,
        executions_per_second=per_second,
        executions_per_step=per_step,
        executions=dict(executions),
        steps_per_second=step_rate,
        device_seconds_per_execution={
            p: device_seconds[p] / runs for p, runs in device_runs.items() if runs
        },
        busy_ratio={d: min(1.0, s / sampled) for d, s in busy.items()} if sampled > 0 else {},
        collective_ratio=(
            {d: min(1.0, s / sampled) for d, s in collective.items()} if sampled > 0 else {}
        ),
        busy_ratio_median=_median_ratios(samples, lambda s: s.device_busy_seconds),
        program_names={p: name for s in samples for p, name in s.program_names.items()},
        branch_mixes=mixes,
        collective_ratio_median=_median_ratios(samples, lambda s: s.device_collective_seconds),
    )


STEPPING_CORE_SHARE = 0.7  # of a sample's length its core window spans: it stepped throughout


def stepped_through(sample: SampleReading) -> bool:
    """Whether the job stepped through most of the sample: it saw steps (marked ones, or the
    dominant program without markers) over a core window of at least ``STEPPING_CORE_SHARE``
    of its length. A sample that straddles a stall, a save or the end of training counts its
    idle part as the devices' and says too little of how busy the steps keep them."""
    stepped = sample.steps_in_core if sample.steps_marked else sample.dominant is not None
    return bool(stepped) and sample.core_seconds >= STEPPING_CORE_SHARE * sample.duration_seconds


MIN_CORE_STEPS = 1.0  # a core holding less than a whole step says nothing of a step's work


def holds_marked_steps(sample: SampleReading) -> bool:
    """Whether the sample's core window held whole marked steps (one at least), with the
    devices' busy seconds in it: what :meth:`JobLedger.stepping_device_seconds_per_step`
    counts. A step longer than the sample that runs its program on several devices has a core
    of those devices' starts of one execution, a fraction of a step: not counted."""
    steps = sample.steps_in_core
    return bool(
        sample.steps_marked
        and sample.whole_periods
        and sample.core_busy_seconds is not None
        and steps is not None
        and math.isfinite(steps)
        and steps >= MIN_CORE_STEPS
    )


def _median_ratios(
    samples: Sequence[SampleReading], seconds: Callable[[SampleReading], Mapping[int, float]]
) -> dict[int, float]:
    """Per device, the median over samples of its seconds / the sample's duration (a device
    a sample did not see ran nothing in it)."""
    timed = [s for s in samples if s.duration_seconds > 0]
    devices = {d for s in timed for d in s.device_busy_seconds}
    return {
        d: statistics.median(min(1.0, seconds(s).get(d, 0.0) / s.duration_seconds) for s in timed)
        for d in devices
    }


def _per_step(
    samples: Sequence[SampleReading],
) -> tuple[dict[int, float], float, float, frozenset[int]]:
    """Executions per step of every program, the steps they came from, the core seconds
    those steps took, and the programs counted over their own whole periods.

    A sample holding whole marked steps but no whole periods of its dominant program (long
    steps) counts them, and the executions between its first and last begin: its ratio is of
    two counts over the same window, snapped as below all the same.

    Each sample measures two rates over whole periods: the dominant program's and the steps'.
    Their ratio, the dominant program's executions per step, is a whole number in a training
    loop (1, or k micro-steps) but carries the jitter of asynchronous dispatch, so it is
    taken to the nearest whole number (or whole fraction) within ``SNAP_TOLERANCE`` of it
    (:func:`per_step_ratio`). Other programs count relative to the dominant one over the same
    core windows, which is exact for programs in lockstep with it. Programs rarer than the
    dominant one (an eval every N steps) count over their own whole periods where samples hold
    two of their starts or more (:func:`xmon.execution.samples.rarer_periods`).
    """
    stepped = [s for s in samples if s.steps_in_core and s.dominant is not None]
    if any(s.steps_marked for s in stepped):
        # Samples taken before the job's first marked steps (start-up: random init, data
        # loading) would count their busiest program's runs as steps.
        stepped = [s for s in stepped if s.steps_marked]
    else:
        # Inferred steps are the runs of one program, the one that used the most device time
        # over the window (the one the job is told they are inferred from). A sample whose
        # busiest program was another (start-up, a burst of small data-loading programs, an
        # eval) counted that program's runs as steps: ~100x the job's rate in its first minute.
        main = window_dominant(stepped)
        stepped = [s for s in stepped if s.dominant == main]
    # A sample without whole periods of its dominant program holds no rate to compare (one
    # where the first marked steps came at its very end showed 1 execution for 102 steps);
    # with markers, only when no sample has whole periods (an agent without the anchor, steps
    # longer than a sample) are they used. Without markers never: the steps are the dominant
    # program's periods, and two starts are no period (a warm-up run 39 ms before the first
    # of 10 s steps made 25.6 "steps" of one sample, and 1/13 of an execution a step).
    whole = [s for s in stepped if s.whole_periods]
    stepped = whole or (stepped if any(s.steps_marked for s in stepped) else [])
    # The dominant program can differ between samples (two programs with about equal device
    # time): each sample's steps come from the ratio measured for its own dominant program.
    ratios: defaultdict[int | str, list[float]] = defaultdict(list)
    executions_of: defaultdict[int | str, float] = defaultdict(float)
    steps_of: defaultdict[int | str, float] = defaultdict(float)
    runs = [(sample, *dominant_runs(sample)) for sample in stepped]
    for sample, key, executions in runs:
        if sample.dominant is not None and sample.steps_in_core:
            ratios[key].append(executions / sample.steps_in_core)
            executions_of[key] += executions
            steps_of[key] += sample.steps_in_core
    per_step = {
        key: ratio
        for key, r in ratios.items()
        if executions_of[key]
        and math.isfinite(ratio := per_step_ratio(r, executions_of[key] / steps_of[key]))
        and ratio > 0  # steps are divided by it
    }
    steps = sum(executions / per_step[key] for _, key, executions in runs if key in per_step)
    if not steps:
        return {}, 0.0, 0.0, frozenset()
    counts: defaultdict[int, int] = defaultdict(int)
    for sample in stepped:
        for program, n in sample.executions.items():
            counts[program] += n
    stepped_core = sum(s.core_seconds for s in stepped)
    result = {p: n / steps for p, n in counts.items()}
    periodic = _over_whole_periods(stepped, result)
    result.update(periodic)
    return result, steps, stepped_core, frozenset(periodic)


def _over_whole_periods(
    samples: Sequence[SampleReading], per_step: Mapping[int, float]
) -> dict[int, float]:
    """Executions per step of the programs rarer than their samples' dominant one, over their
    own whole periods: their executions there over the steps the dominant program's runs in
    the same spans make (its runs over its executions per step)."""
    runs: defaultdict[int, int] = defaultdict(int)
    steps: defaultdict[int, float] = defaultdict(float)
    for sample in samples:
        ruler = per_step.get(sample.dominant) if sample.dominant is not None else None
        if not ruler:
            continue
        for program, (own, ruled) in sample.program_periods.items():
            runs[program] += own
            steps[program] += ruled / ruler
    return {p: runs[p] / steps[p] for p in runs if steps[p] > 0}


def dominant_runs(sample: SampleReading) -> tuple[int | str, int]:
    """What a marked sample's dominant program is to its steps, and its executions: with every
    program of the same name where the sample names them. A function compiled anew each step
    runs a new executable (a new id) once a step, which alone is a fraction of a step's runs;
    two programs both called ``jit_step`` each step are two runs a step, a whole number still.
    A dominant program run twice or more in the sample counts alone (as it always did: its
    rate over whole periods), and without markers its own runs are the steps."""
    dominant = sample.dominant
    if dominant is None:
        return -1, 0
    name = sample.program_names.get(dominant)
    runs = sample.executions.get(dominant, 0)
    if name is None or not sample.steps_marked or runs >= 2:
        return dominant, runs  # a program run again and again: its own runs
    named = sum(n for p, n in sample.executions.items() if sample.program_names.get(p) == name)
    return name, named


def window_dominant(samples: Sequence[SampleReading]) -> int | None:
    """The program that used the most device time over ``samples``, all devices together."""
    seconds: defaultdict[int, float] = defaultdict(float)
    for sample in samples:
        for program, spent in sample.program_device_seconds.items():
            seconds[program] += spent
    return max(seconds, key=lambda p: (seconds[p], -p)) if seconds else None


SNAP_TOLERANCE = 0.15  # one sample's ratio scatters by up to 15 % on a loaded 2-core host


def per_step_ratio(ratios: Sequence[float], pooled: float) -> float:
    """The dominant program's executions per step from its samples' ``ratios`` and the ratio
    ``pooled`` over them (their executions over their steps).

    Each fails in its own way. The median ignores a sample in which the job was descheduled
    (0.4 in a run of 1.0), which moves the pooled ratio. The pooled ratio cancels bursts: step
    markers run ahead of the device in one sample and the device catches up in the next
    (measured on a loaded 2-core host: 0.87, then 1.16), and when three samples in five ran
    ahead their median is no whole number. The first that is within ``SNAP_TOLERANCE`` of a
    whole number (or whole fraction) gives it; else the median, as measured.
    """
    median = statistics.median(ratios)
    for estimate in (median, pooled):
        whole = nearest_whole(estimate)
        if whole is not None:
            return whole
    return median


def nearest_whole(ratio: float) -> float | None:
    """The whole number or whole fraction (1/n) within SNAP_TOLERANCE of ``ratio``, if any."""
    if not math.isfinite(ratio) or ratio <= 0:
        return None  # no whole number is near it (and round() of infinity raises)
    if ratio >= 1:
        whole = round(ratio)
        return float(whole) if abs(ratio - whole) <= SNAP_TOLERANCE * ratio else None
    whole = round(1 / ratio) if ratio > 0 else 0
    return 1.0 / whole if whole and abs(1 / ratio - whole) <= SNAP_TOLERANCE / ratio else None

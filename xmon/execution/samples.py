"""One execution sample of a job: what it ran, how often and for how long, from an XSpace.

JAX dispatches compiled programs from C++ with no Python hook, so nothing in the job counts
executions. The agent instead records short profiler sessions in memory (xmon.agent.sampler)
and sends each session's XSpace to the daemon, which reads it here, off the job's threads.

What one sample gives (XLA's profiler tags every op it records with ``program_id``, the HLO
module id, and ``run_id``, one per launch shared by the launch's devices):

* **executions** of each program: its distinct run ids, each placed at the start of its
  first op. Counted only inside the sample's *core window*: from the first to the last start
  of the program that used the most device time. In steady state that window holds a whole
  number of that program's periods, so counts divided by its length are rates without the
  ±1 execution a window cut at arbitrary times would add (a 0.2 s sample of 40 ms steps would
  otherwise be off by up to 20 %).
* **device busy time** per device: the union of the device's op intervals over the whole
  sample, so overlapping ops (streams, threads) count once.
* **device time per program**: the union of its op intervals per device, summed over devices.

Where the dominant program started too few times for a core window (steps longer than a third
of the sample, a new program each step) and the job marks steps, executions are counted between
the sample's first and last step begin instead: whole steps, counted. The begins are on the
agent's clock; the agent's anchor annotation (``SAMPLE_ANCHOR``), read on both clocks, places
them on the XSpace's. Where a core window exists, the steps its executions make come from the
host's dispatches between the first and last begin (PjRt's ``Execute`` events on the thread
that marks the steps): the host and its begins may run ahead of the device or fall behind it
while the profiler records, and both dispatch and begin are the host's. Without dispatches
(other backends), the core window's two rates: begins and executions per second.

Where events live: GPU and TPU record ops on ``/device:GPU:N`` / ``/device:TPU:N`` planes (the
device is N); the CPU backend records them on host threads, each op with a
``device_ordinal`` stat.

:mod:`xmon.execution.ledger` keeps a job's recent samples and turns them into rates.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xmon.execution.branches import BranchTally, tally, watched_ops, whole_executions
from xmon.execution.xplane import (
    HLO_MODULE,
    LAUNCH_NAME,
    MODULES_LINE,
    PROGRAM_ID,
    RUN_ID,
    StatValue,
    stat_ids,
    stat_value,
)
from xmon.execution.xspace_bounds import (
    SAMPLE_BOUNDS,
    BoundExceeded,
    NotASpace,
    SpaceBounds,
    SpaceReader,
    check_ids,
)
from xmon.model import Conditional
from xmon.wire.proto import xplane_pb2
from xmon.wire.protocol import SAMPLE_ANCHOR

DEVICE_ORDINAL = "device_ordinal"
HLO_OP = "hlo_op"
_DEVICE_PLANE = re.compile(r"^/device:(?:GPU|TPU|[A-Z_]+):(?P<index>\d+)$")
# Lines of device planes that summarise other lines rather than record ops.
_SUMMARY_LINES = frozenset({MODULES_LINE, "Steps", "XLA TraceMe", "Framework Ops", "Source code"})
MIN_CORE_EXECUTIONS = 3  # fewer starts of the dominant program: count the whole sample
# The host's dispatch of one execution, on the thread that calls the program: PjRt's TraceMe
# around Execute (multi-device programs, named after the module) or around the single-device
# path. The per-device ``[k] ...Execute`` events on the client's threads are not dispatches.
_DISPATCH_PREFIXES = (
    "CommonPjRtLoadedExecutable::Execute (",
    "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice",
)
MAX_SAMPLE_BYTES = SAMPLE_BOUNDS.max_bytes
MAX_STEP_BEGINS = 4096  # the agent sends at most this many begins per sample
# A step shorter than a microsecond is no training step: two begins closer than that (5e-324 s
# apart once made the step rate infinite and the ledger divide by zero) refuse the sample.
MIN_STEP_SECONDS = 1e-6


# HLO collective ops (and their async -start/-done halves), and NCCL's kernels on GPU planes.
_COLLECTIVE = re.compile(
    r"^%?(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
    r"|collective-broadcast|send|recv)([.-]|$)|^nccl",
    re.IGNORECASE,
)


def is_collective(op_name: str) -> bool:
    """Whether an op moves data between devices (its time includes waiting for the others)."""
    return bool(_COLLECTIVE.match(op_name))


@dataclass(frozen=True, slots=True)
class ExecutionSample:
    """One profiler sample as a job sent it (xmon.proto ``ExecutionSample``), before it is read.

    ``xspace`` is the serialized XSpace; ``step_begin_seconds`` the marked step begins while it
    recorded, in seconds since it started (more than ``MAX_STEP_BEGINS`` is refused unread);
    ``anchor_seconds`` when the agent's anchor annotation began, on the same clock."""

    started_at: float  # wall clock when the profiler session started
    duration_seconds: float
    xspace: bytes
    step_begin_seconds: tuple[float, ...] = ()
    steps_marked: bool = False
    anchor_seconds: float | None = None
    # by program id, the job's conditionals whose branches the sample's ops count (the
    # daemon's, from its catalogue of the job's programs: not sent)
    conditionals: Mapping[int, tuple[Conditional, ...]] = field(default_factory=dict)


class SampleUnreadable(Exception):
    """Bytes that are not a profiler sample."""


class SampleRefused(SampleUnreadable):
    """A sample refused at one of the daemon's bounds; ``bound`` is its refusal label."""

    def __init__(self, bound: str, why: str) -> None:
        super().__init__(why)
        self.bound = bound


def step_begins_problem(begins: Sequence[float], duration: float) -> str | None:
    """Why marked step begins could not come from a session of ``duration`` seconds, if they
    could not: each must be finite and within the session, and consecutive ones (sorted) at
    least MIN_STEP_SECONDS apart. None when they could."""
    if len(begins) > MAX_STEP_BEGINS:
        return f"{len(begins)} step begins, more than {MAX_STEP_BEGINS}"
    ordered = sorted(begins)
    if any(not (math.isfinite(t) and 0.0 <= t <= duration) for t in ordered):
        return f"a step begin outside the sample's {duration:g} s"
    if any(later - earlier < MIN_STEP_SECONDS for earlier, later in itertools.pairwise(ordered)):
        return f"step begins closer than {MIN_STEP_SECONDS:g} s"
    return None


@dataclass(frozen=True)
class SampleReading:
    """What one profiler sample of one job shows."""

    started_at: float  # wall clock
    duration_seconds: float  # how long the profiler recorded
    core_seconds: float  # the window executions were counted in
    executions: Mapping[int, int]  # program id -> executions started in the core window
    dominant: int | None  # the program that used the most device time
    steps_marked: bool  # the job marked steps when the sample was taken
    # Steps the core window holds: its length times the step rate measured in the same sample
    # (from the job's step markers, else the dominant program's executions). The profiler slows
    # a job a little while it records (2-5 % measured on CPU); a ratio of two rates taken in
    # the same sample cancels that out. None when the sample shows no rate to take.
    steps_in_core: float | None
    device_busy_seconds: Mapping[int, float]  # device ordinal -> union of its op intervals
    program_device_seconds: Mapping[int, float]  # program id -> device-seconds of its ops
    program_device_runs: Mapping[int, int]  # program id -> (execution, device) pairs seen
    # device ordinal -> union of its collective ops' intervals (part of its busy seconds)
    device_collective_seconds: Mapping[int, float] = field(default_factory=dict)
    last_started: int | None = None  # the program whose execution started last in the sample
    # The core window held whole periods of the dominant program. Without one (it started
    # too few times: the job's first marked steps at the sample's very end, a step longer than
    # the sample) counts are over the whole sample and ``steps_in_core`` is only a guess.
    whole_periods: bool = True
    # program id -> its name (``jit_step``) where the sample names it (GPU kernels do): the
    # daemon's fallback where the job's catalogue holds other ids for the same program.
    program_names: Mapping[int, str] = field(default_factory=dict)
    # The median interval between the dominant program's starts (None below two starts): how
    # long a sample of a job without markers must be to hold whole periods of it.
    dominant_period: float | None = None
    # program id -> (its executions over its own whole periods, the dominant program's in the
    # same span), for each program that ran less often than the dominant one and started at
    # least twice (an eval every 10 steps): see :func:`rarer_periods`.
    program_periods: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    recorded_bytes: int = 0  # the serialized XSpace's size
    # device ordinal -> its busy seconds inside the core window (the union of its op intervals
    # clipped to it); None where the sample has no core window (counts over the whole sample).
    # Over whole steps, the devices' work per step without the sample's lead-in and tail: a
    # sample stops inside a step, whose remainder (a compile, a host-bound stretch) is not
    # the core's.
    core_busy_seconds: Mapping[int, float] | None = None
    # (program id, conditional) -> how its branches ran over the program's whole executions on
    # each device, for the conditionals the daemon asked about (xmon.execution.branches)
    branch_tallies: Mapping[tuple[int, str], BranchTally] = field(default_factory=dict)


class _Intervals:
    """Half-open [start, end) intervals in picoseconds, merged on demand."""

    def __init__(self) -> None:
        self._spans: list[tuple[int, int]] = []

    def add(self, start: int, end: int) -> None:
        if end > start:
            self._spans.append((start, end))

    def union_length(self, low: int | None = None, high: int | None = None) -> int:
        total, reach = 0, None
        for start, end in sorted(self._spans):
            if low is not None:
                start = max(start, low)
            if high is not None:
                end = min(end, high)
            if end <= start:
                continue
            if reach is None or start > reach:
                total += end - start
                reach = end
            elif end > reach:
                total += end - reach
                reach = end
        return total


class _SampleParser:
    def __init__(self, bounds: SpaceBounds = SAMPLE_BOUNDS) -> None:
        self.bounds = bounds
        self.runs = 0  # distinct (program, run) pairs seen
        self.run_starts: defaultdict[int, dict[int, int]] = defaultdict(dict)  # prog -> run -> ps
        # Without run ids (GPU "XLA Modules" lines): program -> device plane -> starts. Every
        # device runs each execution, so the plane with the most is the count.
        self.module_starts: defaultdict[int, defaultdict[str, list[int]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.device_ops: defaultdict[int, _Intervals] = defaultdict(_Intervals)
        self.collective_ops: defaultdict[int, _Intervals] = defaultdict(_Intervals)
        self._names: Mapping[int, str] = {}
        self.program_ops: defaultdict[tuple[int, int], _Intervals] = defaultdict(_Intervals)
        self.program_runs: defaultdict[int, set[tuple[int, int]]] = defaultdict(set)
        # GPU kernels carry their program id and name but no run id; the host's launches
        # (``CommonPjRtLoadedExecutable::Execute``) carry the run id and the name. Executions
        # of such a program are its launches: (name, run, start) here, names resolved to
        # programs through the kernels (program -> its kernels' starts, name -> programs).
        self.launches: list[tuple[str, int, int]] = []
        self.op_starts: defaultdict[int, list[int]] = defaultdict(list)
        self.named_programs: defaultdict[str, set[int]] = defaultdict(set)
        self.anchor_ps: int | None = None  # when the agent's anchor annotation began
        # When the host dispatched executions (XSpace clock): a job's step begins and its
        # dispatches are on the same thread.
        self.dispatches: list[int] = []
        # The ops of conditionals whose branches are counted (xmon.execution.branches), by
        # program id, and the starts of each on each device: (program, device, op) -> starts
        self.watched: dict[int, frozenset[str]] = {}
        self.watched_starts: defaultdict[tuple[int, int, str], list[int]] = defaultdict(list)
        # ... and when each execution of those programs began on each device: (program,
        # device) -> run -> its first op's start (with run ids), or module events' starts
        self.watched_runs: defaultdict[tuple[int, int], dict[int, int]] = defaultdict(dict)
        self.watched_modules: defaultdict[tuple[int, int], list[int]] = defaultdict(list)

    def _anchor_ids(self, plane: xplane_pb2.XPlane) -> frozenset[int]:
        """The event metadata ids of the agent's anchor annotation in ``plane`` (none once an
        anchor was found: the first one is the agent's)."""
        if self.anchor_ps is not None:
            return frozenset()
        return frozenset(
            k for k, meta in plane.event_metadata.items() if meta.name == SAMPLE_ANCHOR
        )

    def _note_anchor(self, line: xplane_pb2.XLine, anchors: frozenset[int]) -> None:
        for event in line.events:
            if event.metadata_id in anchors:
                self.anchor_ps = line.timestamp_ns * 1000 + event.offset_ps
                return

    def add_plane(
        self, plane: xplane_pb2.XPlane, lines: Iterable[xplane_pb2.XLine] | None = None
    ) -> None:
        """Read a plane: its header (metadata) and ``lines``, by default its own."""
        lines = plane.lines if lines is None else lines
        anchors = self._anchor_ids(plane)
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        ids = stat_ids(names, (PROGRAM_ID, RUN_ID, DEVICE_ORDINAL, HLO_OP, HLO_MODULE,
                               LAUNCH_NAME))  # fmt: skip
        if ids[PROGRAM_ID] is None and (ids[RUN_ID] is None or ids[LAUNCH_NAME] is None):
            # Python and host threads without XLA ops or launches: read only for the anchor.
            for line in lines if anchors else ():
                self._note_anchor(line, anchors)
                if self.anchor_ps is not None:
                    break
            return
        match = _DEVICE_PLANE.match(plane.name)
        plane_device = int(match["index"]) if match else None
        self._names = {key: meta.name for key, meta in plane.event_metadata.items()}
        shared = {
            key: stat_value(meta.stats, ids, names, {})
            for key, meta in plane.event_metadata.items()
            if meta.stats
        }
        for line in lines:
            if anchors and self.anchor_ps is None:
                self._note_anchor(line, anchors)
            on_modules = line.name == MODULES_LINE
            if line.name in _SUMMARY_LINES and not on_modules:
                continue
            base_ps = line.timestamp_ns * 1000
            for event in line.events:
                values = shared.get(event.metadata_id, {})
                if event.stats:
                    values = stat_value(event.stats, ids, names, values)
                self._add_event(event, values, base_ps, plane, plane_device, on_modules)
            self._check_ids()

    def _check_ids(self) -> None:
        """Distinct ids are checked after each piece of a line (at most a MiB of events), so
        a sample of ids no job has costs what the bounds allow, not what the sample holds."""
        check_ids(
            self.bounds,
            programs=len(self.run_starts) + len(self.module_starts),
            devices=len(self.device_ops),
            runs=self.runs,
        )

    def _add_event(
        self,
        event: xplane_pb2.XEvent,
        values: Mapping[str, StatValue],
        base_ps: int,
        plane: xplane_pb2.XPlane,
        plane_device: int | None,
        on_modules: bool,
    ) -> None:
        program, run = values.get(PROGRAM_ID), values.get(RUN_ID)
        if event.WhichOneof("data") == "num_occurrences":
            return
        if not isinstance(program, int):
            name = self._names.get(event.metadata_id, "")
            if name.startswith(_DISPATCH_PREFIXES):
                self.dispatches.append(base_ps + event.offset_ps)
            self._add_launch(values, base_ps + event.offset_ps)
            return
        if not isinstance(run, int):
            run = None
        start = base_ps + event.offset_ps
        end = start + max(0, event.duration_ps)
        if on_modules:  # one event per execution; its ops are on the other lines
            if run is None:
                self.module_starts[program][plane.name].append(start)
                if plane_device is not None and program in self.watched:
                    self.watched_modules[(program, plane_device)].append(start)
            return
        ordinal = values.get(DEVICE_ORDINAL)
        device = plane_device if plane_device is not None else ordinal
        if not isinstance(device, int) or (plane_device is None and values.get(HLO_OP) is None):
            return  # a host event that is not a device op (waits, transfers)
        if run is not None:
            first = self.run_starts[program].get(run)
            self.runs += first is None
            if first is None or start < first:
                self.run_starts[program][run] = start
            self.program_runs[program].add((run, device))
        self.device_ops[device].add(start, end)
        self.program_ops[(program, device)].add(start, end)
        module = values.get(HLO_MODULE)
        if isinstance(module, str):
            self.named_programs[module].add(program)
            if run is None:
                self.op_starts[program].append(start)
        op = values.get(HLO_OP)
        if is_collective(op if isinstance(op, str) else self._names.get(event.metadata_id, "")):
            self.collective_ops[device].add(start, end)
        watched = self.watched.get(program) if self.watched else None
        if watched is not None:
            if run is not None:
                first = self.watched_runs[(program, device)].get(run)
                if first is None or start < first:
                    self.watched_runs[(program, device)][run] = start
            if isinstance(op, str) and op in watched:
                self.watched_starts[(program, device, op)].append(start)

    def _add_launch(self, values: Mapping[str, StatValue], start: int) -> None:
        run, name = values.get(RUN_ID), values.get(LAUNCH_NAME)
        if isinstance(run, int) and isinstance(name, str) and name:
            self.launches.append((name, run, start))
            self.runs += 1

    def starts(self) -> dict[int, list[int]]:
        """Execution start times by program: run ids of its ops where present, else module
        events, else its launches (GPU)."""
        result = {p: sorted(runs.values()) for p, runs in self.run_starts.items()}
        for program, planes in self.module_starts.items():
            if program not in result:
                most = max((starts for starts in planes.values()), key=len)
                result[program] = sorted(most)
        for program, runs in self._launched().items():
            if program not in result:
                result[program] = sorted(runs.values())
                devices = {d for p, d in self.program_ops if p == program}
                self.program_runs[program] = {(r, d) for r in runs for d in devices}
        return result

    def _launched(self) -> dict[int, dict[int, int]]:
        """program -> run -> launch start, for the launches whose name is a program seen on a
        device. A name two programs share (a function compiled again for other shapes) goes
        to the one whose kernels start first after the launch."""
        for starts in self.op_starts.values():
            starts.sort()
        result: defaultdict[int, dict[int, int]] = defaultdict(dict)
        for name, run, start in self.launches:
            candidates = self.named_programs.get(name)
            if not candidates:
                continue
            program = min(candidates, key=lambda p: self._next_op_after(p, start))
            result[program].setdefault(run, start)
        return result

    def _next_op_after(self, program: int, start: int) -> int:
        starts = self.op_starts[program]
        index = bisect.bisect_left(starts, start)
        return starts[index] if index < len(starts) else 2**63


def parse_sample(
    data: bytes,
    started_at: float,
    duration_seconds: float,
    step_begins: Sequence[float] = (),
    steps_marked: bool = False,
    anchor_seconds: float | None = None,
    conditionals: Mapping[int, tuple[Conditional, ...]] | None = None,
) -> SampleReading:
    """Read one sample's XSpace; ``step_begins`` are the marked steps' begins during it, in
    seconds since it started, and ``anchor_seconds`` when the agent's anchor annotation began
    on the same clock; ``conditionals``: by program id, those whose branches to count. Raises
    SampleUnreadable for bytes that are not a sample."""
    parser = _SampleParser()
    parser.watched = {p: watched_ops(c) for p, c in (conditionals or {}).items() if c}
    try:
        reader = SpaceReader(data, SAMPLE_BOUNDS)
        for header, lines in reader.planes():
            parser.add_plane(header, lines)
    except BoundExceeded as exc:
        raise SampleRefused(exc.bound, str(exc)) from None
    except NotASpace as exc:
        raise SampleUnreadable(f"not a profiler sample: {exc}") from None
    reading = reading_from(
        parser, started_at, duration_seconds, step_begins, steps_marked, anchor_seconds
    )
    return dataclasses.replace(
        reading,
        recorded_bytes=len(data),
        branch_tallies=_branch_tallies(parser, conditionals or {}),
    )


def _branch_tallies(
    parser: _SampleParser, conditionals: Mapping[int, tuple[Conditional, ...]]
) -> dict[tuple[int, str], BranchTally]:
    """Each watched conditional's tally, by (program id, conditional), for the programs the
    sample saw run."""
    seen: defaultdict[int, dict[tuple[int, str], list[int]]] = defaultdict(dict)
    for (program, device, op), starts in parser.watched_starts.items():
        seen[program][(device, op)] = sorted(starts)
    executions: defaultdict[int, dict[int, list[int]]] = defaultdict(dict)
    for (program, device), runs in parser.watched_runs.items():
        executions[program][device] = sorted(runs.values())
    for (program, device), starts in parser.watched_modules.items():
        executions[program].setdefault(device, sorted(starts))
    result = {}
    for program, watched in conditionals.items():
        ran = executions.get(program)
        if not ran:
            continue  # it did not run: the sample says nothing of its conditionals
        for conditional in watched:
            found = tally(conditional, seen.get(program, {}), ran)
            result[(program, conditional.name)] = found or BranchTally.none_seen(
                len(conditional.branches), sum(whole_executions(s) for s in ran.values())
            )
    return result


def reading_from(
    parser: _SampleParser,
    started_at: float,
    duration: float,
    step_begins: Sequence[float],
    steps_marked: bool,
    anchor_seconds: float | None = None,
) -> SampleReading:
    program_seconds: defaultdict[int, float] = defaultdict(float)
    for (program, _device), spans in parser.program_ops.items():
        program_seconds[program] += spans.union_length() / 1e12
    starts = parser.starts()
    dominant = _dominant(starts, program_seconds)
    core = _core_window(starts[dominant]) if dominant is not None else None
    # Whole periods of the dominant program: two rates over them (below), which cancel how the
    # profiler slows the device while the host's begins go on. Without (steps longer than a
    # third of the sample, a new program each step): the whole marked steps, counted.
    steps = None
    if core is None and steps_marked:
        steps = _whole_steps(parser.anchor_ps, anchor_seconds, step_begins)
    if steps is not None:
        (low, high), counted = steps
        return _reading(
            parser, started_at, duration, starts, dominant, program_seconds,
            executions=_counts_in(starts, low, high), core_window=(low, high),
            steps_in_core=float(counted), whole_periods=True, steps_marked=True,
        )  # fmt: skip
    if core is None:
        executions = {p: len(s) for p, s in starts.items() if s}
        core_seconds = duration
    else:
        low, high = core
        executions = _counts_in(starts, low, high)
        core_seconds = (high - low) / 1e12
    if steps_marked:
        step_rate = _rate(sorted(step_begins))
        if step_rate is None:  # under two begins: the sample's whole length stands in
            step_rate = len(step_begins) / duration if duration > 0 else None
    else:
        step_rate = _rate([t / 1e12 for t in starts[dominant]]) if dominant is not None else None
    steps_in_core = _finite(step_rate * core_seconds) if step_rate is not None else None
    if steps_marked and core is not None:
        dispatched = _steps_by_dispatches(parser, anchor_seconds, step_begins, executions)
        steps_in_core = dispatched if dispatched is not None else steps_in_core
    return _reading(
        parser, started_at, duration, starts, dominant, program_seconds,
        executions=executions, core_window=core, steps_in_core=steps_in_core,
        whole_periods=core is not None, steps_marked=steps_marked,
    )  # fmt: skip


def _steps_by_dispatches(
    parser: _SampleParser,
    anchor_seconds: float | None,
    step_begins: Sequence[float],
    executions: Mapping[int, int],
) -> float | None:
    """The steps the core window's executions make, from the host's dispatches between the
    sample's first and last step begin: ``D`` dispatches in ``K`` whole steps are ``D / K``
    executions a step, all programs together, and the core window's executions, ``E``, are
    ``E * K / D`` steps. None without dispatches in the window or an anchor.

    Both counts are the host's own, on the thread that marks the steps, so they hold where the
    device is not in step with the host: an asynchronous job whose host dispatches in bursts
    and runs ahead of the device while the profiler records showed 75 step begins a second in
    a sample beside 34 executions of its every-step program (the job's rate was 37 steps a
    second), and its executions per step came out at a half. Which program each execution is
    comes from the device, whose counts of two programs in one window keep their proportion."""
    window = _whole_steps(parser.anchor_ps, anchor_seconds, step_begins)
    total = sum(executions.values())
    if window is None or not parser.dispatches or total <= 0:
        return None
    (low, high), steps = window
    # A dispatch is one event of one kind: multi-device programs' or single-device ones'
    # (measured on jax 0.10 and 0.12: a job running both shows each once per call).
    dispatched = _count_in(parser.dispatches, low, high)
    return _finite(total * steps / dispatched) if dispatched else None


def _whole_steps(
    anchor_ps: int | None, anchor_seconds: float | None, step_begins: Sequence[float]
) -> tuple[tuple[int, int], int] | None:
    """The window from the first to the last step begin on the XSpace's clock, and the steps
    it holds; None without an anchor on both clocks or two begins."""
    if anchor_ps is None or anchor_seconds is None or len(step_begins) < 2:
        return None
    ordered = sorted(step_begins)
    offset = anchor_ps - round(anchor_seconds * 1e12)
    return (offset + round(ordered[0] * 1e12), offset + round(ordered[-1] * 1e12)), len(ordered) - 1


def _reading(
    parser: _SampleParser,
    started_at: float,
    duration: float,
    starts: Mapping[int, list[int]],
    dominant: int | None,
    program_seconds: Mapping[int, float],
    *,
    executions: Mapping[int, int],
    core_window: tuple[int, int] | None,
    steps_in_core: float | None,
    whole_periods: bool,
    steps_marked: bool,
) -> SampleReading:
    """``core_window``: the picoseconds executions were counted in; None for the whole
    sample."""
    core_busy = None
    if core_window is not None:
        low, high = core_window
        core_busy = {
            d: spans.union_length(low, high) / 1e12 for d, spans in parser.device_ops.items()
        }
    return SampleReading(
        started_at=started_at,
        duration_seconds=duration,
        core_seconds=duration if core_window is None else (core_window[1] - core_window[0]) / 1e12,
        core_busy_seconds=core_busy,
        executions=executions,
        dominant=dominant,
        steps_marked=steps_marked,
        steps_in_core=steps_in_core,
        whole_periods=whole_periods,
        device_busy_seconds={
            d: spans.union_length() / 1e12 for d, spans in parser.device_ops.items()
        },
        program_device_seconds=dict(program_seconds),
        program_device_runs={p: len(runs) for p, runs in parser.program_runs.items()},
        program_names={p: name for name, ids in parser.named_programs.items() for p in ids},
        device_collective_seconds={
            d: spans.union_length() / 1e12 for d, spans in parser.collective_ops.items()
        },
        last_started=max(
            (p for p in starts if starts[p]), key=lambda p: max(starts[p]), default=None
        ),
        dominant_period=_median_interval(starts[dominant]) if dominant is not None else None,
        program_periods=rarer_periods(starts, dominant),
    )


def rarer_periods(
    starts: Mapping[int, Sequence[int]], dominant: int | None
) -> dict[int, tuple[int, int]]:
    """Whole periods of each program that runs less often than the dominant one: from its
    first start to its last, its own executions (one fewer than its starts) and the dominant
    program's in the same span.

    A window of the dominant program's whole periods holds a rarer program a varying number
    of times: an eval every 10 steps counted over 40 steps is 4 or 5 (±25 %), and pooled over
    five samples still scattered by ±4 % (measured). Between two of its own starts a periodic
    program ran exactly once a period, and the dominant program (every step, or k times a
    step) ran a whole number of its periods too, so the ratio of the two counts is exact. A
    program as frequent as the dominant one or more (micro-steps beside their update) is
    left to the dominant's window, whose whole periods hold it exactly: its own first and
    last start need not bound whole periods of the dominant program."""
    if dominant is None:
        return {}
    ruler = starts.get(dominant, [])
    periods = {}
    for program, own in starts.items():
        if program == dominant or len(own) < 2:
            continue
        runs = len(own) - 1
        ruled = bisect.bisect_left(ruler, own[-1]) - bisect.bisect_left(ruler, own[0])
        if ruled > runs:
            periods[program] = (runs, ruled)
    return periods


def _median_interval(starts: Sequence[int]) -> float | None:
    """The median interval between consecutive (sorted) starts, in seconds."""
    intervals = sorted(b - a for a, b in itertools.pairwise(starts))
    return intervals[len(intervals) // 2] / 1e12 if intervals else None


def _dominant(starts: Mapping[int, list[int]], program_seconds: Mapping[int, float]) -> int | None:
    """The program that used the most device time (most executions on a tie)."""
    if not starts:
        return None
    return max(starts, key=lambda p: (program_seconds.get(p, 0.0), len(starts[p])))


def _core_window(starts: list[int]) -> tuple[int, int] | None:
    if len(starts) < MIN_CORE_EXECUTIONS or starts[-1] <= starts[0]:
        return None
    return starts[0], starts[-1]


def _rate(times: Sequence[float]) -> float | None:
    """Events per second from the first to the last of sorted times: whole periods only."""
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _counts_in(starts: Mapping[int, list[int]], low: int, high: int) -> dict[int, int]:
    """Executions of each program that started in [low, high) (programs with none left out)."""
    return {p: n for p, s in starts.items() if (n := _count_in(s, low, high))}


def _count_in(starts: list[int], low: int, high: int) -> int:
    return sum(1 for start in starts if low <= start < high)

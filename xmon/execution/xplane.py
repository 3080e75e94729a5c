"""Executions per program counted in a captured trace (the XSpace in ``<host>.xplane.pb``).

XLA's profiler tags what it records of one execution with the stats ``program_id`` (the HLO
module's id, ``HloModuleProto.id``) and ``run_id`` (one per execution, shared by every device
of a multi-device launch). So the executions of a program are its distinct run ids, over every
plane of the trace. GPU device planes also have an "XLA Modules" line with one event per
execution; where those events carry no run id, the plane with the most of them gives the count
(each device runs the program once per execution).

A stat sits on the event or on the event's metadata (shared by all its events); its name is
``stat_metadata[metadata_id].name``; an id may arrive as int64, uint64, a decimal string, or a
``ref_value`` naming another stat metadata whose name is the value.

Counting is separated from reading the file, so tests build traces with the stubs.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import stat
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from xmon.execution.xspace_bounds import (
    TRACE_BOUNDS,
    BoundExceeded,
    NotASpace,
    SpaceBounds,
    SpaceReader,
    check_ids,
)
from xmon.wire.proto import xplane_pb2

PROGRAM_ID = "program_id"
RUN_ID = "run_id"
MODULES_LINE = "XLA Modules"
HLO_MODULE = "hlo_module"  # the program's name, on a GPU's kernel events
LAUNCH_NAME = "name"  # the program's name, on the host's launch events (with a run id)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class TraceUnreadable(Exception):
    """A trace file the daemon cannot count: missing, too large, outside its run, not a trace."""


class TraceRefused(TraceUnreadable):
    """A trace past one of the daemon's bounds; ``bound`` is the refusal's label."""

    def __init__(self, bound: str, why: str) -> None:
        super().__init__(why)
        self.bound = bound


class ExecutionCounter:
    """Accumulates the executions of every program over the spaces (files) of one capture."""

    def __init__(self, bounds: SpaceBounds = TRACE_BOUNDS) -> None:
        self.bounds = bounds
        self._runs: defaultdict[int, set[int]] = defaultdict(set)
        self._run_count = 0
        self._module_events: dict[int, int] = {}  # per program: most events on one plane
        # GPU kernels carry no run id: their executions are the host's launches of their name
        # (run ids), where the name is one program's (see xmon.execution.samples).
        self._launches: defaultdict[str, set[int]] = defaultdict(set)
        self._named: defaultdict[str, set[int]] = defaultdict(set)

    def add(self, space: xplane_pb2.XSpace) -> None:
        for plane in space.planes:
            self.add_plane(plane)

    def counts(self) -> dict[int, int]:
        """Executions by program id."""
        programs = set(self._runs) | set(self._module_events)
        counts = {
            p: max(len(self._runs.get(p, ())), self._module_events.get(p, 0)) for p in programs
        }
        for name, runs in self._launches.items():
            named = self._named.get(name, set())
            if len(named) == 1 and (program := next(iter(named))) not in counts:
                counts[program] = len(runs)  # a name two programs share is left uncounted
        return counts

    def add_plane(
        self, plane: xplane_pb2.XPlane, lines: Iterable[xplane_pb2.XLine] | None = None
    ) -> None:
        """Count a plane: its header (metadata) and ``lines``, by default its own."""
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        ids = stat_ids(names, (PROGRAM_ID, RUN_ID, HLO_MODULE, LAUNCH_NAME))
        if ids[PROGRAM_ID] is None and (ids[RUN_ID] is None or ids[LAUNCH_NAME] is None):
            return  # a plane without programs or launches (python): skip its events fast
        shared = {
            key: values
            for key, meta in plane.event_metadata.items()
            if meta.stats and (values := stat_value(meta.stats, ids, names, {}))
        }
        module_events: Counter[int] = Counter()
        for line in plane.lines if lines is None else lines:
            on_modules_line = line.name == MODULES_LINE
            for event in line.events:
                values = shared.get(event.metadata_id, {})
                if event.stats:
                    values = stat_value(event.stats, ids, names, values)
                program, run = _as_int(values.get(PROGRAM_ID)), _as_int(values.get(RUN_ID))
                if program is None:
                    self._add_launch(values.get(LAUNCH_NAME), run)
                    continue
                if run is not None:
                    runs = self._runs[program]
                    self._run_count += run not in runs
                    runs.add(run)
                elif on_modules_line:
                    module_events[program] += max(1, event.num_occurrences)
                elif isinstance(module := values.get(HLO_MODULE), str):
                    self._named[module].add(program)
            programs = len(set(self._runs) | set(module_events) | set(self._module_events))
            check_ids(self.bounds, programs=programs, devices=0, runs=self._run_count)
        for program, n in module_events.items():
            self._module_events[program] = max(self._module_events.get(program, 0), n)

    def _add_launch(self, name: object, run: int | None) -> None:
        if run is not None and isinstance(name, str) and name:
            runs = self._launches[name]
            self._run_count += run not in runs
            runs.add(run)


def count_executions(spaces: Iterable[xplane_pb2.XSpace]) -> dict[int, int]:
    counter = ExecutionCounter()
    for space in spaces:
        counter.add(space)
    return counter.counts()


def stat_ids(names: Mapping[int, str], wanted: Iterable[str]) -> dict[str, int | None]:
    """The stat metadata id of each wanted stat name in a plane (None: the plane has none)."""
    by_name: dict[str, int] = {}
    for key, value in names.items():
        by_name.setdefault(value, key)
    return {name: by_name.get(name) for name in wanted}


StatValue = int | str | None


def stat_value(
    stats: Iterable[xplane_pb2.XStat],
    ids: Mapping[str, int | None],
    names: Mapping[int, str],
    base: Mapping[str, StatValue],
) -> dict[str, StatValue]:
    """``base`` overlaid with the wanted stats found in ``stats``: integers where the value is
    one (ids arrive as int64, uint64, decimal text or a reference), else the text."""
    by_id = {key: name for name, key in ids.items() if key is not None}
    result = dict(base)
    for item in stats:
        name = by_id.get(item.metadata_id)
        if name is not None:
            value = _int_value(item, names)
            result[name] = value if value is not None else _text_value(item, names)
    return result


def _text_value(item: xplane_pb2.XStat, names: Mapping[int, str]) -> str:
    kind = item.WhichOneof("value")
    if kind == "ref_value":
        return names.get(item.ref_value, "")
    return item.str_value if kind == "str_value" else str(getattr(item, kind or "str_value", ""))


def _as_int(value: StatValue) -> int | None:
    return value if isinstance(value, int) else None


def _int_value(item: xplane_pb2.XStat, names: Mapping[int, str]) -> int | None:
    kind = item.WhichOneof("value")
    if kind in ("int64_value", "uint64_value"):
        return int(getattr(item, kind))
    text = item.str_value if kind == "str_value" else None
    if kind == "ref_value":
        text = names.get(item.ref_value)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- files ------------------------------------------------------------------------------------


def map_trace(path: Path, within: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> mmap.mmap:
    """One trace file's bytes, mapped rather than read (the kernel can drop clean pages of a
    file under memory pressure; a copy it could not). The file must be a regular
    ``.xplane.pb`` inside ``within`` (the capture's run directory: the path comes from the job,
    and the daemon may run as root) and at most ``max_bytes`` long."""
    if not path.name.endswith(".xplane.pb"):
        raise TraceUnreadable(f"{path} is not an .xplane.pb file")
    try:
        if not path.resolve().is_relative_to(within.resolve()):
            raise TraceUnreadable(f"{path} is outside the capture's directory {within}")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise TraceUnreadable(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TraceUnreadable(f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise TraceRefused(
                "xspace_bytes",
                f"{path} has {info.st_size} bytes, more than the {max_bytes} counted",
            )
        if info.st_size == 0:
            raise TraceUnreadable(f"{path} is empty")
        return mmap.mmap(fd, info.st_size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def count_files(
    paths: Iterable[str], within: Path, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[int, int]:
    """Executions by program id over the trace files of one capture (blocking: run it in a
    worker thread), each read in pieces within TRACE_BOUNDS (its bytes: ``max_bytes``).
    Raises TraceUnreadable (TraceRefused at a bound) naming the file."""
    bounds = dataclasses.replace(TRACE_BOUNDS, max_bytes=max_bytes)
    counter = ExecutionCounter(bounds)
    for path in paths:
        with map_trace(Path(path), within, max_bytes) as data:
            try:
                for header, lines in SpaceReader(data, bounds).planes():
                    counter.add_plane(header, lines)
            except BoundExceeded as exc:
                raise TraceRefused(exc.bound, f"{path}: {exc}") from None
            except NotASpace as exc:
                raise TraceUnreadable(f"{path} is not a readable trace: {exc}") from None
    return counter.counts()

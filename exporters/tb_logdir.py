"""Layout and retention of xmon's TensorBoard logdir (no tensorboard import: the daemon's
capture path uses the same names).

::

    <logdir>/<job>-<pid>/events.out.tfevents.*                  scalars (exporters/tensorboard.py)
    <logdir>/<job>-<pid>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/  one trace (jax.profiler):
        <host>.xplane.pb, <host>.trace.json.gz, xmon_capture.json
    <logdir>/<job>-<pid>/memory/<YYYY_MM_DD_HH_MM_SS>_<host>.prof  memory profile (pprof),
        and <...>.json next to it

TensorBoard's scalar dashboard and its profile plugin both see ``<job>-<pid>`` as one run.
Retention only ever deletes those three kinds of item, never other files a user put there.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_RUN_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_name(job_name: str, pid: int) -> str:
    """A job's run directory name: safe characters only, never ``..`` or a path separator."""
    safe = _UNSAFE.sub("_", job_name).strip("._-")[:MAX_RUN_NAME] or "job"
    return f"{safe}-{int(pid)}"


def run_dir(logdir: Path, job_name: str, pid: int) -> Path:
    return logdir / run_name(job_name, pid)


def session_name(wall_time: float) -> str:
    """Same shape as jax.profiler's trace directories, local time."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(wall_time))


def memory_profile_path(run: Path, wall_time: float, host: str) -> Path:
    host = _UNSAFE.sub("_", host).strip("._-") or "host"
    return run / "memory" / f"{session_name(wall_time)}_{host}.prof"


@dataclass(frozen=True)
class Item:
    """One deletable unit: a trace session directory, a memory profile, or an event file."""

    path: Path
    size: int
    mtime: float


def _tree_size(path: Path) -> tuple[int, float]:
    """Bytes under a path and its newest mtime."""
    if not path.is_dir():
        st = path.stat()
        return st.st_size, st.st_mtime
    size, newest = 0, path.stat().st_mtime
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            size += st.st_size
            newest = max(newest, st.st_mtime)
    return size, newest


def _candidates(run: Path) -> Iterator[Path]:
    yield from run.glob("events.out.tfevents.*")
    profile = run / "plugins" / "profile"
    if profile.is_dir():
        yield from (p for p in profile.iterdir() if p.is_dir())
    memory = run / "memory"
    if memory.is_dir():
        yield from memory.glob("*.prof")


def items(logdir: Path) -> list[Item]:
    found = []
    try:
        runs = [p for p in logdir.iterdir() if p.is_dir()]
    except OSError:
        return []
    for run in runs:
        for path in _candidates(run):
            try:
                size, mtime = _tree_size(path)
            except OSError:
                continue
            found.append(Item(path, size, mtime))
    return found


def _delete(item: Item) -> None:
    if item.path.is_dir():
        shutil.rmtree(item.path, ignore_errors=True)
        return
    item.path.unlink(missing_ok=True)
    if item.path.suffix == ".prof":
        item.path.with_suffix(".json").unlink(missing_ok=True)


def enforce_retention(
    logdir: Path, max_bytes: int, max_age_seconds: float, now: float, keep: Iterable[Path] = ()
) -> list[Path]:
    """Delete items older than ``max_age_seconds`` (0 = no age limit), then the oldest until the
    rest fit in ``max_bytes`` (0 = no size limit). ``keep`` (open event files) is never deleted.
    Returns what was deleted."""
    kept = {Path(p) for p in keep}
    found = sorted(items(logdir), key=lambda item: item.mtime)
    total = sum(item.size for item in found)
    removed: list[Path] = []
    for item in found:
        if item.path in kept:
            continue
        too_old = max_age_seconds > 0 and now - item.mtime > max_age_seconds
        too_big = max_bytes > 0 and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            _delete(item)
        except OSError:
            continue
        total -= item.size
        removed.append(item.path)
    _remove_empty_runs(logdir, {p.parent for p in kept}, now)
    return removed


EMPTY_RUN_GRACE_SECONDS = 600.0  # a capture may have just made the directory


def _remove_empty_runs(logdir: Path, active: set[Path], now: float) -> None:
    try:
        runs = [p for p in logdir.iterdir() if p.is_dir() and p not in active]
    except OSError:
        return
    for run in runs:
        try:
            if now - run.stat().st_mtime < EMPTY_RUN_GRACE_SECONDS:
                continue
        except OSError:
            continue
        for sub in (run / "plugins" / "profile", run / "plugins", run / "memory", run):
            try:
                sub.rmdir()  # only succeeds when empty
            except OSError:
                pass

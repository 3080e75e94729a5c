"""Layout and retention of xmon's TensorBoard logdir (no tensorboard import: the daemon's
capture path uses the same names).

::

    <logdir>/<job>-<pid>/events.out.tfevents.*.xmon             scalars (tensorboard.py)
    <logdir>/<job>-<pid>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/  one trace (jax.profiler):
        <host>.xplane.pb, <host>.trace.json.gz, xmon_capture.json
    <logdir>/<job>-<pid>/memory/<YYYY_MM_DD_HH_MM_SS>_<host>.prof  memory profile (pprof),
        and <...>.json next to it

TensorBoard's scalar dashboard and its profile plugin both see ``<job>-<pid>`` as one run.

The daemon may run as root while job users own the run directories, so everything below the
logdir is reached through directory file descriptors opened with ``O_NOFOLLOW``: a link planted
anywhere below the logdir (a run, ``plugins``, ``profile``, a session) is never followed, and
what is deleted is named relative to a directory that was itself reached without links.
Retention only deletes what xmon wrote: event files with xmon's suffix, trace sessions holding
xmon's note (``xmon_capture.json``) and memory profiles with their note (``.json``); and a run
directory left empty only when the daemon made it (it holds xmon's ``.xmon-run`` note), never a
directory of the user's, empty or not.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MAX_RUN_NAME = 64
EVENTS_PREFIX = "events.out.tfevents."
EVENTS_SUFFIX = ".xmon"  # the scalars exporter's files; a user's own event files stay
ANNOTATION_NAME = "xmon_capture.json"  # next to each trace xmon asked for
RUN_NOTE = ".xmon-run"  # in each run directory the daemon made: it may remove it once empty
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


# -- directories reached without following links ---------------------------------------------


def open_below(parent_fd: int, names: Iterable[str]) -> int:
    """A descriptor of ``parent/names...``, each step opened with ``O_NOFOLLOW``; a link or a
    non-directory on the way raises ``OSError`` (ELOOP, ENOTDIR)."""
    fd = os.dup(parent_fd)
    try:
        for name in names:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_run_dir(logdir: Path, name: str) -> int:
    """The run directory ``logdir/name``, made if missing, as a descriptor. The logdir is the
    operator's (made if missing, links followed); the run directory may belong to a job user,
    so it is never followed if it is a link."""
    logdir.mkdir(parents=True, exist_ok=True)
    root = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.mkdir(name, dir_fd=root)
            made = True
        except FileExistsError:
            made = False
        try:
            run_fd = open_below(root, (name,))
            if made:
                _note_run(run_fd)
            return run_fd
        except (NotADirectoryError, OSError) as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            raise NotADirectoryError(
                exc.errno, "a link or not a directory: not written through", str(logdir / name)
            ) from None
    finally:
        os.close(root)


def _note_run(run_fd: int) -> None:
    """Mark a run directory the daemon made (a new, empty file; never through a link)."""
    try:
        os.close(os.open(RUN_NOTE, _NEW_FILE, 0o644, dir_fd=run_fd))
    except OSError:
        pass  # unmarked: retention leaves the directory alone, which is the safe side


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def _opened(parent_fd: int, *names: str) -> Iterator[int | None]:
    """``open_below`` as a context; None where the directory is missing or not a directory."""
    try:
        fd = open_below(parent_fd, names)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _is_file(name: str, dir_fd: int) -> bool:
    st = _lstat(name, dir_fd)
    return st is not None and stat.S_ISREG(st.st_mode)


def _entries(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as it:
            return list(it)
    except OSError:
        return []


# -- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One deletable unit: a trace session directory, a memory profile, or an event file."""

    path: Path
    size: int
    mtime: float
    parts: tuple[str, ...] = ()  # path below the logdir, reached again without links to delete


def _tree_size(fd: int) -> tuple[int, float]:
    """Bytes under a directory (links not followed) and the newest mtime."""
    size, newest = 0, os.fstat(fd).st_mtime
    for _, _, files, root_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        for name in files:
            st = _lstat(name, root_fd)
            if st is not None:
                size += st.st_size
                newest = max(newest, st.st_mtime)
    return size, newest


def _run_items(root_fd: int, logdir: Path, run: str) -> Iterator[Item]:
    with _opened(root_fd, run) as run_fd:
        if run_fd is None:
            return
        for entry in _entries(run_fd):
            name = entry.name
            if name.startswith(EVENTS_PREFIX) and name.endswith(EVENTS_SUFFIX):
                st = _lstat(name, run_fd)
                if st is not None and stat.S_ISREG(st.st_mode):
                    yield Item(logdir / run / name, st.st_size, st.st_mtime, (run, name))
        yield from _sessions(run_fd, logdir, run)
        yield from _memory_profiles(run_fd, logdir, run)


def _sessions(run_fd: int, logdir: Path, run: str) -> Iterator[Item]:
    with _opened(run_fd, "plugins", "profile") as profile_fd:
        if profile_fd is None:
            return
        for entry in _entries(profile_fd):
            with _opened(profile_fd, entry.name) as session_fd:
                if session_fd is None or not _is_file(ANNOTATION_NAME, session_fd):
                    continue  # not a trace xmon asked for
                size, mtime = _tree_size(session_fd)
            parts = (run, "plugins", "profile", entry.name)
            yield Item(logdir.joinpath(*parts), size, mtime, parts)


def _memory_profiles(run_fd: int, logdir: Path, run: str) -> Iterator[Item]:
    with _opened(run_fd, "memory") as memory_fd:
        if memory_fd is None:
            return
        for entry in _entries(memory_fd):
            name = entry.name
            if not name.endswith(".prof") or not _is_file(name[: -len(".prof")] + ".json",
                                                          memory_fd):  # fmt: skip
                continue
            st = _lstat(name, memory_fd)
            if st is not None and stat.S_ISREG(st.st_mode):
                parts = (run, "memory", name)
                yield Item(logdir.joinpath(*parts), st.st_size, st.st_mtime, parts)


def _open_logdir(logdir: Path) -> int | None:
    try:
        return os.open(logdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _runs(root_fd: int) -> list[str]:
    return [e.name for e in _entries(root_fd) if e.is_dir(follow_symlinks=False)]


def items(logdir: Path) -> list[Item]:
    root = _open_logdir(logdir)
    if root is None:
        return []
    try:
        return [item for run in _runs(root) for item in _run_items(root, logdir, run)]
    finally:
        os.close(root)


def _delete(root_fd: int, item: Item) -> None:
    *parents, name = item.parts
    with _opened(root_fd, *parents) as parent_fd:
        if parent_fd is None:
            return  # the way there changed (a link now?): leave it
        st = _lstat(name, parent_fd)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=parent_fd, ignore_errors=True)  # fd-based, no links
            return
        os.unlink(name, dir_fd=parent_fd)
        if name.endswith(".prof"):
            try:
                os.unlink(name[: -len(".prof")] + ".json", dir_fd=parent_fd)
            except FileNotFoundError:
                pass


def enforce_retention(
    logdir: Path, max_bytes: int, max_age_seconds: float, now: float, keep: Iterable[Path] = ()
) -> list[Path]:
    """Delete items older than ``max_age_seconds`` (0 = no age limit), then the oldest until the
    rest fit in ``max_bytes`` (0 = no size limit). ``keep`` (open event files) is never deleted.
    ``now`` is a wall time that does not jump (see TensorBoardExporter). Returns what was
    deleted."""
    kept = {Path(p) for p in keep}
    root = _open_logdir(logdir)
    if root is None:
        return []
    try:
        return _enforce(root, logdir, max_bytes, max_age_seconds, now, kept)
    finally:
        os.close(root)


def _enforce(
    root: int, logdir: Path, max_bytes: int, max_age: float, now: float, kept: set[Path]
) -> list[Path]:
    found = sorted(
        (item for run in _runs(root) for item in _run_items(root, logdir, run)),
        key=lambda item: item.mtime,
    )
    total = sum(item.size for item in found)
    removed: list[Path] = []
    for item in found:
        if item.path in kept:
            continue
        too_old = max_age > 0 and now - item.mtime > max_age
        too_big = max_bytes > 0 and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            _delete(root, item)
        except OSError:
            continue
        total -= item.size
        removed.append(item.path)
    _remove_empty_runs(root, {p.parent.name for p in kept}, now)
    return removed


EMPTY_RUN_GRACE_SECONDS = 600.0  # a capture may have just made the directory


def _rmdir_quietly(name: str, dir_fd: int) -> None:
    try:
        os.rmdir(name, dir_fd=dir_fd)  # only succeeds when empty; never follows a link
    except OSError:
        pass


def _remove_empty_runs(root: int, active: set[str], now: float) -> None:
    """Remove the run directories the daemon made that retention left empty (but for its note
    and empty ``plugins/profile`` and ``memory``); a directory without the note is the user's
    or an older xmon's, and stays."""
    for run in _runs(root):
        st = _lstat(run, root)
        if run in active or st is None or now - st.st_mtime < EMPTY_RUN_GRACE_SECONDS:
            continue
        with _opened(root, run) as run_fd:
            if run_fd is None or not _is_file(RUN_NOTE, run_fd):
                continue
            with _opened(run_fd, "plugins") as plugins_fd:
                if plugins_fd is not None:
                    _rmdir_quietly("profile", plugins_fd)
            _rmdir_quietly("plugins", run_fd)
            _rmdir_quietly("memory", run_fd)
            if {entry.name for entry in _entries(run_fd)} != {RUN_NOTE}:
                continue
            os.unlink(RUN_NOTE, dir_fd=run_fd)
        _rmdir_quietly(run, root)

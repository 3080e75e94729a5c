"""Commands the daemon sends into the job (trace capture, memory profile, HLO text).

Captures run on their own thread, one at a time, so a capture never blocks reporting, and a
second request while one runs is answered "busy" instead of queueing up. HLO requests are cheap
and independent of the profiler, so they run beside a capture. Nothing here raises into the job:
every failure becomes a ``CommandResult`` with an ``error_code`` the daemon turns into a status.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xmon.agent import internals
from xmon.agent.hlo_store import HloStore
from xmon.wire.proto import xmon_pb2

MAX_TRACE_MS = 10 * 60 * 1000
ANNOTATION_NAME = "xmon_capture.json"  # next to each trace: who asked for it, and why
STOP_WAIT_SECONDS = 30.0  # writing a trace takes seconds on a loaded host


class CommandRunner:
    def __init__(
        self, reply: Callable[[xmon_pb2.CommandResult], None], hlo: HloStore | None = None
    ) -> None:
        self._reply = reply
        self._hlo = hlo
        self._busy = threading.Lock()
        self._stop = threading.Event()
        self._last_export_second = 0
        self._received = 0.0  # when the running capture's command reached the job
        self._threads: list[threading.Thread] = []
        # Told the sample length the job needs (the execution sampler): at least, and at most.
        self.sample_length_listener: Callable[[float, float], None] | None = None

    def submit(self, command: xmon_pb2.DaemonCommand) -> None:
        kind = command.WhichOneof("kind")
        if kind == "sample_length":  # a setting: no result goes back
            listener = self.sample_length_listener
            if listener is not None:
                listener(command.sample_length.seconds, command.sample_length.max_seconds)
            return
        if kind == "get_hlo":
            self._start(self._run_hlo, command)
            return
        if not self._busy.acquire(blocking=False):
            self._reply(
                _result(command, False, "busy: a capture is already running in this job", "busy")
            )
            return
        self._received = time.perf_counter()
        self._start(self._run, command)

    def _start(self, target: Callable[[xmon_pb2.DaemonCommand], None], command: object) -> None:
        thread = threading.Thread(target=target, args=(command,), name="xmon-command", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def stop(self, wait: float = STOP_WAIT_SECONDS) -> None:
        """End a capture in progress now (its trace is written with what it recorded) and wait
        for it, at most ``wait`` seconds. The wait matters at exit: a thread still inside the
        profiler's C++ code when the interpreter finalizes is unwound there, and the job aborts
        ("FATAL: exception not rethrown")."""
        self._stop.set()
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self, command: xmon_pb2.DaemonCommand) -> None:
        try:
            kind = command.WhichOneof("kind")
            if kind == "start_trace":
                result = self._trace(command)
            elif kind == "save_memory_profile":
                result = self._memory_profile(command)
            else:
                result = _result(command, False, f"unknown command {kind!r}", "invalid")
        except Exception as exc:  # noqa: BLE001 - report, never raise into the job
            result = _result(command, False, f"{type(exc).__name__}: {exc}", "failed")
        finally:
            self._busy.release()
        self._reply(result)

    def _run_hlo(self, command: xmon_pb2.DaemonCommand) -> None:
        try:
            result = self._get_hlo(command)
        except Exception as exc:  # noqa: BLE001
            result = _result(command, False, f"{type(exc).__name__}: {exc}", "failed")
        self._reply(result)

    # -- trace -------------------------------------------------------------------------------
    def _trace(self, command: xmon_pb2.DaemonCommand) -> xmon_pb2.CommandResult:
        import jax.profiler

        request = command.start_trace
        if not 1 <= request.duration_ms <= MAX_TRACE_MS:
            return _result(command, False, f"duration must be 1..{MAX_TRACE_MS} ms", "invalid")
        log_dir = Path(request.log_dir)
        problem = writable_dir(log_dir) or _linked(log_dir, log_dir / "plugins",
                                                   log_dir / "plugins" / "profile")  # fmt: skip
        if problem is not None:
            return _result(command, False, problem, "not_writable")
        before = trace_sessions(log_dir)
        try:
            _start_trace(jax.profiler, log_dir)
        except RuntimeError as exc:  # the job is already tracing itself
            return _result(command, False, f"busy: {exc}", "busy")
        # The daemon turns executions counted in the trace into rates over this interval.
        recording_since = time.perf_counter()
        try:
            self._stop.wait(request.duration_ms / 1000.0)
            self._wait_for_a_new_second()
        finally:
            traced_seconds = time.perf_counter() - recording_since
            error = _stop_trace()
            self._last_export_second = int(time.time())
            written_in = time.perf_counter() - recording_since - traced_seconds
            return_freed_memory()
        new_sessions = trace_sessions(log_dir) - before
        if error is not None:
            for session in new_sessions:  # a half-written trace is worse than none
                shutil.rmtree(session, ignore_errors=True)
            return _result(command, False, f"could not write the trace: {error}", _code(error))
        written = sorted(str(p) for s in new_sessions for p in s.glob("*.xplane.pb"))
        for session in new_sessions:
            _write_quietly(session / ANNOTATION_NAME, request.annotation_json)
        message = f"recorded {traced_seconds:.1f} s of trace" + _where_time_went(
            recording_since - self._received, written_in
        )
        result = _result(command, True, message, paths=written)
        result.traced_seconds = traced_seconds
        return result

    def _wait_for_a_new_second(self) -> None:
        # Trace directories are named by the second they are written in; a capture finishing in
        # the same second as the previous one would overwrite it.
        while int(time.time()) <= self._last_export_second:
            time.sleep(0.05)

    # -- memory profile ------------------------------------------------------------------------
    def _memory_profile(self, command: xmon_pb2.DaemonCommand) -> xmon_pb2.CommandResult:
        import jax.profiler

        request = command.save_memory_profile
        path = Path(request.path)
        if path.suffix != ".prof" or not path.is_absolute():
            return _result(command, False, f"not a memory profile path: {path}", "invalid")
        problem = writable_dir(path.parent) or _linked(path.parent)
        if problem is not None:
            return _result(command, False, problem, "not_writable")
        started = time.perf_counter()
        try:
            # Written here, not by jax (which would follow a link or overwrite any file): a new
            # file only, never through a link.
            create_new(path, jax.profiler.device_memory_profile())
        except FileExistsError:
            return _result(command, False, f"{path} exists; not overwriting it", "invalid")
        except OSError as exc:
            return _result(command, False, f"could not write {path}: {exc}", _code(exc))
        took = time.perf_counter() - started
        _write_quietly(path.with_suffix(".json"), request.annotation_json)
        return _result(command, True, f"memory profile saved in {took:.3f} s", paths=[str(path)])

    # -- HLO -------------------------------------------------------------------------------------
    def _get_hlo(self, command: xmon_pb2.DaemonCommand) -> xmon_pb2.CommandResult:
        fingerprint = command.get_hlo.fingerprint
        if self._hlo is None:
            return _result(command, False, "this agent keeps no HLO text", "not_found")
        data = self._hlo.get(fingerprint)
        if data is None:
            why = (
                "its compressed text is larger than the agent keeps"
                if fingerprint in self._hlo.too_large
                else "it was evicted from the agent's bounded store, or never rendered"
            )
            return _result(command, False, f"HLO of {fingerprint} is not available: {why}",
                            "not_found")  # fmt: skip
        result = _result(command, True, f"{len(data)} bytes of gzipped HLO text")
        result.hlo_gzip = data
        return result


def writable_dir(directory: Path) -> str | None:
    """None if this process can create files in ``directory`` (made if missing), else why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".xmon-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write to {directory}: {exc.strerror or exc}"
    return None


def trace_sessions(log_dir: Path) -> set[Path]:
    """The session directories jax.profiler writes: <log_dir>/plugins/profile/<timestamp>."""
    root = log_dir / "plugins" / "profile"
    try:
        return {p for p in root.iterdir() if p.is_dir()}
    except OSError:
        return set()


def _stop_trace() -> Exception | None:
    import jax.profiler

    try:
        jax.profiler.stop_trace()
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. disk full while exporting
        _reset_profiler_state()
        return exc


def return_freed_memory() -> bool:
    """Give the memory the profiler freed back to the system; False where there is no way.

    A trace's XSpace (hundreds of MiB of small allocations on a busy job) is freed when the
    export ends, but glibc keeps freed memory in its arenas: measured on a CPU job, 10 captures
    of 2 s left ~0.5 GB more RSS than an untraced twin, almost all returned by ``malloc_trim``
    (docs/benchmarks.md, "Capture memory and latency").
    """
    trim = getattr(_libc(), "malloc_trim", None)  # glibc only (not musl)
    if trim is None:
        return False
    try:
        trim(0)
    except OSError:
        return False
    return True


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own symbols, the C library among them
    except OSError:
        return None


def _reset_profiler_state() -> None:
    # jax.profiler.stop_trace() keeps its session when the export fails, and every later
    # start_trace() in this process would then answer "Profile has already been started".
    try:
        state = internals.profiler_state()
        if state.session_running():
            state.reset()
    except Exception:  # noqa: BLE001 - a jax without that private state: nothing to reset
        pass


def _code(error: BaseException) -> str:
    number = getattr(error, "errno", None)
    text = str(error)
    if number in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text:
        return "no_space"
    if number in (errno.EACCES, errno.EPERM, errno.EROFS) or "Permission denied" in text:
        return "not_writable"
    return "failed"


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_new(path: Path, data: bytes) -> None:
    """Write ``data`` to a file that did not exist (never an existing file, never through a
    link: a daemon, or whoever answers on its socket, names the path); a partial file is
    removed."""
    fd = os.open(path, _NEW_FILE, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        _unlink_quietly(path)
        raise


def _linked(*directories: Path) -> str | None:
    """Why not to write into these directories (one is a link), else None."""
    for directory in directories:
        if directory.is_symlink():
            return f"{directory} is a link; not writing through it"
    return None


def _write_quietly(path: Path, text: str) -> None:
    if not text:
        return
    try:
        create_new(path, text.encode())
    except OSError:
        pass  # the capture itself is fine; its note is a nicety


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _start_trace(profiler: Any, log_dir: Path) -> None:
    options = _quiet_profile_options()
    if options is None:
        profiler.start_trace(str(log_dir))
    else:
        profiler.start_trace(str(log_dir), profiler_options=options)


def _where_time_went(start_seconds: float, write_seconds: float) -> str:
    """Why the request took longer than the trace: the job's start (its execution sampler holds
    the profiler for up to 0.25 s; a busy host starves the agent's thread) and the export."""
    return (
        f" (started {_short(start_seconds)} after the request reached the job, "
        f"written in {_short(write_seconds)})"
    )


def _short(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _quiet_profile_options() -> Any:
    """Profile options without the Python tracer, whose overhead the job should not pay."""
    import jax.profiler

    factory = getattr(jax.profiler, "ProfileOptions", None)
    if factory is None:  # jax < 0.6.1
        return None
    options = factory()
    options.python_tracer_level = 0
    return options


def _result(
    command: xmon_pb2.DaemonCommand,
    ok: bool,
    message: str,
    error_code: str = "",
    paths: list[str] | None = None,
) -> xmon_pb2.CommandResult:
    return xmon_pb2.CommandResult(
        command_id=command.command_id,
        ok=ok,
        message=message,
        paths=paths or [],
        error_code="" if ok else error_code or "failed",
    )

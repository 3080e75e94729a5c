"""Commands the daemon sends into the job (trace capture, memory profile).

They run on their own thread, one at a time, so a capture never blocks reporting, and a
second request while one runs is answered "busy" instead of queueing up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from xmon.proto import xmon_pb2

MAX_TRACE_MS = 10 * 60 * 1000


class CommandRunner:
    def __init__(self, reply: Callable[[xmon_pb2.CommandResult], None]) -> None:
        self._reply = reply
        self._busy = threading.Lock()
        self._stop = threading.Event()

    def submit(self, command: xmon_pb2.DaemonCommand) -> None:
        if not self._busy.acquire(blocking=False):
            self._reply(_result(command, False, "busy: a capture is already running in this job"))
            return
        thread = threading.Thread(
            target=self._run, args=(command,), name="xmon-command", daemon=True
        )
        thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, command: xmon_pb2.DaemonCommand) -> None:
        try:
            kind = command.WhichOneof("kind")
            if kind == "start_trace":
                result = self._trace(command)
            elif kind == "save_memory_profile":
                result = self._memory_profile(command)
            else:
                result = _result(command, False, f"unknown command {kind!r}")
        except Exception as exc:  # noqa: BLE001 - report, never raise into the job
            result = _result(command, False, f"{type(exc).__name__}: {exc}")
        finally:
            self._busy.release()
        self._reply(result)

    def _trace(self, command: xmon_pb2.DaemonCommand) -> xmon_pb2.CommandResult:
        import jax.profiler

        request = command.start_trace
        if not 1 <= request.duration_ms <= MAX_TRACE_MS:
            return _result(command, False, f"duration must be 1..{MAX_TRACE_MS} ms")
        log_dir = Path(request.log_dir)
        before = set(log_dir.rglob("*.xplane.pb")) if log_dir.exists() else set()
        options = _quiet_profile_options()
        try:
            if options is None:
                jax.profiler.start_trace(str(log_dir))
            else:
                jax.profiler.start_trace(str(log_dir), profiler_options=options)
        except RuntimeError as exc:  # the job is already tracing itself
            return _result(command, False, f"busy: {exc}")
        try:
            self._stop.wait(request.duration_ms / 1000.0)
        finally:
            jax.profiler.stop_trace()
        written = sorted(str(p) for p in set(log_dir.rglob("*.xplane.pb")) - before)
        return _result(command, True, f"traced {request.duration_ms} ms", written)

    def _memory_profile(self, command: xmon_pb2.DaemonCommand) -> xmon_pb2.CommandResult:
        import jax.profiler

        path = Path(command.save_memory_profile.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        jax.profiler.save_device_memory_profile(str(path))
        took = time.perf_counter() - started
        return _result(command, True, f"memory profile saved in {took:.3f} s", [str(path)])


def _quiet_profile_options() -> object | None:
    """Profile options without the Python tracer, whose overhead the job should not pay."""
    import jax.profiler

    factory = getattr(jax.profiler, "ProfileOptions", None)
    if factory is None:  # jax < 0.6.1
        return None
    options = factory()
    options.python_tracer_level = 0
    return options


def _result(
    command: xmon_pb2.DaemonCommand, ok: bool, message: str, paths: list[str] | None = None
) -> xmon_pb2.CommandResult:
    return xmon_pb2.CommandResult(
        command_id=command.command_id, ok=ok, message=message, paths=paths or []
    )

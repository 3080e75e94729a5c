"""The daemon's profiling side in one place: captures on request, triggered captures, and the
TensorBoard scalar export, driven from the daemon's tick."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from xmon.config import DaemonConfig
from xmon.config.profiling import ProfilingConfig
from xmon.daemon.capture import CaptureSpec, Profiler
from xmon.daemon.hub import Hub
from xmon.daemon.triggers import Fire, TriggerEngine, TriggerRules
from xmon.model import ExporterHealth, Job, Snapshot

if TYPE_CHECKING:
    from xmon.exporters.tensorboard import TensorBoardExporter

log = logging.getLogger("xmon.daemon")


class Profiling:
    def __init__(self, hub: Hub, config: DaemonConfig) -> None:
        settings: ProfilingConfig = getattr(config, "profiling", None) or ProfilingConfig()
        self.settings = settings
        self.profiler = Profiler(hub, settings, config.logdir)
        rules = TriggerRules.from_config(settings)
        self.triggers = TriggerEngine(rules) if settings.triggers else None
        # Built on the first snapshot with a job: a daemon with nothing to write loads no
        # TensorBoard protos and opens no files.
        self.tensorboard: TensorBoardExporter | None = None
        self._logdir = config.logdir
        self._export: asyncio.Task[None] | None = None

    def annotate(self, jobs: tuple[Job, ...]) -> tuple[Job, ...]:
        return self.profiler.annotate(jobs)

    def export_due(self, has_jobs: bool, horizon: float) -> bool:
        """Will the TensorBoard export write the snapshot built within ``horizon`` seconds?"""
        if not (self.settings.tensorboard and has_jobs):
            return False
        return self.tensorboard is None or self.tensorboard.due_within(horizon)

    def health(self) -> tuple[ExporterHealth, ...]:
        if not self.settings.tensorboard:
            return ()
        if self.tensorboard is None:  # nothing written yet, so nothing failed
            return (ExporterHealth("tensorboard", True, target=str(self._logdir)),)
        return (self.tensorboard.health(),)

    def _export_tensorboard(self, snapshot: Snapshot) -> None:
        """Runs in a worker thread (imports and file I/O stay off the daemon's loop)."""
        if self.tensorboard is None:
            if not snapshot.jobs:
                return
            from xmon.exporters.tensorboard import TensorBoardExporter

            self.tensorboard = TensorBoardExporter(
                self._logdir,
                interval_seconds=self.settings.tensorboard_interval_seconds,
                flush_seconds=self.settings.tensorboard_flush_seconds,
                max_bytes=self.settings.retention_max_bytes,
                max_age_seconds=self.settings.retention_max_age_seconds,
            )
        self.tensorboard.update(snapshot)

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Export and evaluate triggers without delaying the tick: file I/O runs in a thread,
        and a snapshot arriving while the previous one is still being written is skipped."""
        idle = self._export is None or self._export.done()
        if idle and self.export_due(bool(snapshot.jobs), 0.0):  # no thread woken for nothing
            self._export = asyncio.get_running_loop().create_task(
                asyncio.to_thread(self._export_tensorboard, snapshot)
            )
        if self.triggers is not None:
            for fire in self.triggers.evaluate(snapshot, self.profiler.busy_pids()):
                log.info("trigger %s fired for job %r pid %d: %s",
                         fire.trigger, fire.job_name, fire.pid, fire.reason)  # fmt: skip
                self.profiler.start_triggered(self._spec(fire))

    def _spec(self, fire: Fire) -> CaptureSpec:
        return CaptureSpec(
            pid=fire.pid,
            duration_seconds=self.settings.trigger_trace_seconds,
            memory=fire.memory,
            trigger=fire.trigger,
            reason=fire.reason,
        )

    async def close(self, final: Snapshot | None = None) -> None:
        """Stop captures and close the TensorBoard files, writing ``final`` (the daemon's last
        snapshot) first where the export interval held it back: a stop loses no point."""
        await self.profiler.close()
        if self._export is not None:
            await asyncio.gather(self._export, return_exceptions=True)
        if self.tensorboard is None and final is not None and self.export_due(bool(final.jobs), 0):
            await asyncio.to_thread(self._export_tensorboard, final)
        if self.tensorboard is not None:
            last = final if self.settings.tensorboard else None
            await asyncio.to_thread(self.tensorboard.close, last)

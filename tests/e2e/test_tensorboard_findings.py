"""A job's findings as TensorBoard text, read back with TensorBoard's own EventAccumulator under
the text plugin's tag: written when a finding appears, changes severity or ends, not every
export; bounded in bytes; written again into a rotated run file."""

from __future__ import annotations

import signal
from pathlib import Path

from diagnosis import pathology_jobs as scripts
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xmon.model import Finding
from xmon.wire.client import DaemonClient

from support.procs import start_job, wait_for
from support.profiling_procs import profiling_daemon
from support.tb_texts import texts


def test_a_real_recompile_storm_is_text_in_its_run(tmp_path: Path) -> None:
    """The pathology suite's growing-shape job through a real daemon: its recompile finding is
    text in its run, written when it appeared and changed, while scalars come every snapshot."""
    daemon = profiling_daemon(tmp_path / "daemon")
    stop = tmp_path / "storm.stop"
    storm = start_job(tmp_path, daemon.socket_path, scripts.GROWING_SHAPE, "storm",
                      JOB_STOP=str(stop))  # fmt: skip
    try:
        with DaemonClient(daemon.socket_path) as client:

            def found() -> tuple[int, Finding] | None:
                assert storm.alive(), storm.log()
                for j in client.get_snapshot().jobs:
                    hits = [f for f in j.findings if f.kind == "recompile"]
                    if hits and hits[0].severity == "error":  # it has appeared and changed
                        return j.pid, hits[0]
                return None

            pid, finding = wait_for(found, 120, "the storm's recompile error")
    finally:
        stop.touch()
        storm.stop()
        assert daemon.stop(signal.SIGTERM) == 0, daemon.log()  # flushes the event files
    run = Path(daemon.extra_env["XMON_LOGDIR"]) / f"storm-{pid}"
    written = texts(run)[f"findings/recompile/{finding.subject}"]
    severities = [t.split(" ", 1)[0] for _, t in written]
    # the warning, then the error; both in one export where the storm outran the daemon's tick
    assert severities in (["**WARNING**", "**ERROR**"], ["**ERROR**"]), severities
    assert "**fix:**" in written[0][1] and "bucket" in written[0][1]
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert len(acc.Scalars("steps/steps_total")) > len(written)  # text only on change

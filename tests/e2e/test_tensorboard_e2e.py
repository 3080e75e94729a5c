"""A real job's device memory, through the agent and the daemon, into TensorBoard event files
read back with tensorboard's own EventAccumulator."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xmon.wire.client import DaemonClient

from support.procs import json_written, start_job, wait_for
from support.profiling_procs import profiling_daemon

# Holds one numpy-made array per device (no temporaries) and then only sleeps, so the live
# bytes per device are fixed and known.
HOLDING_JOB = r"""
import json, os, pathlib, time
import numpy as np
import jax
import xmon

xmon.attach()
keep = [jax.device_put(np.ones(1024 * (i + 1), np.float32), d)
        for i, d in enumerate(jax.local_devices())]
out = pathlib.Path(os.environ["JOB_OUT"])
out.write_text(json.dumps({"pid": os.getpid(),
                           "bytes": {str(a.devices().pop().id): a.nbytes for a in keep}}))
stop = pathlib.Path(os.environ["JOB_STOP"])
while not stop.exists():
    time.sleep(0.05)
"""


def test_device_memory_scalars_equal_what_the_agent_reported(tmp_path: Path) -> None:
    daemon = profiling_daemon(tmp_path / "daemon")
    out, stop = tmp_path / "out.json", tmp_path / "stop"
    job = start_job(tmp_path, daemon.socket_path, HOLDING_JOB, "holder",
                    JOB_OUT=str(out), JOB_STOP=str(stop))  # fmt: skip
    try:

        def written() -> Any:
            assert job.alive(), job.log()
            return json_written(out)

        info = wait_for(written, 120, "the job to allocate")
        expected = {int(k): v for k, v in info["bytes"].items()}
        assert expected == {0: 4096, 1: 8192, 2: 12288, 3: 16384}
        with DaemonClient(daemon.socket_path) as client:

            def reported() -> dict[int, int | None] | None:
                jobs = [j for j in client.get_snapshot().jobs if j.pid == info["pid"]]
                got = {d.info.id: d.memory.in_use_bytes for d in jobs[0].devices} if jobs else {}
                return got if got == expected else None

            wait_for(reported, 60, "the daemon to hold the agent's memory numbers")
            wait_for(lambda: _points(client) >= 3, 30, "a few more snapshots")
    finally:
        stop.touch()
        job.popen.wait(60)
        assert daemon.stop(signal.SIGTERM) == 0, daemon.log()  # flushes the event files
    run = Path(daemon.extra_env["XMON_LOGDIR"]) / f"holder-{info['pid']}"
    acc = EventAccumulator(str(run))
    acc.Reload()
    for device, nbytes in expected.items():
        values = [e.value for e in acc.Scalars(f"memory/device_{device}/in_use_bytes")]
        assert values[-1] == nbytes and values.count(nbytes) >= 3, (device, values)
        assert set(values) <= {0.0, float(nbytes)}, "nothing but the agent's numbers"
    # The job marks no steps and runs nothing: its points wait at step 0 for its axis.
    steps = [e.step for e in acc.Scalars("memory/device_0/in_use_bytes")]
    assert steps == [0] * len(steps)


def _points(client: DaemonClient) -> int:
    seqs = getattr(_points, "seen", set())
    seqs.add(client.get_snapshot().seq)
    _points.seen = seqs  # type: ignore[attr-defined]
    return len(seqs)

"""Make the README's screenshot of ``xmon top``: a real daemon and the demo JAX job on 4 CPU
devices, drawn headless and saved as SVG.

    python -m xmon.top.screenshot docs/img/xmon-top.svg
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from xmon.analysis.peaks import DEMO_CPU_PEAK
from xmon.top.app import XmonTop
from xmon.top.feed import DaemonSource


def _start(tmp: Path) -> tuple[Path, list[subprocess.Popen[bytes]]]:
    socket_path = tmp / "xmon.sock"
    env = dict(os.environ, XMON_SOCKET=str(socket_path), XMON_PEAKS=json.dumps(DEMO_CPU_PEAK),
               XMON_LOGDIR=str(tmp / "tb"))  # fmt: skip
    quiet = subprocess.DEVNULL
    daemon = subprocess.Popen(
        [sys.executable, "-m", "xmon", "daemon", "--listen", "127.0.0.1:0"],
        env=env, stdout=quiet, stderr=quiet,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    job_env = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    job = subprocess.Popen(
        [sys.executable, "-m", "xmon.demo", "--steps", "0", "--report-every", "0"],
        env=job_env, stdout=quiet, stderr=quiet,
    )  # fmt: skip
    return socket_path, [job, daemon]


def _ready(app: XmonTop) -> bool:
    snapshot = app.snapshot
    return bool(
        snapshot
        and snapshot.jobs
        and len(snapshot.jobs[0].devices) == 4
        and snapshot.jobs[0].utilization.hardware_flops_utilization_ratio is not None
    )


async def _shoot(pilot: Any, out: Path, settle: float) -> None:
    app: XmonTop = pilot.app
    deadline = time.monotonic() + 120
    while not _ready(app):
        if time.monotonic() > deadline:
            raise SystemExit("the demo job did not show up within 120 s")
        await pilot.pause(0.2)
    await pilot.pause(settle)  # let steps/s settle and the history fill
    app.save_screenshot(filename=out.name, path=str(out.parent))
    await pilot.exit(None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", default="120x34", help="columns x rows (default %(default)s)")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds of data first")
    args = parser.parse_args(argv)
    columns, rows = (int(n) for n in args.size.split("x"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xmon-shot-") as tmp:
        socket_path, processes = _start(Path(tmp))
        try:
            app = XmonTop(DaemonSource(socket_path))
            auto = lambda pilot: _shoot(pilot, args.out.absolute(), args.settle)  # noqa: E731
            asyncio.run(app.run_async(headless=True, size=(columns, rows), auto_pilot=auto))
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

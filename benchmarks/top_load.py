"""``xmon top`` against a large host: 8 jobs of 4,096 programs each, reporting every second.

A real daemon (1 s period) takes 8 agent streams, each announcing 4,096 fully populated
programs (XLA's cost and memory figures, ids, compile times) and then a report a second whose
step counters move, as a training job's do. ``xmon top`` runs in a private tmux server on the
daemon's socket. Phases of the same length in the same run: the daemon with no view, then
with ``xmon top`` attached, on its overview and on its programs view (the whole catalogue).
Measured: the daemon's CPU in each phase (so the view's cost to the
daemon is their difference), the view's own CPU, and how often the screen changed (polled with
``tmux capture-pane``): the view redraws each second when the largest gap between changes
stays near the period.

    python benchmarks/top_load.py [--quick] [--seconds 30]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from xmon.wire.client import DaemonClient
from xmon.wire.proto import xmon_pb2

from common import cpu_seconds, machine, summary, table, tmux, today, write_section
from support.flood_attacks import RawStream, hello, in_part_frames
from support.procs import base_env, start_daemon, wait_for

JOBS = 8
PROGRAMS = 4096  # the most the daemon keeps of one job
PERIOD_SECONDS = 1.0
POLL_SECONDS = 0.1
BUDGET_GAP_SECONDS = 1.5  # a redraw each period, with a poll's and a tick's jitter
# The view a user opens first, and the one that draws the catalogue (sorted, 32,768 rows)
VIEWS = (("overview", "o"), ("programs", "p"))


def populated_programs(job: int) -> list[xmon_pb2.ProgramInfo]:
    """Programs as a real job's agent announces them: every figure set, each different."""
    return [
        xmon_pb2.ProgramInfo(
            fingerprint=f"{job:08x}{i:056x}",
            name=f"jit_train_step_{i}",
            fun_name=f"train_step_{i}",
            flops=1.5e9 + i,
            flops_xla=1.5e9 + i,
            transcendentals=2e6 + i,
            bytes_accessed=3e8 + i,
            bytes_accessed_xla=3e8 + i,
            argument_bytes=(64 << 20) + i,
            output_bytes=(32 << 20) + i,
            alias_bytes=16 << 20,
            temp_bytes=(128 << 20) + i,
            generated_code_bytes=1 << 20,
            peak_memory_bytes=(224 << 20) + i,
            num_devices=4,
            compile_seconds=0.5 + i / 1e4,
            compiled_at=1.7e9 + i,
            in_step=True,
            program_ids=[job * PROGRAMS + i],
            loops=1,
        )
        for i in range(PROGRAMS)
    ]


def agent_frames(job: int, stop: threading.Event) -> Iterator[bytes]:
    """A job's hello and catalogue, then a report a second with moving step counters."""
    pid = 50_000 + job
    yield hello(pid, devices=4)
    catalogue = xmon_pb2.AgentReport(
        seq=1,
        wall_time=time.time(),
        devices=[xmon_pb2.DeviceInfo(id=d, platform="cpu", device_kind="cpu") for d in range(4)],
        programs=populated_programs(job),
    )
    yield from in_part_frames(xmon_pb2.AgentMessage(report=catalogue).SerializeToString())
    seq, steps = 1, 0
    while not stop.wait(PERIOD_SECONDS):
        seq, steps = seq + 1, steps + 10 + job
        report = xmon_pb2.AgentReport(
            seq=seq,
            wall_time=time.time(),
            steps=xmon_pb2.StepCounters(
                steps_total=steps,
                steps_begun_total=steps,
                step_seconds_total=steps * 0.09,
                recent_step_seconds=[0.09 + job / 1000] * 10,
            ),
            memory=[
                xmon_pb2.DeviceMemorySample(
                    device_id=d, stats={"bytes_in_use": (1 << 30) + seq, "bytes_limit": 1 << 34}
                )
                for d in range(4)
            ],
        )
        yield xmon_pb2.AgentMessage(report=report).SerializeToString()


def screen_changes(server: Path, seconds: float) -> list[float]:
    """When the pane's text changed, over ``seconds``."""
    changes: list[float] = []
    last = tmux(server, "capture-pane", "-p", "-t", "top")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        screen = tmux(server, "capture-pane", "-p", "-t", "top")
        if screen and screen != last:
            changes.append(time.monotonic())
            last = screen
    return changes


def measure(seconds: float) -> list[list[object]]:
    with tempfile.TemporaryDirectory(prefix="xmon-top-load-") as scratch:
        work = Path(scratch)
        daemon = start_daemon(work, period=PERIOD_SECONDS, env={"XMON_VERIFY_PIDS": "off"})
        stop = threading.Event()
        agents = [RawStream(daemon.socket_path, agent_frames(j, stop)) for j in range(JOBS)]
        server = work / "tmux.sock"
        try:
            with DaemonClient(daemon.socket_path) as client:

                def loaded() -> bool:
                    jobs = client.get_snapshot().jobs
                    return len(jobs) == JOBS and all(len(j.programs) == PROGRAMS for j in jobs)

                wait_for(loaded, 120, f"{JOBS} jobs of {PROGRAMS} programs in the snapshot")
            daemon_process = psutil.Process(daemon.popen.pid)
            time.sleep(3 * PERIOD_SECONDS)  # the catalogue's first encodings behind us
            before = cpu_seconds(daemon_process)
            time.sleep(seconds)
            alone = (cpu_seconds(daemon_process) - before) / seconds

            command = shlex.join(
                [sys.executable, "-m", "xmon", "top", "--socket", str(daemon.socket_path)]
            )
            env = dict(base_env(), TERM="xterm-256color")
            subprocess.run(
                ["tmux", "-S", str(server), "new-session", "-d", "-s", "top", "-x", "200",
                 "-y", "50", command],
                env=env, check=True,
            )  # fmt: skip
            top_process = psutil.Process(int(tmux(server, "display", "-p", "-t", "top",
                                                  "#{pane_pid}").strip()))  # fmt: skip
            wait_for(lambda: "flood5000" in tmux(server, "capture-pane", "-p", "-t", "top"),
                     60, "xmon top's first data (the jobs' names)")  # fmt: skip
            rows = []
            for view, key in VIEWS:
                tmux(server, "send-keys", "-t", "top", key)
                time.sleep(3 * PERIOD_SECONDS)  # the view's first whole frame behind it
                daemon_before, top_before = cpu_seconds(daemon_process), cpu_seconds(top_process)
                started = time.monotonic()
                changes = screen_changes(server, seconds)
                elapsed = time.monotonic() - started
                with_view = (cpu_seconds(daemon_process) - daemon_before) / elapsed
                own = (cpu_seconds(top_process) - top_before) / elapsed
                assert top_process.is_running(), "xmon top exited under load"
                rows.append(_row(view, seconds, alone, with_view, own, changes))
        finally:
            tmux(server, "kill-server")
            stop.set()
            for agent in agents:
                agent.close()
            daemon.stop()
    return rows


def _row(
    view: str, seconds: float, alone: float, with_view: float, own: float, changes: list[float]
) -> list[object]:
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    spread = summary(gaps) if gaps else {"median": float("nan"), "max": float("nan")}
    worst = spread["max"]
    return [
        f"{JOBS} × {PROGRAMS:,}",
        view,
        f"{alone * 100:.1f} %",
        f"{with_view * 100:.1f} %",
        f"{own * 100:.1f} %",
        f"{len(changes)} in {seconds:.0f} s",
        f"{spread['median']:.2f} / {worst:.2f} s",
        "yes" if gaps and worst <= BUDGET_GAP_SECONDS else "**no**",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run, to check it works")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("top_load: tmux is needed (apt-get install -y tmux)")
    seconds = 6.0 if args.quick else args.seconds
    rows = measure(seconds)
    header = [
        "jobs × programs",
        "xmon top's view",
        "daemon CPU, no view",
        "daemon CPU, xmon top attached",
        "xmon top CPU",
        "screen changes",
        "gap between changes: median / max",
        f"redrawn each second (max gap ≤ {BUDGET_GAP_SECONDS} s)",
    ]
    body = (
        f"{today()} — {machine()}\n\n"
        f"`benchmarks/top_load.py`: a real daemon ({PERIOD_SECONDS:.0f} s period) and {JOBS} "
        f"agent streams, each announcing {PROGRAMS:,} fully populated programs, then a report "
        "a second whose step counters and memory move; `xmon top` in tmux (200 × 50) on the "
        f"daemon's socket. Phases of {seconds:.0f} s in the same run: the daemon alone, then "
        "with the view attached, on its overview and on its programs view (all "
        f"{JOBS * PROGRAMS:,} programs, sorted). CPU is % of one core; the screen is polled every "
        f"{POLL_SECONDS:.1f} s.\n\n" + table(header, rows)
    )
    print(body)
    write_section("top-load", "## xmon top under load\n\n" + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long ``xmon top`` takes to draw its first frame, and its first data, in a real terminal.

Runs ``xmon top`` in a private tmux server against a real daemon and polls ``tmux
capture-pane`` every few milliseconds from the moment the process is started: "first frame" is
when the title bar is on screen, "first data" when the daemon's first snapshot is drawn.
Each poll starts a tmux client, so on a small machine the numbers include some of that load.

    python benchmarks/top_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon import __version__

from common import machine, summary, table, tmux, today, write_section
from support.procs import base_env, start_daemon

POLL_SECONDS = 0.005


def one_run(server: Path, socket_path: Path, timeout: float = 60.0) -> tuple[float, float]:
    """(seconds to the first frame, seconds to the first snapshot drawn) of one start."""
    command = shlex.join([sys.executable, "-m", "xmon", "top", "--socket", str(socket_path)])
    env = dict(base_env(), TERM="xterm-256color")
    started = time.perf_counter()
    subprocess.run(["tmux", "-S", str(server), "new-session", "-d", "-s", "top", "-x", "120",
                    "-y", "40", command], env=env, check=True)  # fmt: skip
    frame = data = None
    while data is None and time.perf_counter() - started < timeout:
        screen = tmux(server, "capture-pane", "-p", "-t", "top")
        now = time.perf_counter() - started
        if frame is None and f"xmon {__version__}" in screen:
            frame = now
        if "connected to" in screen:
            data = now
        time.sleep(POLL_SECONDS)
    tmux(server, "send-keys", "-t", "top", "q")
    tmux(server, "kill-server")
    if frame is None or data is None:
        raise SystemExit(f"xmon top did not draw within {timeout:g} s")
    return frame, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("top_startup: needs tmux (apt-get install -y tmux)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="xmon-top-bench-"))
    daemon = start_daemon(workdir / "daemon", period=1.0)
    frames, firsts = [], []
    try:
        one_run(workdir / "tmux.sock", daemon.socket_path)  # warm the page cache
        for n in range(args.runs):
            frame, data = one_run(workdir / f"tmux{n}.sock", daemon.socket_path)
            frames.append(frame)
            firsts.append(data)
    finally:
        daemon.stop()
    rows = []
    for name, values in (("first frame", frames), ("first snapshot drawn", firsts)):
        s = summary(values)
        rows.append([name, f"{s['median'] * 1000:.0f} ms", f"{s['min'] * 1000:.0f} ms",
                     f"{s['max'] * 1000:.0f} ms"])  # fmt: skip
    body = (
        f"## xmon top start-up\n\n{today()} — {machine()}\n\n"
        f"{args.runs} runs of `xmon top` in tmux against a real daemon, from the shell command "
        "to the first frame on the screen (budget: under a second).\n\n"
        + table(["", "median", "min", "max"], rows)
    )
    write_section("top-startup", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

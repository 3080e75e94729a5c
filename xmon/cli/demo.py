"""``xmon demo``: a daemon plus a small JAX training job on CPU, to see xmon with no accelerator.

Both run as child processes exactly as a user would run them (``xmon daemon`` and a job with
the agent attached); they die with the demo whatever stops it (``xmon.cli.children``). The
daemon listens on the default socket, so ``xmon top``, ``xmon ls`` and ``xmon monitor`` in
another shell find it with no setting; where a daemon already listens there (or the path cannot
be created), on one of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon.analysis.peaks import DEMO_CPU_PEAK
from xmon.cli import children, flags
from xmon.wire import paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default_listen = f"127.0.0.1:{paths.DEFAULT_METRICS_PORT}"
    parser.add_argument(
        "--listen", default=default_listen, help="/metrics address (default %(default)s)"
    )
    parser.add_argument("--devices", type=int, default=4, help="virtual CPU devices (default 4)")
    parser.add_argument("--steps", type=int, default=0, help="training steps (0 = until Ctrl-C)")
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help=flags.socket_help("the demo daemon's socket").removesuffix(")")
        + ", or a temporary one where a daemon already listens there)",
    )


def _usable(path: Path) -> bool:
    """Can the demo's daemon listen at ``path`` without taking it from another daemon?"""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError:
        return False
    return os.access(path.parent, os.W_OK | os.X_OK) and not paths.someone_listens(path)


def demo_socket(requested: str | None, workdir: Path) -> tuple[Path, bool]:
    """The socket for the demo's daemon, and whether it is the one every command finds."""
    if requested:
        path = Path(requested)
        return path, path == paths.default_socket_path()
    default = paths.default_socket_path()
    if _usable(default):
        return default, True
    return workdir / "xmon.sock", False


def _wait_for_socket(path: Path, daemon: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if daemon.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def command(name: str, *, cwd: Path | None = None) -> str:
    """How to type the console script ``name`` of this install so that it runs as shown: the
    bare name where PATH finds this very script, else its path (relative to ``cwd`` when under
    it, as the README's ``.venv/bin/xmon``)."""
    script = Path(sys.executable).parent / name
    if not script.exists():
        return f"{sys.executable} -m xmon" if name == "xmon" else name
    found = shutil.which(name)
    if found and Path(found).resolve() == script.resolve():
        return name
    here = (cwd or Path.cwd()).resolve()
    absolute = script.parent.resolve() / name
    return str(absolute.relative_to(here)) if absolute.is_relative_to(here) else str(absolute)


def hints(listen: str, devices: int, socket_prefix: str, logdir: str) -> str:
    host, _, port = listen.rpartition(":")
    xmon, xprof = socket_prefix + command("xmon"), command("xprof")
    return (
        f"\nxmon demo: a JAX job on {devices} CPU devices reports to the daemon.\n"
        f"  metrics:  curl -s http://{host or 'localhost'}:{port}/metrics | grep xmon_job_\n"
        f"  views:    {xmon} top  |  {xmon} ls  |  {xmon} monitor\n"
        f"  traces:   {xmon} capture --job demo --duration 2s; then\n"
        f"            {xprof} server --logdir {logdir} --port 8791\n"
        "  Ctrl-C stops the demo.\n"
    )


def main(args: argparse.Namespace) -> int:
    if not 1 <= args.devices <= 64:
        print(f"xmon demo: --devices must be 1-64, got {args.devices}", file=sys.stderr)
        return 2
    try:
        with children.stopped_by_signals():
            return _run(args)
    except children.Stopped as stopped:
        return 128 + stopped.signum


def _run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="xmon-demo-"))
    socket_path, found_by_default = demo_socket(args.socket, workdir)
    env = dict(os.environ, XMON_SOCKET=str(socket_path), XMON_PEAKS=json.dumps(DEMO_CPU_PEAK))
    env.setdefault("XMON_LOGDIR", str(workdir / "tensorboard"))
    prefix = "" if found_by_default else f"XMON_SOCKET={socket_path} "
    daemon = job = None
    try:
        daemon = children.spawn(
            [sys.executable, "-m", "xmon", "daemon", "--listen", args.listen], env
        )
        if not _wait_for_socket(socket_path, daemon, timeout=15):
            print("xmon demo: the daemon did not start (see its message above)", file=sys.stderr)
            return 1
        job_env = dict(env, XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
        job = children.spawn(
            [sys.executable, "-m", "xmon.demo", "--steps", str(args.steps)], job_env
        )
        print(hints(args.listen, args.devices, prefix, env["XMON_LOGDIR"]), flush=True)
        return job.wait() if args.steps else _wait_forever(daemon, job)
    finally:
        # The job first, so its last report reaches a daemon that is still there.
        children.stop(job)
        children.stop(daemon)
        _leave(workdir, Path(env["XMON_LOGDIR"]))


def _leave(workdir: Path, logdir: Path) -> None:
    """The demo's TensorBoard logs stay for a look, and it says where; else the directory it
    made goes (nothing in it is anyone else's: mkdtemp made it for this run)."""
    try:
        kept = logdir.is_relative_to(workdir) and any(logdir.iterdir())
    except OSError:
        kept = False
    if kept:
        print(f"xmon demo: its TensorBoard logs stay in {logdir} (tensorboard --logdir "
              f"{logdir}); remove them with: rm -r {workdir}", file=sys.stderr)  # fmt: skip
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_forever(daemon: subprocess.Popen[bytes], job: subprocess.Popen[bytes]) -> int:
    while daemon.poll() is None and job.poll() is None:
        time.sleep(0.5)
    failed = daemon.returncode if daemon.returncode is not None else job.returncode
    return failed or 0

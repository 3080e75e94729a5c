"""``xmon run -- python train.py``: attach the agent with no change to the job's code."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from xmon.cli import flags

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "_bootstrap"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_job(parser, "name shown for this job (default: the script's name)")
    parser.add_argument("--period", type=float, help="agent report period in seconds")
    flags.add_socket(parser)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")


def agent_environment(args: argparse.Namespace, env: dict[str, str]) -> dict[str, str]:
    env = dict(env)
    env["XMON_AUTOATTACH"] = "1"
    python_path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + python_path if python_path else "")
    if args.job:
        env["XMON_JOB_NAME"] = args.job
    if args.period:
        env["XMON_PERIOD"] = str(args.period)
    if args.socket:
        env["XMON_SOCKET"] = args.socket
    return env


def main(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print(
            "xmon run: give the command to run, e.g. xmon run -- python train.py", file=sys.stderr
        )
        return 2
    if args.period is not None and not 0.01 <= args.period <= 3600:
        print(f"xmon run: --period must be 0.01-3600 seconds, got {args.period}", file=sys.stderr)
        return 2
    program = shutil.which(cmd[0])
    if program is None:
        print(f"xmon run: command not found: {cmd[0]}", file=sys.stderr)
        return 127
    env = agent_environment(args, dict(os.environ))
    os.execvpe(program, cmd, env)  # the job replaces us: its signals and exit code are its own
    return 0  # not reached

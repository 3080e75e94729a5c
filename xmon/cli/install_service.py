"""``xmon install-service``: run the daemon as a hardened systemd service on this host.

Writes ``/etc/systemd/system/xmon.service`` (ExecStart pointing at this xmon), the ``xmon``
system user (``/etc/sysusers.d/xmon.conf``), ``/etc/xmon/xmon.toml`` (only if absent), then
runs ``systemd-sysusers``, ``systemctl daemon-reload`` and ``systemctl enable --now xmon``.
``--dry-run`` prints all of that and changes nothing; ``--root DIR`` stages the files under
DIR (an image build) and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import xmon

UNIT = "xmon.service"
SOURCES = {"unit": UNIT, "sysusers": "xmon.sysusers", "config": "xmon.toml.example"}
# ProtectHome=yes hides these from the service: an xmon installed there cannot start.
HIDDEN = (Path("/home"), Path("/root"), Path("/run/user"))
# PrivateTmp=yes gives the service empty ones of its own: an xmon there is not found either.
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))


class InstallError(RuntimeError):
    """Why the service cannot be installed, worded for the person installing it."""


@dataclass(frozen=True)
class FileStep:
    path: Path
    text: str
    keep_existing: bool = False  # the config file: never overwrite an operator's settings


@dataclass
class Plan:
    files: list[FileStep] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print what would be done")
    parser.add_argument("--exec", dest="exec_path", metavar="PATH",
                        help="the xmon executable ExecStart runs (default: this xmon)")  # fmt: skip
    parser.add_argument("--root", metavar="DIR", default="/",
                        help="install under DIR instead of / and run no commands")  # fmt: skip
    parser.add_argument("--no-enable", action="store_true",
                        help="write the files but do not enable or start the service")  # fmt: skip


def source_file(name: str) -> Path:
    """A file of the systemd/ directory: next to the package in a source checkout, or in
    ``share/xmon/systemd`` of the installation prefix."""
    candidates = (
        Path(xmon.__file__).resolve().parent.parent / "systemd" / name,
        Path(sys.prefix) / "share" / "xmon" / "systemd" / name,
    )
    for path in candidates:
        if path.is_file():
            return path
    raise InstallError(f"cannot find {name} (looked in {', '.join(map(str, candidates))})")


def default_exec() -> Path:
    beside = Path(sys.executable).parent / "xmon"
    found = beside if beside.is_file() else shutil.which("xmon")
    if not found:
        raise InstallError("cannot find the xmon executable; pass --exec PATH")
    return Path(found).absolute()


def _interpreter(executable: Path) -> Path | None:
    """The interpreter of a ``#!`` script (a console script runs its virtualenv's python)."""
    try:
        with executable.open("rb") as f:
            first = f.readline(4096).decode(errors="replace")
    except OSError:
        return None
    return Path(first[2:].split()[0]) if first.startswith("#!") and first[2:].split() else None


def _venv_home(interpreter: Path) -> Path | None:
    """The base installation a virtualenv's interpreter runs from (``home`` in its
    ``pyvenv.cfg``): its standard library and libpython are there, not in the venv."""
    try:
        text = (interpreter.parent.parent / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def _needed_paths(executable: Path) -> list[Path]:
    """Every path the service needs to start this xmon: the script, its interpreter and
    where the interpreter's links lead (a venv's python is a link to the python it was made
    with: pyenv, uv and conda keep theirs under the home directory), the base installation
    a venv runs from, and the package."""
    paths = [executable]
    interpreter = _interpreter(executable)
    if interpreter is not None:
        paths += [interpreter, interpreter.resolve()]
        home = _venv_home(interpreter)
        if home is not None:
            paths += [home, home.resolve()]
    return [*paths, Path(xmon.__file__).resolve()]


def check_reachable(executable: Path) -> None:
    """Refuse an xmon the sandbox would hide (ProtectHome=yes) or that is not executable."""
    if not executable.is_absolute() or not os.access(executable, os.X_OK):
        raise InstallError(f"{executable} is not an executable file (pass --exec PATH)")
    paths = _needed_paths(executable)
    for hidden, setting in ((HIDDEN, "ProtectHome=yes"), (PRIVATE_TMP, "PrivateTmp=yes")):
        for path in paths:
            if any(path.is_relative_to(h) for h in hidden):
                raise InstallError(
                    f"{path} is under {', '.join(map(str, hidden))}, which the service cannot "
                    f"see ({setting}): install xmon with the system's Python elsewhere, e.g. "
                    "/usr/bin/python3 -m venv /opt/xmon && /opt/xmon/bin/pip install xmon"
                )


def render_unit(template: str, executable: Path) -> str:
    """The unit with ExecStart running ``executable``."""
    line = f"ExecStart={executable} daemon"
    rendered, count = re.subn(r"(?m)^ExecStart=.*$", lambda _: line, template)
    if count != 1:
        raise InstallError(f"{UNIT} must have exactly one ExecStart= line")
    return rendered


def build_plan(root: Path, executable: Path, enable: bool) -> Plan:
    text = {key: source_file(name).read_text() for key, name in SOURCES.items()}
    plan = Plan()
    plan.files.append(FileStep(root / "etc/systemd/system" / UNIT,
                               render_unit(text["unit"], executable)))  # fmt: skip
    plan.files.append(FileStep(root / "etc/sysusers.d/xmon.conf", text["sysusers"]))
    plan.files.append(FileStep(root / "etc/xmon/xmon.toml", text["config"], keep_existing=True))
    if root == Path("/"):
        plan.commands.append(["systemd-sysusers", "/etc/sysusers.d/xmon.conf"])
        plan.commands.append(["systemctl", "daemon-reload"])
        if enable:
            plan.commands.append(["systemctl", "enable", "--now", UNIT])
    return plan


def _describe(plan: Plan) -> list[str]:
    lines = []
    for step in plan.files:
        kept = step.keep_existing and step.path.exists()
        lines.append(f"{'keep existing' if kept else 'write'} {step.path}")
    lines += ["run " + " ".join(command) for command in plan.commands]
    return lines


def _preflight(root: Path, dry_run: bool) -> None:
    if dry_run or root != Path("/"):
        return
    if os.geteuid() != 0:
        raise InstallError("must run as root: sudo xmon install-service (or --dry-run to "
                           "see what it would do)")  # fmt: skip
    if not Path("/run/systemd/system").is_dir():
        raise InstallError("systemd is not running on this host; stage the files with "
                           "--root DIR instead")  # fmt: skip


def _execute(plan: Plan) -> None:
    for step in plan.files:
        if step.keep_existing and step.path.exists():
            continue
        step.path.parent.mkdir(parents=True, exist_ok=True)
        step.path.write_text(step.text)
        step.path.chmod(0o644)
    for command in plan.commands:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            reason = detail[-1] if detail else f"exit status {result.returncode}"
            raise InstallError(f"{' '.join(command)} failed: {reason}")


def main(args: argparse.Namespace) -> int:
    try:
        root = Path(args.root).absolute()
        executable = Path(args.exec_path).absolute() if args.exec_path else default_exec()
        check_reachable(executable)
        _preflight(root, args.dry_run)
        plan = build_plan(root, executable, enable=not args.no_enable)
        prefix = "would " if args.dry_run else ""
        for line in _describe(plan):
            print(prefix + line)
        if args.dry_run:
            print(f"\n# {plan.files[0].path}\n{plan.files[0].text}", end="")
            return 0
        _execute(plan)
    except (InstallError, OSError) as exc:
        print(f"xmon install-service: {exc}", file=sys.stderr)
        return 1
    if root == Path("/"):
        print("done. Let job users reach the agent socket: usermod -aG xmon USER")
        print(f"check: systemctl status {UNIT}; curl -s localhost:10049/metrics | head")
    return 0

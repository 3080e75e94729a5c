"""``xmon demo``'s children die with it whatever stops it, its job visibly learns, and the
commands it prints run as shown."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from xmon.cli.demo import command

from support.process_tree import assert_all_gone, descendants
from support.procs import REPO, base_env, free_port, wait_for


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_demo(
    tmp_path: Path, prefix: tuple[str, ...] = (), preexec: Callable[[], None] | None = None
) -> subprocess.Popen[bytes]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = base_env(XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_STATE_HOME=str(tmp_path / "st"),
                   TMPDIR=str(tmp_path / "tmp"))  # fmt: skip
    command_line = [*prefix, sys.executable, "-m", "xmon", "demo"]
    command_line += ["--listen", f"127.0.0.1:{free_port()}"]
    log = open(tmp_path / "demo.log", "wb")  # noqa: SIM115 - owned by the child
    with log:
        return subprocess.Popen(
            command_line, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=preexec,
        )  # fmt: skip


def wait_for_children(demo: subprocess.Popen[bytes], tmp_path: Path) -> list[psutil.Process]:
    """The demo's daemon and job, once both are running (the job need not have stepped)."""

    def both() -> list[psutil.Process] | None:
        assert demo.poll() is None, (tmp_path / "demo.log").read_text()
        found = [p for p in descendants(demo.pid) if "python" in p.name().lower()]
        commands = " ".join(" ".join(p.cmdline()) for p in found)
        return found if "xmon.demo" in commands and " daemon" in commands else None

    return list(wait_for(both, 60, "the demo's daemon and job"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_children_die_with_the_demo(tmp_path: Path, sig: signal.Signals) -> None:
    demo = start_demo(tmp_path)
    children = wait_for_children(demo, tmp_path)
    demo.send_signal(sig)
    code = demo.wait(30)
    assert_all_gone(children)
    assert code in (-sig, 128 + sig), code
    log = (tmp_path / "demo.log").read_text()
    assert "Traceback" not in log
    if sig != signal.SIGKILL:  # what it leaves behind, it says where; the rest goes
        left = list((tmp_path / "tmp").glob("xmon-demo-*"))
        assert not left or f"its TensorBoard logs stay in {left[0]}" in log, (left, log[-500:])


def test_children_die_when_timeout_expires(tmp_path: Path) -> None:
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout not found")
    demo = start_demo(tmp_path, prefix=("timeout", "-s", "TERM", "8"))
    children = wait_for_children(demo, tmp_path)
    assert demo.wait(60) == 124  # timeout's own status: it expired and its command stopped
    assert_all_gone(children)


def test_children_die_in_a_shell_that_ignores_sigint(tmp_path: Path) -> None:
    """A script's background job starts with SIGINT ignored: SIGTERM must still clean up."""
    demo = start_demo(tmp_path, preexec=_ignore_sigint)
    children = wait_for_children(demo, tmp_path)
    demo.send_signal(signal.SIGINT)  # ignored, as in that shell: nothing stops
    time.sleep(1)
    assert demo.poll() is None
    demo.send_signal(signal.SIGTERM)
    assert demo.wait(30) == 128 + signal.SIGTERM
    assert_all_gone(children)


def test_the_demo_job_learns(tmp_path: Path) -> None:
    """Loss must fall visibly: an ML user reads a flat loss as a broken demo."""
    env = base_env(
        XMON_LEDGER="off", XMON_SOCKET=str(tmp_path / "none.sock"),
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "xmon.demo", "--steps", "400", "--report-every", "200"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    losses = [float(x) for x in re.findall(r"loss (\S+)", result.stdout)]
    assert len(losses) == 3, result.stdout
    assert losses[-1] < losses[0] / 3, f"the loss does not fall: {losses}"


def test_printed_commands_run_as_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "xmon").exists():
        pytest.skip("xmon is not installed beside this interpreter")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command("xmon", cwd=bin_dir.parent.parent) == f"{bin_dir.parent.name}/bin/xmon"
    assert command("xmon", cwd=Path("/nonexistent-dir")) == str(bin_dir.resolve() / "xmon")
    shown = command("xmon", cwd=bin_dir.parent.parent)
    ran = subprocess.run([shown, "--version"], cwd=bin_dir.parent.parent, capture_output=True)
    assert ran.returncode == 0 and ran.stdout.startswith(b"xmon ")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert command("xmon") == "xmon"
    if (bin_dir / "xprof").exists():  # xprof comes with tensorboard-plugin-profile
        assert command("xprof") == "xprof"

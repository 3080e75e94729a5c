"""The systemd unit (systemd-analyze verify and security) and ``xmon install-service``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.cli.install_service import render_unit

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "xmon.service"
SYSUSERS = REPO / "systemd" / "xmon.sysusers"
XMON = Path(sys.executable).parent / "xmon"  # the console script of this environment
needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze missing (apt-get install -y systemd)",
)
# install-service refuses an xmon its sandbox would hide; these tests install this checkout's.
HIDDEN_CHECKOUT = any(
    p.is_relative_to(d)
    for p in (XMON.resolve(), REPO)
    for d in (Path("/tmp"), Path("/var/tmp"), Path("/home"), Path("/root"), Path("/run/user"))
)
installable = pytest.mark.skipif(
    HIDDEN_CHECKOUT, reason=f"this checkout ({REPO}) is where the service's sandbox hides it"
)


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    """The unit as install-service writes it, running this environment's xmon."""
    assert XMON.is_file(), "xmon console script missing: pip install -e ."
    path = tmp_path / "xmon.service"
    path.write_text(render_unit(UNIT.read_text(), XMON))
    return path


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@needs_analyze
def test_unit_verifies(unit: Path) -> None:
    result = analyze("verify", str(unit))
    assert result.returncode == 0 and result.stderr == "", result.stderr


@needs_analyze
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("ProtectHome=yes", "ProtectHomee=yes", "Unknown key 'ProtectHomee'"),
        ("ExecStart=", "ExecStart=/nonexistent", "is not executable"),
    ],
)
def test_verify_catches_a_broken_unit(
    tmp_path: Path, unit: Path, old: str, new: str, message: str
) -> None:
    """The checks above can fail: verify reports unknown keys (exit 0, on stderr, which
    test_unit_verifies requires empty) and missing executables (exit 1)."""
    broken = tmp_path / "broken" / "xmon.service"
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace(old, new, 1))
    result = analyze("verify", str(broken))
    assert message in result.stderr, result.stderr


@needs_analyze
def test_exposure_is_at_most_2(unit: Path) -> None:
    result = analyze("--offline=true", "--threshold=20", "security", str(unit))
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"Overall exposure level for xmon\.service: (\d+\.\d)", result.stdout)
    assert match and float(match.group(1)) <= 2.0, result.stdout


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="no systemd-sysusers")
def test_sysusers_creates_the_xmon_user(tmp_path: Path) -> None:
    result = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", "--dry-run", str(SYSUSERS)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Creating user 'xmon'" in result.stdout + result.stderr


# --- xmon install-service --------------------------------------------------------------------


def _venv_with_xmon(python: str, where: Path) -> Path:
    """A virtualenv made by ``python`` under ``where``, with an ``xmon`` script as pip would
    write it (its shebang the venv's python); the script's path."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where / "venv")], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    script = where / "venv" / "bin" / "xmon"
    script.write_text(f"#!{where / 'venv' / 'bin' / 'python'}\nimport xmon.cli.main\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def outside_the_sandbox() -> Iterator[Path]:
    """A directory the service's sandbox leaves visible (not under /home, /root or /tmp)."""
    if not os.access("/opt", os.W_OK):
        pytest.skip("needs a writable /opt: a directory the service's sandbox does not hide")
    where = Path(tempfile.mkdtemp(prefix="xmon-test-", dir="/opt"))
    try:
        yield where
    finally:
        shutil.rmtree(where)


@pytest.fixture
def system_venv_xmon(outside_the_sandbox: Path) -> Path:
    """The install the refusal's hint names: a venv of the system's Python under /opt."""
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3")
    return _venv_with_xmon("/usr/bin/python3", outside_the_sandbox)


def install(*args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "xmon", "install-service", *args], env=env,
                          capture_output=True, text=True, timeout=60, user=user)  # fmt: skip


def test_a_venv_whose_python_lives_under_home_is_refused(outside_the_sandbox: Path) -> None:
    """pyenv, uv and conda keep their Pythons under the home directory; a venv made with one
    under /opt links its python there, and its standard library is there: the unit then
    failed at boot with 203/EXEC while the dry run said all was well."""
    base = Path(sys.base_prefix).resolve()
    if not any(base.is_relative_to(d) for d in (Path("/home"), Path("/root"))):
        pytest.skip(f"this Python ({base}) is not under a home directory")
    from xmon.cli.install_service import InstallError, check_reachable

    script = _venv_with_xmon(sys.executable, outside_the_sandbox)
    with pytest.raises(InstallError, match=r"is under /home, /root, /run/user.*/usr/bin/python3"):
        check_reachable(script)
    result = install("--dry-run", "--exec", str(script))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert str(base) in result.stderr or ".pyenv" in result.stderr, result.stderr


@installable
def test_dry_run_lists_every_step_and_writes_nothing(system_venv_xmon: Path) -> None:
    """The install the refusal's hint names passes (a venv of the system's Python)."""
    result = install("--dry-run", "--exec", str(system_venv_xmon))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:6] == [
        "would write /etc/systemd/system/xmon.service",
        "would write /etc/sysusers.d/xmon.conf",
        "would " + ("keep existing" if Path("/etc/xmon/xmon.toml").exists() else "write")
        + " /etc/xmon/xmon.toml",
        "would run systemd-sysusers /etc/sysusers.d/xmon.conf",
        "would run systemctl daemon-reload",
        "would run systemctl enable --now xmon.service",
    ]  # fmt: skip
    assert f"ExecStart={system_venv_xmon} daemon" in lines


@needs_analyze
@installable
def test_root_stages_a_verifiable_unit_and_keeps_the_config(
    tmp_path: Path, system_venv_xmon: Path
) -> None:
    result = install("--root", str(tmp_path), "--exec", str(system_venv_xmon))
    assert result.returncode == 0, result.stderr
    staged = tmp_path / "etc/systemd/system/xmon.service"
    assert analyze("verify", str(staged)).returncode == 0
    assert (tmp_path / "etc/sysusers.d/xmon.conf").read_text() == SYSUSERS.read_text()
    config = tmp_path / "etc/xmon/xmon.toml"
    assert config.read_text() == (REPO / "systemd" / "xmon.toml.example").read_text()
    config.write_text("period_seconds = 5.0\n")  # an operator's edit survives a reinstall
    again = install("--root", str(tmp_path), "--exec", str(system_venv_xmon))
    assert f"keep existing {config}" in again.stdout
    assert config.read_text() == "period_seconds = 5.0\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--exec", "/nonexistent/xmon"), "/nonexistent/xmon is not an executable file"),
        (("--exec", "relative/xmon"), "is not an executable file"),
    ],
)
def test_bad_executable_is_one_line(args: tuple[str, ...], message: str) -> None:
    result = install(*args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_not_root_is_a_clear_error() -> None:
    try:
        result = install("--exec", str(XMON), user=65534)
    except PermissionError:
        pytest.skip("this Python is not executable by an unprivileged user")
    if "xmon install-service" not in result.stderr:
        pytest.skip(f"xmon does not start as an unprivileged user: {result.stderr[-200:]}")
    assert result.returncode == 1
    assert "must run as root: sudo xmon install-service" in result.stderr, result.stderr


@installable
def test_not_booted_with_systemd_is_a_clear_error(system_venv_xmon: Path) -> None:
    if Path("/run/systemd/system").is_dir() or os.geteuid() != 0:
        pytest.skip("only meaningful as root on a host without systemd as PID 1")
    result = install("--exec", str(system_venv_xmon))
    assert result.returncode == 1 and "systemd is not running" in result.stderr

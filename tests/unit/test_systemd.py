"""The systemd unit (systemd-analyze verify and security) and ``xmon install-service``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xmon.wire import paths

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "xmon.service"


def directives(text: str) -> list[tuple[str, str]]:
    """(key, value) of every directive, in order (repeated keys such as DeviceAllow kept)."""
    pairs = []
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            pairs.append((key.strip(), value.strip()))
    return pairs


def values(key: str) -> list[str]:
    return [v for k, v in directives(UNIT.read_text()) if k == key]


def test_hardening_keeps_the_devices_reachable() -> None:
    allowed = " ".join(values("DeviceAllow"))
    for node in ("nvidia", "/dev/accel", "char-accel", "char-vfio", "/dev/vfio/vfio"):
        assert node in allowed, node
    keys = {k for k, _ in directives(UNIT.read_text())}
    assert "PrivateDevices" not in keys and "MemoryDenyWriteExecute" not in keys
    expected = {"ProtectSystem": "strict", "NoNewPrivileges": "yes", "Restart": "on-failure",
                "RuntimeDirectory": "xmon", "StateDirectory": "xmon", "User": "xmon",
                "DevicePolicy": "closed", "CapabilityBoundingSet": ""}  # fmt: skip
    for key, value in expected.items():
        assert values(key) == [value], key
    assert values("ExecStart") == ["/usr/local/bin/xmon daemon"]


def test_directories_match_the_daemon_defaults() -> None:
    """systemd exports RuntimeDirectory/StateDirectory; the daemon's defaults follow them."""
    env = {"RUNTIME_DIRECTORY": "/run/xmon", "STATE_DIRECTORY": "/var/lib/xmon"}
    assert paths.default_socket_path(env) == paths.SYSTEM_SOCKET_PATH
    assert paths.default_logdir(env) == paths.SYSTEM_LOGDIR
    assert str(paths.DEFAULT_CONFIG_PATH) == "/etc/xmon/xmon.toml"  # ConfigurationDirectory


# --- xmon install-service --------------------------------------------------------------------


def test_an_xmon_under_home_is_refused(tmp_path: Path) -> None:
    """ProtectHome=yes would hide it from the service: say so instead of failing at boot."""
    from xmon.cli.install_service import InstallError, check_reachable

    script = tmp_path / "xmon"
    script.write_text("#!/home/user/venv/bin/python\n")
    script.chmod(0o755)
    with pytest.raises(InstallError, match="/home/user/venv/bin/python is under /home"):
        check_reachable(script)


@pytest.mark.parametrize("where", ["/tmp", "/var/tmp"])
def test_an_xmon_under_tmp_is_refused(tmp_path: Path, where: str) -> None:
    """PrivateTmp=yes gives the service an empty /tmp: an xmon there would never start."""
    from xmon.cli.install_service import InstallError, check_reachable

    script = tmp_path / "xmon"
    script.write_text(f"#!{where}/venv/bin/python\n")
    script.chmod(0o755)
    message = "is under /tmp, /var/tmp, which the service cannot see (PrivateTmp=yes)"
    with pytest.raises(InstallError, match=re.escape(message)):
        check_reachable(script)

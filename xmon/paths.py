"""Default locations, shared by the daemon, the agent and every CLI command.

Every function takes the environment as an argument so tests never patch os.environ.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

DEFAULT_METRICS_PORT = 10049  # first free port above Prometheus' exhausted 9100-9999 range
DEFAULT_CONFIG_PATH = Path("/etc/xmon/xmon.toml")
SYSTEM_SOCKET_PATH = Path("/run/xmon/xmon.sock")
SYSTEM_LOGDIR = Path("/var/lib/xmon/tensorboard")


def default_socket_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon listens and agents/CLIs connect.

    ``XMON_SOCKET`` wins; else ``$RUNTIME_DIRECTORY`` (systemd's RuntimeDirectory=) or
    ``/run/xmon`` when it exists (the system service); else ``$XDG_RUNTIME_DIR/xmon``; else
    ``/tmp/xmon-$UID``.
    """
    env = os.environ if env is None else env
    if env.get("XMON_SOCKET"):
        return Path(env["XMON_SOCKET"])
    if env.get("RUNTIME_DIRECTORY"):
        return Path(env["RUNTIME_DIRECTORY"].split(":")[0]) / "xmon.sock"
    if SYSTEM_SOCKET_PATH.exists():
        return SYSTEM_SOCKET_PATH
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "xmon" / "xmon.sock"
    return Path(f"/tmp/xmon-{os.getuid()}") / "xmon.sock"


def default_logdir(env: Mapping[str, str] | None = None) -> Path:
    """TensorBoard logdir: ``XMON_LOGDIR``, systemd's StateDirectory, or a per-user dir."""
    env = os.environ if env is None else env
    if env.get("XMON_LOGDIR"):
        return Path(env["XMON_LOGDIR"])
    if env.get("STATE_DIRECTORY"):
        return Path(env["STATE_DIRECTORY"].split(":")[0]) / "tensorboard"
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "xmon" / "tensorboard"


def grpc_target(socket_path: Path) -> str:
    return f"unix://{socket_path.resolve() if not socket_path.is_absolute() else socket_path}"


def someone_listens(socket_path: Path, timeout: float = 0.5) -> bool:
    """Whether a server accepts connections on this unix socket (a stale file answers no)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(timeout)
        probe.connect(str(socket_path))
    except OSError:
        return False
    finally:
        probe.close()
    return True

"""Default locations, shared by the daemon, the agent and every CLI command.

Every function takes the environment as an argument so tests never patch os.environ.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
from collections.abc import Collection, Mapping
from pathlib import Path

DEFAULT_METRICS_PORT = 10049  # first free port above Prometheus' exhausted 9100-9999 range
DEFAULT_CONFIG_PATH = Path("/etc/xmon/xmon.toml")
SYSTEM_SOCKET_PATH = Path("/run/xmon/xmon.sock")
SYSTEM_LOGDIR = Path("/var/lib/xmon/tensorboard")
SERVICE_USER = "xmon"  # systemd/xmon.service's User=


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


def trusted_owners() -> frozenset[int]:
    """Users whose socket the agent and the CLIs talk to: root, this process's user, and the
    ``xmon`` system user the packaged service runs as."""
    owners = {0, os.geteuid()}
    try:
        owners.add(pwd.getpwnam(SERVICE_USER).pw_uid)
    except KeyError:
        pass
    return frozenset(owners)


def directory_problem(directory: Path, owners: Collection[int]) -> str | None:
    """Why ``directory`` is not safe to hold xmon's socket, or None.

    Someone who can write the directory (or replace it, through an ancestor) can swap the
    socket: the directory must belong to one of ``owners`` and not be writable by others, and
    each ancestor must belong to one of them too and be either not writable by others or
    sticky (as ``/tmp`` is).
    """
    try:
        real = directory.resolve(strict=True)
        st = os.stat(real)
    except OSError as exc:
        return f"cannot inspect {directory}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid not in owners:
        return f"{directory} belongs to uid {st.st_uid}, not to root or this user"
    if st.st_mode & stat.S_IWOTH:
        return f"{directory} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o})"
    for ancestor in real.parents:
        st = os.stat(ancestor)
        writable = st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX
        if st.st_uid not in owners or writable:
            return f"{ancestor} can be replaced by another user (uid {st.st_uid}, mode " \
                f"{stat.S_IMODE(st.st_mode):04o})"  # fmt: skip
    return None


def socket_problem(socket_path: Path, owners: Collection[int] | None = None) -> str | None:
    """Why the agent must not talk to ``socket_path``, or None: it must be a socket owned by a
    trusted user in a directory only trusted users can change (``directory_problem``). A
    missing socket is not a problem (nothing listens: the connection simply fails)."""
    owners = trusted_owners() if owners is None else owners
    try:
        st = os.lstat(socket_path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect {socket_path}: {exc.strerror or exc}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{socket_path} is not a socket"
    if st.st_uid not in owners:
        return f"{socket_path} belongs to uid {st.st_uid}, not to root, this user or xmon"
    return directory_problem(socket_path.parent, owners)

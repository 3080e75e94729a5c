"""Daemon configuration: flags > ``XMON_*`` environment > TOML file > defaults.

Each layer is validated on its own, so a bad value fails loudly even when a higher layer
would have overridden it, and every :class:`ConfigError` names where the value came from
(``--period``, ``environment XMON_PERIOD``, ``config /etc/xmon/xmon.toml: period_seconds``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xmon import paths
from xmon.profiling_config import ProfilingConfig, build_profiling, check_profiling

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
PEAK_KEYS = ("flops_per_second", "memory_bytes", "memory_bytes_per_second")
PERIOD_RANGE = (0.05, 3600.0)


class ConfigError(ValueError):
    """A bad configuration value; the message names its source and key."""


@dataclass(frozen=True)
class DaemonConfig:
    """Resolved daemon settings. ``config_path`` is the TOML file that was read, if any."""

    listen_host: str = "0.0.0.0"  # /metrics HTTP address
    listen_port: int = paths.DEFAULT_METRICS_PORT  # 0 picks a free port (tests)
    socket_path: Path = field(default_factory=paths.default_socket_path)
    logdir: Path = field(default_factory=paths.default_logdir)
    period_seconds: float = 1.0
    # Explicit collector switches from the file; flags still win (see enabled_collectors).
    collectors: dict[str, bool] = field(default_factory=dict)
    # device_kind -> {flops_per_second | memory_bytes_per_second | memory_bytes: value}
    peaks: dict[str, dict[str, float]] = field(default_factory=dict)
    # [host] table plus XMON_SLICE / XMON_WORKER: this host's slice identity (xmon.topology)
    host: dict[str, Any] = field(default_factory=dict)
    program_series_limit: int = 50
    max_message_bytes: int = 16 * 1024 * 1024
    log_level: str = "info"
    agent_timeout_seconds: float = 10.0  # an agent silent this long is dropped
    max_agents: int = 1024  # agent streams at once; more are refused (bounds the job series)
    # Bounds against a flood or a buggy client (xmon.daemon.bounds; docs/reliability.md)
    max_devices_per_job: int = 256
    max_programs_per_job: int = 4096
    max_job_bytes: int = 16 * 1024 * 1024  # estimated state kept per job
    max_state_bytes: int = 128 * 1024 * 1024  # ... over all jobs
    max_connections: int = 4096  # open streams and connections on the socket
    max_subscribers: int = 64  # views streaming snapshots
    hello_timeout_seconds: float = 5.0  # a stream that sends no hello this long is closed
    subscriber_stall_seconds: float = 10.0  # a view that takes no snapshot this long is cut off
    metrics_max_connections: int = 512  # open /metrics connections
    # Check the pid each agent claims (xmon.daemon.hello): "require", "prefer" or "off"
    verify_pids: str = "prefer"
    # libtpu metrics servers to poll; empty: found from the chips' owners (xmon.collectors.tpu)
    tpu_metrics_addresses: tuple[str, ...] = ()
    # Seconds between full polls of a libtpu service (HBM capacity, latency distributions,
    # counters); its live gauges are fetched every period someone reads. 0: all every period.
    tpu_full_poll_seconds: float = 10.0
    sysfs_root: Path = Path("/sys")  # like node_exporter's --path.sysfs (host /sys elsewhere)
    procfs_root: Path = Path("/proc")
    # [profiling]: captures, triggered captures, TensorBoard export (xmon.profiling_config)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    config_path: Path | None = None


class _Problem(Exception):
    """What is wrong with one value; ``subkey`` locates it inside a table."""

    def __init__(self, message: str, subkey: str = "") -> None:
        super().__init__(message)
        self.subkey = subkey


def _show(value: Any) -> str:
    """A value as the user wrote it: TOML and JSON spell strings "x" and booleans true."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # TOML dates and times
        return str(value)


def _error(where: str, key: str, problem: _Problem) -> ConfigError:
    subject = ".".join(part for part in (key, problem.subkey) if part)
    return ConfigError(f"{where}: {subject} {problem}" if subject else f"{where}: {problem}")


# --- value validators: (value, from_text) -> clean value, or raise _Problem ---------------------


def _to_number(value: Any, from_text: bool) -> float | None:
    """A finite float, or None. Strings count only where they come from flags or env."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None  # bool is an int to Python, never a number to a user
    if isinstance(value, str) and not from_text:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _number_in(low: float, high: float) -> Callable[[Any, bool], float]:
    def check(value: Any, from_text: bool) -> float:
        number = _to_number(value, from_text)
        if number is None or not low <= number <= high:
            raise _Problem(f"must be a number between {low:g} and {high:g}, got {_show(value)}")
        return number

    return check


def _int_in(low: int, high: int) -> Callable[[Any, bool], int]:
    def check(value: Any, from_text: bool) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _Problem(f"must be an integer between {low} and {high}, got {_show(value)}")
        return value

    return check


def _text(value: Any, from_text: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Problem(f"must be a non-empty string, got {_show(value)}")
    return value.strip()


def _path(value: Any, from_text: bool) -> Path:
    return Path(_text(value, from_text)).expanduser()


def _log_level(value: Any, from_text: bool) -> str:
    if not isinstance(value, str) or value.strip().lower() not in LOG_LEVELS:
        raise _Problem(f"must be one of {', '.join(LOG_LEVELS)}, got {_show(value)}")
    return value.strip().lower()


def _verify_pids(value: Any, from_text: bool) -> str:
    choices = ("require", "prefer", "off")
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise _Problem(f"must be one of {', '.join(choices)}, got {_show(value)}")
    return value.strip().lower()


def _address(text: str) -> str:
    """A gRPC client target: HOST:PORT, [IPv6]:PORT, or unix:PATH / unix:///PATH."""
    if text.startswith("unix:"):
        if not text.removeprefix("unix:").strip("/"):
            raise _Problem(f"unix address without a path: {_show(text)}")
        return text
    host, _, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if not host or (":" in host and not bracketed) or not port.isdigit():
        raise _Problem(f"expected HOST:PORT or unix:PATH, got {_show(text)}")
    if not 0 < int(port) <= 65535:
        raise _Problem(f"port must be 1-65535, got {_show(text)}")
    return text


def _addresses(value: Any, from_text: bool) -> tuple[str, ...]:
    """A list of addresses; flags repeat, the environment separates them with commas."""
    if isinstance(value, str) and from_text:
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _Problem(f"must be a list of HOST:PORT or unix:PATH strings, got {_show(value)}")
    items = [v.strip() for v in value if v.strip()]
    if not items:
        raise _Problem(f"must name at least one address, got {_show(value)}")
    return tuple(dict.fromkeys(_address(v) for v in items))


def _collectors(value: Any, from_text: bool) -> dict[str, bool]:
    if not isinstance(value, Mapping):
        raise _Problem(f"must be a table of NAME = true/false, got {_show(value)}")
    for name, enabled in value.items():
        if not isinstance(enabled, bool):
            raise _Problem(f"must be true or false, got {_show(enabled)}", name)
    return dict(value)


HOST_TEXT_KEYS = ("slice", "accelerator_type")
HOST_INT_KEYS = ("worker", "slice_index", "num_slices", "num_workers")


def _host(value: Any, from_text: bool) -> dict[str, Any]:
    """The [host] table: slice identity overrides and whether to read GCE metadata."""
    if not isinstance(value, Mapping):
        raise _Problem(f"must be a table, got {_show(value)}")
    valid = ", ".join((*HOST_TEXT_KEYS, *HOST_INT_KEYS, "metadata"))
    clean: dict[str, Any] = {}
    for key, raw in value.items():
        try:
            if key in HOST_TEXT_KEYS:
                clean[key] = _text(raw, from_text)
            elif key in HOST_INT_KEYS:
                clean[key] = _int_in(0, 2**31 - 1)(raw, from_text)
            elif key == "metadata":
                if raw != "auto" and not isinstance(raw, bool):
                    raise _Problem(f'must be true, false or "auto", got {_show(raw)}')
                clean[key] = raw
            else:
                raise _Problem(f"is unknown; valid keys: {valid}")
        except _Problem as problem:
            raise _Problem(str(problem), key) from None
    return clean


def _worker_text(value: Any, from_text: bool) -> int:
    text = _text(value, from_text)
    if not text.isdigit():
        raise _Problem(f"must be a non-negative integer, got {_show(value)}")
    return int(text)


def _peaks(value: Any, from_text: bool) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise _Problem(f"must be a table of device kinds, got {_show(value)}")
    return {kind: _peak_entry(kind, entry) for kind, entry in value.items()}


def _peak_entry(kind: str, entry: Any) -> dict[str, float]:
    if not isinstance(entry, Mapping):
        raise _Problem(f"must be a table with keys {', '.join(PEAK_KEYS)}", kind)
    clean: dict[str, float] = {}
    for key, raw in entry.items():
        if key not in PEAK_KEYS:
            raise _Problem(f"is unknown; valid keys: {', '.join(PEAK_KEYS)}", f"{kind}.{key}")
        number = _to_number(raw, False)
        if number is None or number <= 0:
            raise _Problem(f"must be a positive number, got {_show(raw)}", f"{kind}.{key}")
        clean[key] = number
    return clean


def _profiling(value: Any, from_text: bool) -> dict[str, Any]:
    try:
        return check_profiling(value)
    except ValueError as exc:
        raise _Problem(str(exc)) from None


def _profiling_json(value: Any, from_text: bool) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _Problem(f'invalid JSON ({exc}); example: {{"triggers": false}}') from None
    return _profiling(data, False)


# Keys a TOML file may set, each with its validator. Names equal DaemonConfig fields.
_FILE_KEYS: dict[str, Callable[[Any, bool], Any]] = {
    "listen_host": _text,
    "listen_port": _int_in(0, 65535),
    "socket_path": _path,
    "logdir": _path,
    "period_seconds": _number_in(*PERIOD_RANGE),
    "log_level": _log_level,
    "program_series_limit": _int_in(1, 100_000),
    "max_message_bytes": _int_in(1024, 2**31 - 1),  # gRPC sizes are int32
    "agent_timeout_seconds": _number_in(0.1, 86_400),
    "max_agents": _int_in(1, 1_000_000),
    "max_devices_per_job": _int_in(1, 1_000_000),
    "max_programs_per_job": _int_in(1, 1_000_000),
    "max_job_bytes": _int_in(1 << 20, 2**40),
    "max_state_bytes": _int_in(1 << 20, 2**44),
    "max_connections": _int_in(8, 1_000_000),
    "max_subscribers": _int_in(1, 100_000),
    "hello_timeout_seconds": _number_in(0.1, 3600),
    "subscriber_stall_seconds": _number_in(0.1, 3600),
    "metrics_max_connections": _int_in(4, 100_000),
    "verify_pids": _verify_pids,
    "collectors": _collectors,
    "host": _host,
    "peaks": _peaks,
    "tpu_metrics_addresses": _addresses,
    "tpu_full_poll_seconds": _number_in(0, 3600),
    "sysfs_root": _path,
    "procfs_root": _path,
    "profiling": _profiling,
}


def _split_listen(text: Any, from_text: bool = True) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise _Problem(f"expected HOST:PORT, got {_show(text)}")
    host, _, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise _Problem(f"expected HOST:PORT (IPv6 in brackets: [::1]:PORT), got {_show(text)}")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise _Problem(f"expected HOST:PORT with PORT in 0-65535, got {_show(text)}")
    return host or "0.0.0.0", int(port_text)


def parse_listen(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port); ``":10049"`` means all IPv4 interfaces, ``[::1]:N``."""
    try:
        return _split_listen(text)
    except _Problem as problem:
        raise ConfigError(str(problem)) from None


# --- layers -----------------------------------------------------------------------------------


def _peaks_json(value: Any, from_text: bool) -> dict[str, dict[str, float]]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _Problem(
            f'invalid JSON ({exc}); example: {{"cpu": {{"memory_bytes": 1.6e10}}}}'
        ) from None
    return _peaks(data, False)


# (flag dest, flag, env var, DaemonConfig field, validator); "listen" sets host and port.
_OVERRIDES: tuple[tuple[str | None, str, str, str, Callable[[Any, bool], Any]], ...] = (
    ("listen", "--listen", "XMON_LISTEN", "listen", _split_listen),
    ("socket", "--socket", "XMON_SOCKET", "socket_path", _path),
    ("logdir", "--logdir", "XMON_LOGDIR", "logdir", _path),
    ("period", "--period", "XMON_PERIOD", "period_seconds", _number_in(*PERIOD_RANGE)),
    ("log_level", "--log-level", "XMON_LOG_LEVEL", "log_level", _log_level),
    (None, "", "XMON_PEAKS", "peaks", _peaks_json),
    (
        "tpu_metrics_address",
        "--tpu-metrics-address",
        "XMON_TPU_METRICS_ADDRESSES",
        "tpu_metrics_addresses",
        _addresses,
    ),
    ("path_sysfs", "--path.sysfs", "XMON_PATH_SYSFS", "sysfs_root", _path),
    ("path_procfs", "--path.procfs", "XMON_PATH_PROCFS", "procfs_root", _path),
    (None, "", "XMON_SLICE", "host.slice", _text),
    (None, "", "XMON_WORKER", "host.worker", _worker_text),
    (None, "", "XMON_PROFILING", "profiling", _profiling_json),
    (None, "", "XMON_VERIFY_PIDS", "verify_pids", _verify_pids),
)


def _arg(args: argparse.Namespace | Mapping[str, Any] | None, name: str | None) -> Any:
    if args is None or name is None:
        return None
    return args.get(name) if isinstance(args, Mapping) else getattr(args, name, None)


def _override_layer(
    args: argparse.Namespace | Mapping[str, Any] | None, env: Mapping[str, str] | None
) -> dict[str, Any]:
    """Values from flags (``env`` None) or from the environment (``args`` None)."""
    values: dict[str, Any] = {}
    for dest, flag, var, key, check in _OVERRIDES:
        raw = (env.get(var) or None) if env is not None else _arg(args, dest)
        if raw is None:
            continue
        try:
            clean = check(raw, True)
        except _Problem as problem:
            raise _error(flag if env is None else f"environment {var}", "", problem) from None
        if key == "listen":
            values["listen_host"], values["listen_port"] = clean
        elif key.startswith("host."):
            values.setdefault("host", {})[key.removeprefix("host.")] = clean
        else:
            values[key] = clean
    return values


MAX_CONFIG_BYTES = 1024 * 1024  # a config is a few KiB; /dev/zero would be read for ever


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(_read_config_text(path, where))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config {path}: invalid TOML: nested too deeply") from None


def _read_config_text(path: Path, where: str) -> str:
    """The file's text: a regular file of at most MAX_CONFIG_BYTES. Opened without blocking
    (a FIFO would wait for a writer), then checked on the open descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file {path}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{where}: cannot read {path}: Is a directory")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{where}: {path} is not a regular file")
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data.decode()


def _file_layer(path: Path, where: str) -> dict[str, Any]:
    data = _read_toml(path, where)
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in _FILE_KEYS:
            valid = ", ".join(sorted(_FILE_KEYS))
            raise ConfigError(f"config {path}: unknown key {_show(key)}; valid keys: {valid}")
        try:
            values[key] = _FILE_KEYS[key](raw, False)
        except _Problem as problem:
            raise _error(f"config {path}", key, problem) from None
    for key in ("socket_path", "logdir", "sysfs_root", "procfs_root"):  # relative to the file
        if key in values:
            values[key] = path.parent / values[key]
    return values


def _config_file(
    args: argparse.Namespace | Mapping[str, Any] | None,
    env: Mapping[str, str],
    path: Path | None,
    default_path: Path,
) -> tuple[Path, str] | None:
    """Which file to read, and how to name it in errors; ``None`` if there is none."""
    if _arg(args, "config") is not None:
        return Path(_arg(args, "config")).expanduser(), "--config"
    if env.get("XMON_CONFIG"):
        return Path(env["XMON_CONFIG"]).expanduser(), "environment XMON_CONFIG"
    if path is not None:
        return path, "config file"
    return (default_path, f"config {default_path}") if default_path.is_file() else None


def load_config(
    args: argparse.Namespace | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
    *,
    default_path: Path = paths.DEFAULT_CONFIG_PATH,
) -> DaemonConfig:
    """Resolve the daemon's settings; raise :class:`ConfigError` on any bad value.

    ``args`` holds the dests of :func:`add_daemon_arguments` (``None`` = not given). The file
    is ``--config``, else ``$XMON_CONFIG``, else ``path`` (each must exist), else
    ``default_path`` when it exists. Peak overrides merge per device kind and key.
    """
    env = os.environ if env is None else env
    chosen = _config_file(args, env, path, default_path)
    file_values = _file_layer(*chosen) if chosen else {}
    env_values, flag_values = _override_layer(None, env), _override_layer(args, None)
    values = {**file_values, **env_values, **flag_values}
    low, high = file_values.get("peaks", {}), env_values.get("peaks", {})
    values["peaks"] = {kind: {**low.get(kind, {}), **high.get(kind, {})} for kind in low | high}
    values["host"] = {**file_values.get("host", {}), **env_values.get("host", {})}
    try:  # per key: the environment wins over the file
        values["profiling"] = build_profiling(
            file_values.get("profiling", {}), env_values.get("profiling", {})
        )
    except ValueError as exc:
        raise ConfigError(f"profiling: {exc}") from None
    values.setdefault("socket_path", paths.default_socket_path(env))
    values.setdefault("logdir", paths.default_logdir(env))
    return DaemonConfig(**values, config_path=chosen[0] if chosen else None)


_FLAG_HELP = (  # (flag, metavar, help)
    ("--listen", "HOST:PORT", f"/metrics address (default 0.0.0.0:{paths.DEFAULT_METRICS_PORT})"),
    ("--socket", "PATH", "agent and control socket"),
    ("--logdir", "DIR", "TensorBoard logdir"),
    ("--period", "SECONDS", "sample period, 0.05-3600 (default 1)"),
    ("--config", "FILE", f"TOML config file (default {paths.DEFAULT_CONFIG_PATH} if present)"),
    ("--log-level", "LEVEL", f"one of {', '.join(LOG_LEVELS)} (default info)"),
)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the daemon's flags; every default is None so load_config can tell "not given"."""
    group = parser.add_argument_group("daemon")
    for flag, metavar, text in _FLAG_HELP:
        env_var = "XMON_" + flag[2:].replace("-", "_").upper()
        group.add_argument(flag, metavar=metavar, help=f"{text}; env {env_var}")
    add_hardware_arguments(group)


def add_hardware_arguments(parser: argparse.ArgumentParser | Any) -> None:
    """Flags the hardware collectors read (shared by the daemon and `xmon ls`)."""
    parser.add_argument(
        "--tpu-metrics-address", dest="tpu_metrics_address", action="append", metavar="ADDR",
        help="libtpu runtime metrics server (HOST:PORT or unix:PATH), repeatable; polled even "
        "when no TPU is visible (default: the ports the chips' owners were started with, else "
        "localhost:8431); env XMON_TPU_METRICS_ADDRESSES, comma-separated",
    )  # fmt: skip
    parser.add_argument(
        "--path.sysfs", dest="path_sysfs", metavar="DIR",
        help="where sysfs is mounted (default /sys); env XMON_PATH_SYSFS",
    )  # fmt: skip
    parser.add_argument(
        "--path.procfs", dest="path_procfs", metavar="DIR",
        help="where procfs is mounted (default /proc); env XMON_PATH_PROCFS",
    )  # fmt: skip

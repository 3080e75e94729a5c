"""The layers and their order: flags > ``XMON_*`` environment > TOML file > defaults.

Each layer is read and validated on its own (a layer is the dict of the settings it gives), then
:func:`load_config` lays them over each other into a :class:`DaemonConfig`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xmon.config import tables, values
from xmon.config.errors import ConfigError, Problem, config_error, did_you_mean, show
from xmon.config.profiling import build_profiling
from xmon.config.settings import DaemonConfig
from xmon.config.toml_file import read_toml
from xmon.config.values import PERIOD_RANGE, Validator
from xmon.wire import paths

# Keys a TOML file may set, each with its validator. Names equal DaemonConfig fields.
_FILE_KEYS: dict[str, Validator] = {
    "listen_host": values.non_empty_text,
    "listen_port": values.int_in(0, 65535),
    "socket_path": values.path,
    "logdir": values.path,
    "period_seconds": values.number_in(*PERIOD_RANGE),
    "log_level": values.log_level,
    "program_series_limit": values.int_in(1, 100_000),
    "max_message_bytes": values.int_in(1024, 2**31 - 1),  # gRPC sizes are int32
    "agent_timeout_seconds": values.number_in(0.1, 86_400),
    "max_agents": values.int_in(1, 1_000_000),
    "max_devices_per_job": values.int_in(1, 1_000_000),
    "max_programs_per_job": values.int_in(1, 1_000_000),
    "max_job_bytes": values.int_in(1 << 20, 2**40),
    "max_state_bytes": values.int_in(1 << 20, 2**44),
    "max_connections": values.int_in(8, 1_000_000),
    "max_inflight_bytes": values.int_in(16 << 20, 2**40),
    "max_pending_hellos": values.int_in(1, 1_000_000),
    "max_subscribers": values.int_in(1, 100_000),
    "hello_timeout_seconds": values.number_in(0.1, 3600),
    "subscriber_stall_seconds": values.number_in(0.1, 3600),
    "metrics_max_connections": values.int_in(4, 100_000),
    "verify_pids": values.verify_pids,
    "goodput_floor": values.number_in(0.0, 1.0),
    "collectors": tables.collectors,
    "host": tables.host,
    "peaks": tables.peaks,
    "tpu_metrics_addresses": values.addresses,
    "tpu_full_poll_seconds": values.number_in(0, 3600),
    "sysfs_root": values.path,
    "procfs_root": values.path,
    "profiling": tables.profiling,
}

# (flag dest, flag, env var, DaemonConfig field, validator); "listen" sets host and port.
_OVERRIDES: tuple[tuple[str | None, str, str, str, Validator], ...] = (
    ("listen", "--listen", "XMON_LISTEN", "listen", values.split_listen),
    ("socket", "--socket", "XMON_SOCKET", "socket_path", values.path),
    ("logdir", "--logdir", "XMON_LOGDIR", "logdir", values.path),
    ("period", "--period", "XMON_PERIOD", "period_seconds", values.number_in(*PERIOD_RANGE)),
    ("log_level", "--log-level", "XMON_LOG_LEVEL", "log_level", values.log_level),
    (None, "", "XMON_PEAKS", "peaks", tables.peaks_json),
    (
        "tpu_metrics_address",
        "--tpu-metrics-address",
        "XMON_TPU_METRICS_ADDRESSES",
        "tpu_metrics_addresses",
        values.addresses,
    ),
    ("path_sysfs", "--path.sysfs", "XMON_PATH_SYSFS", "sysfs_root", values.path),
    ("path_procfs", "--path.procfs", "XMON_PATH_PROCFS", "procfs_root", values.path),
    (None, "", "XMON_SLICE", "host.slice", values.non_empty_text),
    (None, "", "XMON_WORKER", "host.worker", tables.worker_text),
    (None, "", "XMON_PROFILING", "profiling", tables.profiling_json),
    (None, "", "XMON_VERIFY_PIDS", "verify_pids", values.verify_pids),
    (None, "", "XMON_GOODPUT_FLOOR", "goodput_floor", values.number_in(0.0, 1.0)),
)


def _arg(args: argparse.Namespace | Mapping[str, Any] | None, name: str | None) -> Any:
    if args is None or name is None:
        return None
    return args.get(name) if isinstance(args, Mapping) else getattr(args, name, None)


def _override_layer(
    args: argparse.Namespace | Mapping[str, Any] | None, env: Mapping[str, str] | None
) -> dict[str, Any]:
    """Values from flags (``env`` None) or from the environment (``args`` None)."""
    layer: dict[str, Any] = {}
    for dest, flag, var, key, check in _OVERRIDES:
        raw = (env.get(var) or None) if env is not None else _arg(args, dest)
        if raw is None:
            continue
        try:
            clean = check(raw, True)
        except Problem as problem:
            raise config_error(flag if env is None else f"environment {var}", "", problem) from None
        if key == "listen":
            layer["listen_host"], layer["listen_port"] = clean
        elif key.startswith("host."):
            layer.setdefault("host", {})[key.removeprefix("host.")] = clean
        else:
            layer[key] = clean
    return layer


def _file_layer(path: Path, where: str) -> dict[str, Any]:
    data = read_toml(path, where)
    layer: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in _FILE_KEYS:
            valid = ", ".join(sorted(_FILE_KEYS))
            raise ConfigError(
                f"config {path}: unknown key {show(key)}{did_you_mean(key, _FILE_KEYS)}; "
                f"valid keys: {valid}"
            )
        try:
            layer[key] = _FILE_KEYS[key](raw, False)
        except Problem as problem:
            raise config_error(f"config {path}", key, problem) from None
    for key in ("socket_path", "logdir", "sysfs_root", "procfs_root"):  # relative to the file
        if key in layer:
            layer[key] = path.parent / layer[key]
    return layer


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
    settings = {**file_values, **env_values, **flag_values}
    low, high = file_values.get("peaks", {}), env_values.get("peaks", {})
    settings["peaks"] = {kind: {**low.get(kind, {}), **high.get(kind, {})} for kind in low | high}
    settings["host"] = {**file_values.get("host", {}), **env_values.get("host", {})}
    try:  # per key: the environment wins over the file
        settings["profiling"] = build_profiling(
            file_values.get("profiling", {}), env_values.get("profiling", {})
        )
    except ValueError as exc:
        raise ConfigError(f"profiling: {exc}") from None
    settings.setdefault("socket_path", paths.default_socket_path(env))
    settings.setdefault("logdir", paths.default_logdir(env))
    return DaemonConfig(**settings, config_path=chosen[0] if chosen else None)

"""Daemon configuration: precedence, every error message, and the shipped example file."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from xmon.config import (
    ConfigError,
    DaemonConfig,
    add_daemon_arguments,
    load_config,
    parse_listen,
)
from xmon.wire import paths

EXAMPLE = Path(__file__).resolve().parents[3] / "systemd" / "xmon.toml.example"


def load(
    tmp_path: Path,
    toml: str | None = None,
    env: dict[str, str] | None = None,
    args: dict[str, Any] | None = None,
) -> DaemonConfig:
    """load_config with an optional file and no chance of reading the host's /etc/xmon."""
    path = None
    if toml is not None:
        path = tmp_path / "xmon.toml"
        path.write_text(toml)
    return load_config(args, env or {}, path, default_path=tmp_path / "absent.toml")


def test_defaults(tmp_path: Path) -> None:
    config = load(tmp_path)
    assert config == DaemonConfig(
        socket_path=paths.default_socket_path({}), logdir=paths.default_logdir({})
    )
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", paths.DEFAULT_METRICS_PORT)
    assert config.period_seconds == 1.0
    assert config.max_message_bytes == 16 * 1024 * 1024
    assert config.config_path is None


# (file line, env, flags, field, values from: default, file, env, flag)
PRECEDENCE = [
    (
        "period_seconds = 2.0",
        {"XMON_PERIOD": "3"},
        {"period": "4"},
        "period_seconds",
        (1.0, 2.0, 3.0, 4.0),
    ),
    (
        'log_level = "debug"',
        {"XMON_LOG_LEVEL": "WARNING"},
        {"log_level": "error"},
        "log_level",
        ("info", "debug", "warning", "error"),
    ),
    (
        "listen_port = 1001",
        {"XMON_LISTEN": "127.0.0.1:1002"},
        {"listen": "[::1]:1003"},
        "listen_port",
        (paths.DEFAULT_METRICS_PORT, 1001, 1002, 1003),
    ),
    (
        'listen_host = "10.0.0.1"',
        {"XMON_LISTEN": "127.0.0.1:1002"},
        {"listen": "[::1]:1003"},
        "listen_host",
        ("0.0.0.0", "10.0.0.1", "127.0.0.1", "::1"),
    ),
    (
        'socket_path = "/f/x.sock"',
        {"XMON_SOCKET": "/e/x.sock"},
        {"socket": "/a/x.sock"},
        "socket_path",
        (paths.default_socket_path({}), Path("/f/x.sock"), Path("/e/x.sock"), Path("/a/x.sock")),
    ),
    (
        'logdir = "/f/tb"',
        {"XMON_LOGDIR": "/e/tb"},
        {"logdir": "/a/tb"},
        "logdir",
        (paths.default_logdir({}), Path("/f/tb"), Path("/e/tb"), Path("/a/tb")),
    ),
]


@pytest.mark.parametrize(("line", "env", "flags", "key", "expected"), PRECEDENCE)
def test_precedence_flag_env_file_default(
    tmp_path: Path,
    line: str,
    env: dict[str, str],
    flags: dict[str, Any],
    key: str,
    expected: tuple[Any, Any, Any, Any],
) -> None:
    default, from_file, from_env, from_flag = expected
    assert getattr(load(tmp_path), key) == default
    assert getattr(load(tmp_path, line), key) == from_file
    assert getattr(load(tmp_path, line, env), key) == from_env
    assert getattr(load(tmp_path, line, env, flags), key) == from_flag


def test_file_only_keys(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "program_series_limit = 7\nmax_message_bytes = 2048\nagent_timeout_seconds = 3\n"
        "[collectors]\nhost = false\n",
    )
    assert config.program_series_limit == 7
    assert config.max_message_bytes == 2048
    assert config.agent_timeout_seconds == 3.0
    assert config.collectors == {"host": False}
    assert config.config_path == tmp_path / "xmon.toml"


def test_peaks_merge_per_kind_and_key(tmp_path: Path) -> None:
    toml = '[peaks.cpu]\nflops_per_second = 1e11\nmemory_bytes = 64e9\n[peaks."TPU v6 lite"]\n'
    toml += "memory_bytes_per_second = 1.6e12\n"
    env = {"XMON_PEAKS": '{"cpu": {"flops_per_second": 2e11}, "H100": {"memory_bytes": 8e10}}'}
    assert load(tmp_path, toml, env).peaks == {
        "cpu": {"flops_per_second": 2e11, "memory_bytes": 64e9},
        "TPU v6 lite": {"memory_bytes_per_second": 1.6e12},
        "H100": {"memory_bytes": 8e10},
    }


def test_which_file_is_read(tmp_path: Path) -> None:
    files = {}
    for name, number in (("flag", 1), ("env", 2), ("given", 3), ("default", 4)):
        files[name] = tmp_path / f"{name}.toml"
        files[name].write_text(f"listen_port = {number}\n")
    flag, env = {"config": str(files["flag"])}, {"XMON_CONFIG": str(files["env"])}

    def port(args: dict[str, Any] | None, env: dict[str, str], path: Path | None) -> int:
        return load_config(args, env, path, default_path=files["default"]).listen_port

    assert port(flag, env, files["given"]) == 1
    assert port(None, env, files["given"]) == 2
    assert port(None, {}, files["given"]) == 3
    assert port(None, {}, None) == 4
    assert load_config(None, {}, None, default_path=tmp_path / "absent.toml").config_path is None


def test_relative_paths_in_a_file_are_relative_to_it(tmp_path: Path) -> None:
    config = load(tmp_path, 'socket_path = "run/x.sock"\nlogdir = "tb"\n')
    assert config.socket_path == tmp_path / "run" / "x.sock"
    assert config.logdir == tmp_path / "tb"


def test_a_bad_value_fails_even_when_overridden(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="period_seconds must be"):
        load(tmp_path, 'period_seconds = "fast"', args={"period": "2"})


# (id, file text or None, env, flags, exact message); {path} is the file, {tmp} its directory.
NUMBERS = "must be a number between 0.05 and 3600"
BAD = [
    ("file-period-text", 'period_seconds = "fast"', {}, {},
     f'config {{path}}: period_seconds {NUMBERS}, got "fast"'),
    ("file-period-low", "period_seconds = 0.01", {}, {},
     f"config {{path}}: period_seconds {NUMBERS}, got 0.01"),
    ("file-period-bool", "period_seconds = true", {}, {},
     f"config {{path}}: period_seconds {NUMBERS}, got true"),
    ("file-port-range", "listen_port = 70000", {}, {},
     "config {path}: listen_port must be an integer between 0 and 65535, got 70000"),
    ("file-port-text", 'listen_port = "80"', {}, {},
     'config {path}: listen_port must be an integer between 0 and 65535, got "80"'),
    ("file-max-message-float", "max_message_bytes = 1.5e7", {}, {},
     "config {path}: max_message_bytes must be an integer between 1024 and 2147483647, "
     "got 15000000.0"),
    ("file-series-zero", "program_series_limit = 0", {}, {},
     "config {path}: program_series_limit must be an integer between 1 and 100000, got 0"),
    ("file-agent-timeout", "agent_timeout_seconds = 0", {}, {},
     "config {path}: agent_timeout_seconds must be a number between 0.1 and 86400, got 0"),
    ("file-log-level", 'log_level = "loud"', {}, {},
     "config {path}: log_level must be one of debug, info, warning, error, critical, "
     'got "loud"'),
    ("file-empty-socket", 'socket_path = ""', {}, {},
     'config {path}: socket_path must be a non-empty string, got ""'),
    ("file-unknown-key", "perod_seconds = 1", {}, {},
     'config {path}: unknown key "perod_seconds" (did you mean "period_seconds"?); valid keys: '
     "agent_timeout_seconds, collectors, goodput_floor, "
     "hello_timeout_seconds, host, listen_host, listen_port, log_level, logdir, "
     "max_agents, max_connections, max_devices_per_job, max_inflight_bytes, max_job_bytes, "
     "max_message_bytes, max_pending_hellos, max_programs_per_job, max_state_bytes, "
     "max_subscribers, metrics_max_connections, peaks, "
     "period_seconds, procfs_root, profiling, program_series_limit, socket_path, "
     "subscriber_stall_seconds, sysfs_root, tpu_full_poll_seconds, tpu_metrics_addresses, "
     "verify_pids"),
    ("file-goodput-floor", "goodput_floor = 1.5", {}, {},
     "config {path}: goodput_floor must be a number between 0 and 1, got 1.5"),
    ("file-verify-pids-unknown", 'verify_pids = "always"', {}, {},
     'config {path}: verify_pids must be one of require, prefer, off, got "always"'),
    ("file-collector-not-bool", '[collectors]\nhost = "yes"', {}, {},
     'config {path}: collectors.host must be true or false, got "yes"'),
    ("file-collectors-not-table", "collectors = 1", {}, {},
     "config {path}: collectors must be a table of NAME = true/false, got 1"),
    ("file-peak-key", "[peaks.cpu]\nflops = 1", {}, {},
     "config {path}: peaks.cpu.flops is unknown; valid keys: flops_per_second, memory_bytes, "
     "memory_bytes_per_second"),
    ("file-peak-key-typo", "[peaks.cpu]\nflops_per_secnd = 1", {}, {},
     'config {path}: peaks.cpu.flops_per_secnd is unknown (did you mean "flops_per_second"?); '
     "valid keys: flops_per_second, memory_bytes, memory_bytes_per_second"),
    ("file-peak-negative", "[peaks.cpu]\nflops_per_second = -1", {}, {},
     "config {path}: peaks.cpu.flops_per_second must be a positive number, got -1"),
    ("file-peaks-not-table", "peaks = 3", {}, {},
     "config {path}: peaks must be a table of device kinds, got 3"),
    ("flag-listen", None, {}, {"listen": "abc"}, '--listen: expected HOST:PORT, got "abc"'),
    ("flag-listen-port", None, {}, {"listen": "h:99999"},
     '--listen: expected HOST:PORT with PORT in 0-65535, got "h:99999"'),
    ("flag-period", None, {}, {"period": "fast"}, f'--period: {NUMBERS}, got "fast"'),
    ("flag-log-level", None, {}, {"log_level": "x"},
     '--log-level: must be one of debug, info, warning, error, critical, got "x"'),
    ("flag-config-missing", None, {}, {"config": "{tmp}/nope.toml"},
     "--config: no such file {tmp}/nope.toml"),
    ("env-listen-ipv6", None, {"XMON_LISTEN": "::1:80"}, {},
     'environment XMON_LISTEN: expected HOST:PORT (IPv6 in brackets: [::1]:PORT), got "::1:80"'),
    ("env-period-nan", None, {"XMON_PERIOD": "nan"}, {},
     f'environment XMON_PERIOD: {NUMBERS}, got "nan"'),
    ("env-log-level", None, {"XMON_LOG_LEVEL": "verbose"}, {},
     "environment XMON_LOG_LEVEL: must be one of debug, info, warning, error, critical, "
     'got "verbose"'),
    ("env-peaks-entry", None, {"XMON_PEAKS": '{"cpu": 5}'}, {},
     "environment XMON_PEAKS: cpu must be a table with keys flops_per_second, memory_bytes, "
     "memory_bytes_per_second"),
    ("env-peaks-value", None, {"XMON_PEAKS": '{"cpu": {"memory_bytes": "big"}}'}, {},
     'environment XMON_PEAKS: cpu.memory_bytes must be a positive number, got "big"'),
    ("env-config-missing", None, {"XMON_CONFIG": "{tmp}/nope.toml"}, {},
     "environment XMON_CONFIG: no such file {tmp}/nope.toml"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("toml", "env", "flags", "message"), [case[1:] for case in BAD], ids=[c[0] for c in BAD]
)
def test_bad_values_name_source_and_key(
    tmp_path: Path, toml: str | None, env: dict[str, str], flags: dict[str, Any], message: str
) -> None:

    def fill(text: str) -> str:
        return text.replace("{path}", str(tmp_path / "xmon.toml")).replace("{tmp}", str(tmp_path))

    env = {key: fill(value) for key, value in env.items()}
    flags = {key: fill(value) for key, value in flags.items()}
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, toml, env, flags)
    assert str(caught.value) == fill(message)


@pytest.mark.parametrize(
    ("toml", "pattern"),
    [
        (
            "period_seconds = = 1\n",
            r"config .*xmon\.toml: invalid TOML: .*\(at line 1, column \d+\)",
        ),
        ("a = 1\n[b\n", r"config .*xmon\.toml: invalid TOML: .*\(at line 2, column \d+\)"),
    ],
)
def test_toml_syntax_errors_give_the_line(tmp_path: Path, toml: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load(tmp_path, toml)


def test_invalid_peaks_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^environment XMON_PEAKS: invalid JSON \(.*example"):
        load(tmp_path, env={"XMON_PEAKS": "{cpu"})


def test_missing_given_path_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^config file: no such file .*absent2\.toml$"):
        load_config(None, {}, tmp_path / "absent2.toml", default_path=tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=r"^--config: cannot read .*: Is a directory$"):
        load_config({"config": str(tmp_path)}, {}, default_path=tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":10049", ("0.0.0.0", 10049)),
        ("[::1]:10049", ("::1", 10049)),
        ("[::]:80", ("::", 80)),
        ("localhost:0", ("localhost", 0)),
        ("10.1.2.3:65535", ("10.1.2.3", 65535)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["abc", "10049", "host:", "host:http", "h:-1", "::1:80", ""])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f'got "{text}"')):
        parse_listen(text)


def test_add_daemon_arguments_round_trip(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    untouched = parser.parse_args([])
    assert all(value is None for value in vars(untouched).values())
    args = parser.parse_args(
        ["--listen", "127.0.0.1:0", "--period", "0.5", "--log-level", "debug", "--socket",
         str(tmp_path / "s.sock"), "--logdir", str(tmp_path / "tb")]
    )  # fmt: skip
    config = load_config(args, {}, default_path=tmp_path / "absent.toml")
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 0)
    assert (config.period_seconds, config.log_level) == (0.5, "debug")
    assert (config.socket_path, config.logdir) == (tmp_path / "s.sock", tmp_path / "tb")
    help_text = parser.format_help()
    for env_var in ("XMON_LISTEN", "XMON_SOCKET", "XMON_PERIOD", "XMON_CONFIG"):
        assert env_var in help_text


def test_example_config_yields_the_defaults(tmp_path: Path) -> None:
    config = load_config(None, {}, EXAMPLE, default_path=tmp_path / "absent.toml")
    assert config.config_path == EXAMPLE
    assert dataclasses.replace(config, config_path=None) == load(tmp_path)


def test_example_config_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    for f in dataclasses.fields(DaemonConfig):
        if f.name != "config_path":
            assert re.search(rf"^#? ?\[?{f.name}\b", text, re.MULTILINE), f.name

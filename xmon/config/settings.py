"""The daemon's resolved settings and their defaults (:class:`DaemonConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xmon.config.profiling import ProfilingConfig
from xmon.wire import paths


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
    # [host] table plus XMON_SLICE / XMON_WORKER: this host's slice identity (xmon.daemon.topology)
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
    # bytes gRPC may hold in messages not yet whole, over all calls: calls at once times the
    # receive limit (xmon.wire.protocol); past it new calls are refused
    max_inflight_bytes: int = 256 * 1024 * 1024
    max_pending_hellos: int = 256  # streams waiting for their hello; past it the oldest goes
    max_subscribers: int = 64  # views streaming snapshots
    hello_timeout_seconds: float = 5.0  # a stream that sends no hello this long is closed
    subscriber_stall_seconds: float = 10.0  # a view that takes no snapshot this long is cut off
    metrics_max_connections: int = 512  # open /metrics connections
    # Check the pid each agent claims (xmon.daemon.intake.hello): "require", "prefer" or "off"
    verify_pids: str = "prefer"
    # Goodput below this share of the wall time is a finding (low_goodput) and, through
    # xmon_daemon_goodput_floor_ratio, the alert XmonJobLowGoodput
    goodput_floor: float = 0.5
    # libtpu metrics servers to poll; empty: found from the chips' owners (xmon.collectors.tpu)
    tpu_metrics_addresses: tuple[str, ...] = ()
    # Seconds between full polls of a libtpu service (HBM capacity, latency distributions,
    # counters); its live gauges are fetched every period someone reads. 0: all every period.
    tpu_full_poll_seconds: float = 10.0
    sysfs_root: Path = Path("/sys")  # like node_exporter's --path.sysfs (host /sys elsewhere)
    procfs_root: Path = Path("/proc")
    # [profiling]: captures, triggered captures, TensorBoard export (xmon.config.profiling)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    config_path: Path | None = None

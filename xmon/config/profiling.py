"""Settings of the daemon's profiling side: captures, triggered captures, TensorBoard export.

They live in one ``[profiling]`` table of the daemon's TOML file (and ``XMON_PROFILING`` as JSON,
which wins per key); :func:`parse_profiling` validates each key and names the bad one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class ProfilingConfig:
    # Captures (`xmon capture`, and triggered ones).
    capture_min_seconds: float = 0.05
    capture_max_seconds: float = 300.0
    capture_min_free_bytes: int = 64 * MIB  # refuse a capture when the logdir has less free
    # Program executions are counted in trace files up to this size (the daemon parses them);
    # 0 = do not count.
    trace_count_max_bytes: int = 256 * MIB
    # TensorBoard scalars: one run per job under the logdir.
    tensorboard: bool = True
    tensorboard_interval_seconds: float = 10.0  # 0 = every snapshot
    tensorboard_flush_seconds: float = 10.0
    retention_max_bytes: int = 10 * GIB  # whole logdir; oldest traces and event files go first
    retention_max_age_seconds: float = 30 * 86400.0
    # Triggered captures: a trace when a step takes > factor x the median of recent steps, a
    # memory profile when a device's allocator passes the ratio of its limit. 0 disables a rule.
    triggers: bool = True
    trigger_step_time_factor: float = 3.0
    trigger_min_steps: int = 20  # steps seen before the step rule may fire
    trigger_memory_ratio: float = 0.95
    trigger_trace_seconds: float = 2.0
    trigger_min_interval_seconds: float = 600.0  # per job and rule


# key -> (low, high, integer?)
_RANGES: dict[str, tuple[float, float, bool]] = {
    "capture_min_seconds": (0.001, 600.0, False),
    "capture_max_seconds": (0.001, 600.0, False),
    "capture_min_free_bytes": (0, 2**62, True),
    "trace_count_max_bytes": (0, 2**62, True),
    "tensorboard_interval_seconds": (0.0, 86400.0, False),
    "tensorboard_flush_seconds": (0.1, 3600.0, False),
    "retention_max_bytes": (0, 2**62, True),
    "retention_max_age_seconds": (0.0, 10 * 365 * 86400.0, False),
    "trigger_step_time_factor": (0.0, 1e6, False),
    "trigger_min_steps": (1, 100_000, True),
    "trigger_memory_ratio": (0.0, 1.0, False),
    "trigger_trace_seconds": (0.001, 600.0, False),
    "trigger_min_interval_seconds": (0.0, 30 * 86400.0, False),
}
_BOOLEANS = ("tensorboard", "triggers")
KEYS = tuple(f.name for f in dataclasses.fields(ProfilingConfig))


def check_profiling(value: Any) -> dict[str, Any]:
    """Validate a ``[profiling]`` table; raise ValueError("KEY must ...") on the first bad key."""
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a table with keys {', '.join(KEYS)}")
    clean: dict[str, Any] = {}
    for key, raw in value.items():
        if key not in KEYS:
            # xmon.config imports this module: its helper is imported only when needed
            from xmon.config.errors import did_you_mean

            hint = did_you_mean(key, KEYS)
            raise ValueError(f"{key} is unknown{hint}; valid keys: {', '.join(KEYS)}")
        clean[key] = _check(key, raw)
    return clean


def _check(key: str, raw: Any) -> Any:
    if key in _BOOLEANS:
        if not isinstance(raw, bool):
            raise ValueError(f"{key} must be true or false, got {raw!r}")
        return raw
    low, high, integer = _RANGES[key]
    ok_type = isinstance(raw, int) if integer else isinstance(raw, int | float)
    if isinstance(raw, bool) or not ok_type or not (math.isfinite(raw) and low <= raw <= high):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{key} must be {kind} between {low:g} and {high:g}, got {raw!r}")
    return int(raw) if integer else float(raw)


def build_profiling(*layers: Mapping[str, Any]) -> ProfilingConfig:
    """Merge checked layers (later wins per key) into a config; the duration bounds must nest."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    config = ProfilingConfig(**merged)
    if config.capture_min_seconds > config.capture_max_seconds:
        raise ValueError("capture_min_seconds must not exceed capture_max_seconds")
    return config

"""Single values: validators ``(value, from_text) -> clean value``, or raise :class:`Problem`.

``from_text`` is true where the value was typed as text (a flag, the environment) and false
where it comes from TOML or JSON, which have types: ``"0.5"`` is a number only in the first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xmon.config.errors import ConfigError, Problem, show

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
PERIOD_RANGE = (0.05, 3600.0)

Validator = Callable[[Any, bool], Any]


def to_number(value: Any, from_text: bool) -> float | None:
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


def number_in(low: float, high: float) -> Callable[[Any, bool], float]:
    def check(value: Any, from_text: bool) -> float:
        number = to_number(value, from_text)
        if number is None or not low <= number <= high:
            raise Problem(f"must be a number between {low:g} and {high:g}, got {show(value)}")
        return number

    return check


def int_in(low: int, high: int) -> Callable[[Any, bool], int]:
    def check(value: Any, from_text: bool) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Problem(f"must be an integer between {low} and {high}, got {show(value)}")
        return value

    return check


def non_empty_text(value: Any, from_text: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Problem(f"must be a non-empty string, got {show(value)}")
    return value.strip()


def path(value: Any, from_text: bool) -> Path:
    return Path(non_empty_text(value, from_text)).expanduser()


def log_level(value: Any, from_text: bool) -> str:
    if not isinstance(value, str) or value.strip().lower() not in LOG_LEVELS:
        raise Problem(f"must be one of {', '.join(LOG_LEVELS)}, got {show(value)}")
    return value.strip().lower()


def verify_pids(value: Any, from_text: bool) -> str:
    choices = ("require", "prefer", "off")
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise Problem(f"must be one of {', '.join(choices)}, got {show(value)}")
    return value.strip().lower()


def _address(text: str) -> str:
    """A gRPC client target: HOST:PORT, [IPv6]:PORT, or unix:PATH / unix:///PATH."""
    if text.startswith("unix:"):
        if not text.removeprefix("unix:").strip("/"):
            raise Problem(f"unix address without a path: {show(text)}")
        return text
    host, _, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if not host or (":" in host and not bracketed) or not port.isdigit():
        raise Problem(f"expected HOST:PORT or unix:PATH, got {show(text)}")
    if not 0 < int(port) <= 65535:
        raise Problem(f"port must be 1-65535, got {show(text)}")
    return text


def addresses(value: Any, from_text: bool) -> tuple[str, ...]:
    """A list of addresses; flags repeat, the environment separates them with commas."""
    if isinstance(value, str) and from_text:
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise Problem(f"must be a list of HOST:PORT or unix:PATH strings, got {show(value)}")
    items = [v.strip() for v in value if v.strip()]
    if not items:
        raise Problem(f"must name at least one address, got {show(value)}")
    return tuple(dict.fromkeys(_address(v) for v in items))


def split_listen(text: Any, from_text: bool = True) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise Problem(f"expected HOST:PORT, got {show(text)}")
    host, _, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise Problem(f"expected HOST:PORT (IPv6 in brackets: [::1]:PORT), got {show(text)}")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise Problem(f"expected HOST:PORT with PORT in 0-65535, got {show(text)}")
    return host or "0.0.0.0", int(port_text)


def parse_listen(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port); ``":10049"`` means all IPv4 interfaces, ``[::1]:N``."""
    try:
        return split_listen(text)
    except Problem as problem:
        raise ConfigError(str(problem)) from None

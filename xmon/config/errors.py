"""How a bad value is told: a :class:`ConfigError` naming its source and key.

A validator raises :class:`Problem` (what is wrong, and where inside a table); the layer that
read the value turns it into a :class:`ConfigError` that also names the source.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value; the message names its source and key."""


class Problem(Exception):
    """What is wrong with one value; ``subkey`` locates it inside a table."""

    def __init__(self, message: str, subkey: str = "") -> None:
        super().__init__(message)
        self.subkey = subkey


def show(value: Any) -> str:
    """A value as the user wrote it: TOML and JSON spell strings "x" and booleans true."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # TOML dates and times
        return str(value)


def config_error(where: str, key: str, problem: Problem) -> ConfigError:
    """The error for ``problem`` in ``key`` (and its subkey) of the source ``where``."""
    subject = ".".join(part for part in (key, problem.subkey) if part)
    return ConfigError(f"{where}: {subject} {problem}" if subject else f"{where}: {problem}")


def did_you_mean(key: object, valid: Iterable[str]) -> str:
    """`` (did you mean "period_seconds"?)`` for a misspelt key, "" when nothing is close."""
    close = difflib.get_close_matches(str(key), list(valid), n=1, cutoff=0.7)
    return f" (did you mean {show(close[0])}?)" if close else ""

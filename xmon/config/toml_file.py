"""Reading the TOML config file without trusting what the path names."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from xmon.config.errors import ConfigError

MAX_CONFIG_BYTES = 1024 * 1024  # a config is a few KiB; /dev/zero would be read for ever


def read_toml(path: Path, where: str) -> dict[str, Any]:
    """The file's TOML; ``where`` names how the file was chosen, for errors."""
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

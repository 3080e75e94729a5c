"""Daemon configuration: flags > ``XMON_*`` environment > TOML file > defaults.

Each layer is validated on its own, so a bad value fails loudly even when a higher layer
would have overridden it, and every :class:`ConfigError` names where the value came from
(``--period``, ``environment XMON_PERIOD``, ``config /etc/xmon/xmon.toml: period_seconds``).

* ``settings``: :class:`DaemonConfig`, the resolved settings and their defaults.
* ``errors``: :class:`ConfigError`, and how a validator's problem becomes one.
* ``values``: validators of single values (numbers, paths, addresses, ``HOST:PORT``).
* ``tables``: validators of the ``[collectors]``, ``[host]``, ``[peaks]`` and ``[profiling]``
  tables, and of the environment's JSON forms of them.
* ``toml_file``: reading the config file (a regular file, at most ``MAX_CONFIG_BYTES``).
* ``layers``: which file is read, each layer's values, and :func:`load_config`.
* ``flags``: the command-line flags.
"""

from xmon.config.errors import ConfigError
from xmon.config.flags import add_daemon_arguments, add_hardware_arguments
from xmon.config.layers import load_config
from xmon.config.settings import DaemonConfig
from xmon.config.tables import HOST_INT_KEYS, HOST_TEXT_KEYS, PEAK_KEYS
from xmon.config.toml_file import MAX_CONFIG_BYTES
from xmon.config.values import LOG_LEVELS, PERIOD_RANGE, parse_listen

__all__ = [
    "HOST_INT_KEYS",
    "HOST_TEXT_KEYS",
    "LOG_LEVELS",
    "MAX_CONFIG_BYTES",
    "PEAK_KEYS",
    "PERIOD_RANGE",
    "ConfigError",
    "DaemonConfig",
    "add_daemon_arguments",
    "add_hardware_arguments",
    "load_config",
    "parse_listen",
]

"""Collectors: each module registers itself by name (node_exporter style).

Importing this package registers every built-in collector; the daemon then builds flags with
:func:`add_collector_flags`, picks names with :func:`enabled_collectors` and runs them with a
:class:`CollectorRunner`.
"""

from xmon.collectors import (
    host,  # noqa: F401  (registers "host")
    nvml,  # noqa: F401  (registers "nvml")
    tpu,  # noqa: F401  (registers "tpu")
)
from xmon.collectors.base import (
    REGISTRY,
    CollectContext,
    Collector,
    CollectorOutput,
    CollectorRegistration,
    CollectorRegistry,
    add_collector_flags,
    enabled_collectors,
    register,
    registered,
)
from xmon.collectors.runner import CollectorRunner, merge_outputs

__all__ = [
    "REGISTRY",
    "CollectContext",
    "Collector",
    "CollectorOutput",
    "CollectorRegistration",
    "CollectorRegistry",
    "CollectorRunner",
    "add_collector_flags",
    "enabled_collectors",
    "merge_outputs",
    "register",
    "registered",
]

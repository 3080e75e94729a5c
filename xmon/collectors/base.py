"""The collector plug-in contract and its registry.

As in node_exporter, each collector module registers itself by name with a default, and the
registry generates ``--collector.NAME`` / ``--no-collector.NAME`` flags. Running them, with
per-collector timeouts and health, is :mod:`xmon.collectors.runner`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from xmon.config import ConfigError
from xmon.model import Device, HostSample, ProcessSample, RuntimeService

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")  # usable in a flag and as a Prometheus label value


@dataclass(frozen=True)
class CollectContext:
    """What the daemon hands every collector at the start of a tick."""

    pids: tuple[int, ...] = ()  # processes of the attached agents (from their streams)
    monotonic: float = 0.0  # the daemon's time.monotonic() at the start of the tick
    # Someone reads this tick's snapshot: a live view, a scrape due before the next tick, or
    # a TensorBoard write. The runner calls no collector on an unread tick unless the jobs
    # changed; a collector called then may skip costly refreshes (the tpu collector's RPCs).
    live: bool = True
    # A reader shows every metric: a scrape, a view, `xmon ls`, the first snapshot. False when
    # only TensorBoard reads the tick: its job scalars need the jobs' processes and the live
    # counters of the devices they hold, not (say) libtpu's latency distributions.
    full: bool = True


@dataclass(frozen=True)
class CollectorOutput:
    """What one collector found in one tick; the runner merges these across collectors."""

    host: HostSample | None = None
    devices: tuple[Device, ...] = ()
    processes: dict[int, ProcessSample] = field(default_factory=dict)  # keyed by pid
    present: bool = True  # False: this hardware is not on this host (not an error)
    runtime_services: tuple[RuntimeService, ...] = ()  # accelerator runtimes' metrics services


class Collector(Protocol):
    """One source of samples. ``collect`` is never called concurrently with itself.

    A collector may also define ``close() -> None``; the runner calls it on shutdown.
    """

    name: str

    def collect(self, context: CollectContext) -> CollectorOutput: ...


@dataclass(frozen=True)
class CollectorRegistration:
    name: str
    factory: Callable[..., Collector]
    default_enabled: bool = True
    help: str = ""
    takes_config: bool = False  # factory(config: DaemonConfig) instead of factory()


F = TypeVar("F", bound=Callable[..., Any])


def _flag_dest(name: str) -> str:
    return f"collector.{name}"


class CollectorRegistry:
    """Collectors by name. The module-level functions below use :data:`REGISTRY`."""

    def __init__(self) -> None:
        self._entries: dict[str, CollectorRegistration] = {}

    def register(
        self,
        name: str,
        factory: F | None = None,
        default_enabled: bool = True,
        help: str = "",
        takes_config: bool = False,
    ) -> Any:
        """Register ``factory`` (a no-argument callable, usually the collector class).

        With ``takes_config`` the factory is called with the daemon's ``DaemonConfig`` (for
        addresses and paths it needs). Without ``factory`` it returns a decorator:
        ``@register("host", help="...")``.
        """
        if factory is None:
            return lambda f: self.register(name, f, default_enabled, help, takes_config)
        if not _NAME.match(name):
            raise ValueError(f"collector name must match {_NAME.pattern}, got {name!r}")
        if name in self._entries:
            raise ValueError(f"collector {name!r} is already registered")
        self._entries[name] = CollectorRegistration(
            name, factory, default_enabled, help, takes_config
        )
        return factory

    def registered(self) -> list[CollectorRegistration]:
        return [self._entries[name] for name in sorted(self._entries)]

    def get(self, name: str) -> CollectorRegistration:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise ConfigError(f'unknown collector "{name}"; known collectors: {known}')
        return self._entries[name]

    def add_collector_flags(self, parser: argparse.ArgumentParser) -> None:
        """Add ``--collector.NAME`` and ``--no-collector.NAME`` for every collector."""
        group = parser.add_argument_group("collectors")
        for entry in self.registered():
            state = "enabled" if entry.default_enabled else "disabled"
            dest = _flag_dest(entry.name)
            group.add_argument(
                f"--collector.{entry.name}",
                dest=dest,
                action="store_const",
                const=True,
                default=None,
                help=f"{entry.help or entry.name} (default: {state})",
            )
            group.add_argument(
                f"--no-collector.{entry.name}",
                dest=dest,
                action="store_const",
                const=False,
                default=None,
                help=f"disable the {entry.name} collector",
            )

    def enabled_collectors(
        self,
        flags: argparse.Namespace | Mapping[str, bool | None] | None,
        config_map: Mapping[str, bool] | None = None,
    ) -> list[str]:
        """Names to run: flag > config (``DaemonConfig.collectors``) > registered default.

        ``flags`` is the parsed namespace, or a mapping of collector name -> True/False/None.
        """
        config_map = config_map or {}
        for name in config_map:
            try:
                self.get(name)
            except ConfigError as exc:
                raise ConfigError(f"config [collectors]: {exc}") from None
        names = []
        for entry in self.registered():
            if isinstance(flags, Mapping):
                flag = flags.get(entry.name)
            else:
                flag = getattr(flags, _flag_dest(entry.name), None)
            enabled = flag if flag is not None else config_map.get(entry.name)
            if enabled if enabled is not None else entry.default_enabled:
                names.append(entry.name)
        return names


REGISTRY: CollectorRegistry = CollectorRegistry()
register = REGISTRY.register
registered = REGISTRY.registered
add_collector_flags = REGISTRY.add_collector_flags
enabled_collectors = REGISTRY.enabled_collectors

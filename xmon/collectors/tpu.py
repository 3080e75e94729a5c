"""The ``tpu`` collector: TPU chips on this host and what libtpu's metrics service says of them.

Chips come from sysfs (PCI vendor 0x1ae0), their holders from procfs, so every chip shows up
even with no job running; numbers come from the runtime metrics service that the chip-owning
process serves (tpu-info's source). Which addresses to poll: the configured ones
(``--tpu-metrics-address``; polled even when sysfs shows no chip, e.g. in a container), else the
ones the holders were started with (``TPU_RUNTIME_METRICS_PORTS`` / ``_ADDRESS`` in
``/proc/PID/environ``), else ``localhost:8431`` when there are chips.

Per-device numbers land in ``Device.hardware``; every other metric the service lists is kept,
named as libtpu names it, in ``RuntimeService.metrics``. A service that does not answer is not
a collector error (no job is running): its ``RuntimeService`` says ``up=False`` and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from xmon.collectors.base import CollectContext, CollectorOutput, register
from xmon.collectors.tpu_client import RuntimeMetricsClient, ServiceUnavailable
from xmon.collectors.tpu_decode import decode_metric
from xmon.collectors.tpu_discovery import (
    DEFAULT_METRICS_PORT,
    TpuSlot,
    device_holders,
    device_slots,
    discover_functions,
    metrics_addresses,
    read_environ,
)
from xmon.config import DaemonConfig
from xmon.model import Device, HardwareCounters, RuntimeMetric, RuntimeService

log = logging.getLogger("xmon.collectors.tpu")

SOURCE = "tpu"
DEFAULT_ADDRESS = f"localhost:{DEFAULT_METRICS_PORT}"
# libtpu metric -> (HardwareCounters field, divisor). Names as tpu-info 0.14.2 reads them.
DEVICE_FIELDS: dict[str, tuple[str, float]] = {
    "tpu.runtime.hbm.memory.usage.bytes": ("memory_used_bytes", 1.0),
    "tpu.runtime.hbm.memory.total.bytes": ("memory_total_bytes", 1.0),
    "tpu.runtime.tensorcore.dutycycle.percent": ("duty_cycle_ratio", 100.0),
    "tpu.runtime.hbm.utilization.percent": ("memory_bandwidth_utilization_ratio", 100.0),
    "tpu.runtime.tensorcore.idle_duration.seconds": ("idle_seconds", 1.0),
}
_INTEGER_FIELDS = frozenset({"memory_used_bytes", "memory_total_bytes"})
# What `xmon top` shows moving: fetched every period (each RPC costs 0.25-1 ms of daemon CPU).
# Everything else the service lists (HBM capacity, idle time, queue size, uptime, cumulative
# latency distributions and counters) is fetched with the listing every ``full_poll_interval``
# and kept in between: slow or cumulative numbers that Prometheus scrapes far less often.
LIVE_METRICS = frozenset(
    {
        "tpu.runtime.hbm.memory.usage.bytes",
        "tpu.runtime.tensorcore.dutycycle.percent",
        "tpu.runtime.hbm.utilization.percent",
    }
)
_LIVE_FIELDS = frozenset(DEVICE_FIELDS[n][0] for n in LIVE_METRICS if n in DEVICE_FIELDS)


@dataclass(frozen=True)
class Target:
    """A metrics service to poll and, when one process alone serves it, that process' devices.

    libtpu numbers devices from 0 within its process; with the devices known, id k is the
    process' k-th device (unless k itself is one of them). Without, ids are host-wide.
    """

    address: str
    devices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Reading:
    """One poll of one service, device ids already mapped to xmon device indexes."""

    service: RuntimeService
    counters: dict[int, dict[str, float]]  # device index -> HardwareCounters field -> value
    missing: frozenset[str] = frozenset()  # listed, yet NOT_FOUND (megascale on one slice)


@dataclass(frozen=True)
class _Kept:
    """What the collector keeps of one service between polls."""

    reading: Reading  # the last full poll, its live metrics refreshed since
    polled_at: float  # when that full poll was made
    listed_at: float  # when the service last listed its metrics
    missing: frozenset[str]  # NOT_FOUND at that listing: not fetched again until the next


def map_device(runtime_id: int | None, devices: tuple[int, ...] | None) -> int | None:
    if runtime_id is None or devices is None or runtime_id in devices:
        return runtime_id
    return devices[runtime_id] if 0 <= runtime_id < len(devices) else runtime_id


def find_targets(
    slots: list[TpuSlot], holders: Mapping[str, tuple[int, ...]], procfs_root: Path
) -> list[Target]:
    """Services the chips' holders serve (from their environment), else libtpu's default."""
    served: dict[str, set[int]] = {}
    per_pid: dict[int, tuple[str, ...]] = {}
    for pid in sorted({pid for pids in holders.values() for pid in pids}):
        environ = read_environ(procfs_root, pid)
        per_pid[pid] = metrics_addresses(environ) if environ is not None else ()
        for address in per_pid[pid]:
            served.setdefault(address, set()).add(pid)
    if not served:
        return [Target(DEFAULT_ADDRESS)] if slots else []
    targets = []
    for address, pids in served.items():
        owner = next(iter(pids)) if len(pids) == 1 else None
        own = owner is not None and per_pid[owner] == (address,)
        held = tuple(s.index for s in slots if owner in _holders_of(s, holders))
        targets.append(Target(address, held if own and held else None))
    return targets


def _holders_of(slot: TpuSlot, holders: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    path = slot.function.device_path
    return holders.get(path, ()) if path is not None else ()


def read_service(
    client: RuntimeMetricsClient,
    target: Target,
    deadline: float,
    only: frozenset[str] | None = None,
    supported: tuple[str, ...] | None = None,
) -> Reading:
    try:
        poll = client.poll(deadline, only, supported)
    except ServiceUnavailable as exc:
        return Reading(RuntimeService(SOURCE, target.address, False, str(exc)), {})
    counters: dict[int, dict[str, float]] = {}
    others: list[RuntimeMetric] = []
    for name, metric in poll.metrics.items():
        for point in decode_metric(metric):
            device = map_device(point.device, target.devices)
            if name in DEVICE_FIELDS and device is not None and point.value is not None:
                field, divisor = DEVICE_FIELDS[name]
                counters.setdefault(device, {})[field] = point.value / divisor
            else:
                others.append(point if device == point.device else replace(point, device=device))
    service = RuntimeService(SOURCE, target.address, True, None, poll.supported, tuple(others))
    return Reading(service, counters, frozenset(poll.missing))


def refresh(kept: Reading, live: Reading) -> Reading:
    """A reading with its live metrics replaced by a newer poll of only those (repeatable:
    each live name keeps its place in libtpu's order)."""
    counters: dict[int, dict[str, float]] = {}
    for device, fields in kept.counters.items():
        slow = {k: v for k, v in fields.items() if k not in _LIVE_FIELDS}
        if slow:
            counters[device] = slow
    for device, fields in live.counters.items():
        counters.setdefault(device, {}).update(fields)
    fresh: dict[str, list[RuntimeMetric]] = {}
    for metric in live.service.metrics:
        fresh.setdefault(metric.name, []).append(metric)
    metrics: list[RuntimeMetric] = []
    for metric in kept.service.metrics:  # libtpu's order, each live name at its first place
        if metric.name not in LIVE_METRICS:
            metrics.append(metric)
        elif metric.name in fresh:
            metrics.extend(fresh.pop(metric.name))
    metrics.extend(m for group in fresh.values() for m in group)
    return Reading(replace(kept.service, metrics=tuple(metrics)), counters)


def hardware(fields: Mapping[str, float]) -> HardwareCounters:
    clean = {k: int(v) if k in _INTEGER_FIELDS else v for k, v in fields.items()}
    return HardwareCounters(**clean)  # type: ignore[arg-type]


def build_devices(
    slots: list[TpuSlot], holders: Mapping[str, tuple[int, ...]], readings: Iterable[Reading]
) -> tuple[Device, ...]:
    """One Device per slot; devices a service reports beyond the slots (no sysfs) appended."""
    counters: dict[int, dict[str, float]] = {}
    address: dict[int, str] = {}
    for reading in readings:
        for index, fields in reading.counters.items():
            for key, value in fields.items():
                counters.setdefault(index, {}).setdefault(key, value)
            address.setdefault(index, reading.service.address)
    devices = [
        replace(
            _slot_device(slot, holders),
            hardware=hardware(counters.get(slot.index, {})),
            runtime_address=address.get(slot.index),
        )
        for slot in slots
    ]
    for index in sorted(set(counters) - {s.index for s in slots}):
        extra = Device(index, "tpu", "TPU", SOURCE, hardware(counters[index]))
        devices.append(replace(extra, runtime_address=address[index]))
    return tuple(devices)


def _slot_device(slot: TpuSlot, holders: Mapping[str, tuple[int, ...]]) -> Device:
    """What sysfs and procfs tell of a device: no counters yet."""
    function = slot.function
    return Device(
        index=slot.index,
        platform="tpu",
        device_kind=slot.generation.device_kind,
        source=SOURCE,
        hardware=HardwareCounters(),
        pci_bus_id=function.bdf,
        pids=_holders_of(slot, holders),
        device_path=function.device_path,
        numa_node=function.numa_node,
        chip_index=slot.chip_index,
    )


class TpuCollector:
    """Not thread-safe by itself; the runner never calls ``collect`` concurrently.

    ``budget`` bounds one tick's RPCs (all services together). The procfs walk that finds the
    chips' holders is the costly part on a busy host, so it reruns at most every
    ``holder_interval`` seconds (and whenever the set of chips changes).

    Each unary RPC costs the daemon about half a millisecond of CPU (its own and gRPC's
    threads), so services are polled only for what the tick's readers show
    (``CollectContext``):

    - nobody reads it: no RPC, the last reading stands;
    - only TensorBoard (``full`` false): :data:`LIVE_METRICS`, and only if an attached job
      holds a chip (TensorBoard writes the hardware scalars of the job's own chips);
    - a scrape, a view or ``xmon ls``: everything when the last full poll is
      ``full_poll_interval`` seconds old (or the service was down), else
      :data:`LIVE_METRICS` against the kept listing: 3 RPCs instead of 14 on a multislice host.

    A full poll asks the service for its listing only every ``listing_interval`` seconds, and
    skips in between the metrics that answered NOT_FOUND after that listing (libtpu lists its
    megascale metrics on a single slice too, where each answers NOT_FOUND).
    """

    name = SOURCE

    def __init__(
        self,
        sysfs_root: Path = Path("/sys"),
        procfs_root: Path = Path("/proc"),
        addresses: tuple[str, ...] = (),
        budget: float = 0.8,
        holder_interval: float = 5.0,
        full_poll_interval: float = 10.0,
        listing_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sysfs_root, self.procfs_root = sysfs_root, procfs_root
        self.addresses = addresses
        self._budget, self._holder_interval, self._clock = budget, holder_interval, clock
        self.full_poll_interval = full_poll_interval
        self.listing_interval = listing_interval
        self._clients: dict[str, RuntimeMetricsClient] = {}
        self._kept: dict[str, _Kept] = {}  # by address
        self._holders: dict[str, tuple[int, ...]] = {}
        self._holders_at: float | None = None
        self._down: dict[str, str] = {}  # address -> last error, to log changes once

    def collect(self, context: CollectContext) -> CollectorOutput:
        slots = device_slots(discover_functions(self.sysfs_root))
        if not slots and not self.addresses:
            self._close_clients(set())
            return CollectorOutput(present=False)
        holders = self._scan_holders(slots)
        if self.addresses:
            targets = [Target(a) for a in self.addresses]
        else:
            targets = find_targets(slots, holders, self.procfs_root)
        deadline = self._clock() + self._budget
        jobs_hold_chips = not set(context.pids).isdisjoint(
            pid for pids in holders.values() for pid in pids
        )
        wanted = context.live and (context.full or jobs_hold_chips)
        readings = [self._read(t, deadline, wanted, context.full) for t in targets]
        self._close_clients({t.address for t in targets})
        for reading in readings:
            self._log_change(reading.service)
        return CollectorOutput(
            devices=build_devices(slots, holders, readings),
            runtime_services=tuple(r.service for r in readings),
        )

    def _read(self, target: Target, deadline: float, wanted: bool, full: bool) -> Reading:
        """This tick's reading of one service: kept, its live metrics refreshed, or new."""
        now = self._clock()
        kept = self._kept.get(target.address)
        if kept is not None and not wanted:
            return kept.reading
        client = self._client(target.address)
        if (
            kept is None
            or not kept.reading.service.up
            or (full and now - kept.polled_at >= self.full_poll_interval)
        ):
            return self._full_poll(client, target, deadline, kept, now)
        last = kept.reading
        fresh = read_service(client, target, deadline, LIVE_METRICS, last.service.supported)
        if not fresh.service.up:  # listed again once it answers: it may have restarted
            self._kept[target.address] = _Kept(fresh, now, now, frozenset())
            return fresh
        refreshed = refresh(last, fresh)
        self._kept[target.address] = replace(kept, reading=refreshed)
        return refreshed

    def _full_poll(
        self,
        client: RuntimeMetricsClient,
        target: Target,
        deadline: float,
        kept: _Kept | None,
        now: float,
    ) -> Reading:
        if (
            kept is None
            or not kept.reading.service.up
            or now - kept.listed_at >= self.listing_interval
        ):
            reading = read_service(client, target, deadline)
            self._kept[target.address] = _Kept(reading, now, now, reading.missing)
            return reading
        supported = kept.reading.service.supported
        present = frozenset(supported) - kept.missing
        reading = read_service(client, target, deadline, present, supported)
        if reading.service.up:
            self._kept[target.address] = replace(kept, reading=reading, polled_at=now)
        else:
            self._kept[target.address] = _Kept(reading, now, now, frozenset())
        return reading

    def _scan_holders(self, slots: list[TpuSlot]) -> dict[str, tuple[int, ...]]:
        paths = {s.function.device_path for s in slots if s.function.device_path}
        now = self._clock()
        stale = self._holders_at is None or now - self._holders_at >= self._holder_interval
        if stale or set(self._holders) != paths:
            self._holders = device_holders(self.procfs_root, paths)
            self._holders_at = now
        return self._holders

    def _client(self, address: str) -> RuntimeMetricsClient:
        if address not in self._clients:
            self._clients[address] = RuntimeMetricsClient(address, self._clock)
        return self._clients[address]

    def _close_clients(self, keep: set[str]) -> None:
        for address in set(self._clients) - keep:
            self._clients.pop(address).close()
            self._kept.pop(address, None)

    def _log_change(self, service: RuntimeService) -> None:
        before = self._down.get(service.address)
        if service.up and before is not None:
            log.info("libtpu metrics at %s answering again", service.address)
            del self._down[service.address]
        elif not service.up and before is None:
            log.info("libtpu metrics at %s not answering: %s", service.address, service.error)
            self._down[service.address] = service.error or ""

    def close(self) -> None:
        self._close_clients(set())


def from_config(config: DaemonConfig) -> TpuCollector:
    """The daemon's collector: RPCs take at most 60 % of a period (0.2 s to 2 s)."""
    return TpuCollector(
        sysfs_root=config.sysfs_root,
        procfs_root=config.procfs_root,
        addresses=config.tpu_metrics_addresses,
        budget=min(2.0, max(0.2, 0.6 * config.period_seconds)),
        full_poll_interval=config.tpu_full_poll_seconds,
    )


register(
    SOURCE,
    from_config,
    help="TPU chips (sysfs, procfs) and libtpu runtime metrics (HBM, duty cycle, latencies)",
    takes_config=True,
)

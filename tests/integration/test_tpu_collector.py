"""The tpu collector against fixture hosts and fake libtpu metrics servers (real gRPC)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from xmon.collectors import CollectorRunner
from xmon.collectors.base import CollectContext, CollectorOutput
from xmon.collectors.tpu import LIVE_METRICS, TpuCollector, from_config
from xmon.config import DaemonConfig
from xmon.model import DaemonStats, Snapshot, snapshot_from_dict, snapshot_to_dict

from support.fakes.libtpu_server import (
    HBM_UTIL,
    HLO_TIMING,
    MEGASCALE,
    MIB,
    QUEUE,
    SERVED,
    Fakes,
    Scenario,
    scenario,
)
from support.fakes.tpu_host import FIXTURES, HOSTS, Proc, write_host

V5E = FIXTURES / "v5e-4"


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


def collect(root: Path, *addresses: str, **kw: object) -> tuple[TpuCollector, CollectorOutput]:
    collector = TpuCollector(root / "sys", root / "proc", tuple(addresses), **kw)  # type: ignore[arg-type]
    return collector, collector.collect(CollectContext())


def test_v5e_host_with_a_job(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    collector, out = collect(V5E, fake.address)
    collector.close()
    loads = fake.scenario.devices
    assert [d.index for d in out.devices] == [0, 1, 2, 3]
    for device, load in zip(out.devices, loads, strict=True):
        hw = device.hardware
        assert (hw.memory_used_bytes, hw.memory_total_bytes) == (load.hbm_used, load.hbm_total)
        assert hw.duty_cycle_ratio == pytest.approx(load.duty_pct / 100)
        assert hw.memory_bandwidth_utilization_ratio == pytest.approx(load.hbm_util_pct / 100)
        assert hw.idle_seconds == 0.0 and hw.utilization_ratio is None and hw.power_watts is None
        assert (device.platform, device.device_kind, device.source) == ("tpu", "TPU v5 lite", "tpu")
        assert device.pids == (4242,) and device.runtime_address == fake.address
    (service,) = out.runtime_services
    assert service.up and service.error is None and set(service.supported) == set(SERVED)
    names = {m.name for m in service.metrics}
    assert names == {"tpu.runtime.uptime.seconds.gauge", QUEUE, HLO_TIMING}  # single slice
    timings = [m for m in service.metrics if m.name == HLO_TIMING]
    assert [m.device for m in timings] == [0, 1, 2, 3]
    assert all(
        m.unit == "seconds" and m.distribution and m.distribution.count == 43 for m in timings
    )


def test_one_rpc_per_listed_metric_on_a_full_poll(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, unlisted=frozenset({HBM_UTIL})))
    collector, out = collect(V5E, fake.address)
    assert fake.calls == {"ListSupportedMetrics": 1, "GetRuntimeMetric": len(SERVED) - 1}
    assert all(d.hardware.memory_bandwidth_utilization_ratio is None for d in out.devices)
    collector.close()


def _more_hbm_in_use(s: Scenario) -> Scenario:
    return replace(s, devices=tuple(replace(d, hbm_used=d.hbm_used + MIB) for d in s.devices))


def test_live_gauges_every_tick_the_rest_every_full_poll(fakes: Fakes) -> None:
    fake = fakes(scenario("v6e", 8, multislice=True))
    now = [1000.0]
    collector, first = collect(V5E, fake.address, full_poll_interval=10.0, clock=lambda: now[0])
    fake.metric_calls.clear()
    fake.scenario = _more_hbm_in_use(fake.scenario)
    now[0] += 1.0
    second = collector.collect(CollectContext())
    assert fake.calls["ListSupportedMetrics"] == 1
    assert set(fake.metric_calls) == LIVE_METRICS and max(fake.metric_calls.values()) == 1
    in_use = [d.hardware.memory_used_bytes for d in second.devices]
    assert in_use == [load.hbm_used for load in fake.scenario.devices]  # fresh
    for before, after in zip(first.devices, second.devices, strict=True):
        assert after.hardware.memory_total_bytes == before.hardware.memory_total_bytes  # kept
        assert after.hardware.duty_cycle_ratio == before.hardware.duty_cycle_ratio
    (kept,), (full,) = second.runtime_services, first.runtime_services
    assert kept.up and kept.supported == full.supported
    assert [(m.name, m.device, m.attributes) for m in kept.metrics] == [
        (m.name, m.device, m.attributes) for m in full.metrics
    ]  # the same series in the same order, kept from the full poll
    now[0] += 9.0
    collector.collect(CollectContext())  # a full poll, against the kept listing
    assert fake.calls["ListSupportedMetrics"] == 1
    assert fake.metric_calls[HLO_TIMING] == 1
    collector.close()


def test_listed_again_every_listing_interval_and_not_found_skipped_until_then(
    fakes: Fakes,
) -> None:
    fake = fakes(scenario("v6e", 8))  # one slice: the megascale metrics answer NOT_FOUND
    now = [1000.0]
    collector, first = collect(
        V5E, fake.address, full_poll_interval=10.0, listing_interval=60.0, clock=lambda: now[0]
    )
    assert all(fake.metric_calls[name] == 1 for name in MEGASCALE)
    for _ in range(5):  # full polls at 10, 20, ... 50 s: no listing, no megascale RPC
        now[0] += 10.0
        out = collector.collect(CollectContext())
        assert out.runtime_services == tuple(
            replace(s, metrics=out.runtime_services[0].metrics) for s in first.runtime_services
        )
    assert fake.calls["ListSupportedMetrics"] == 1
    assert all(fake.metric_calls[name] == 1 for name in MEGASCALE)
    assert fake.metric_calls[HLO_TIMING] == 6
    fake.scenario = replace(fake.scenario, multislice=True)  # a multislice job now
    now[0] += 10.0  # 60 s since the listing: listed again, every metric asked for
    out = collector.collect(CollectContext())
    assert fake.calls["ListSupportedMetrics"] == 2
    assert {m.name for m in out.runtime_services[0].metrics} >= set(MEGASCALE)
    now[0] += 10.0
    collector.collect(CollectContext())
    assert all(fake.metric_calls[name] == 3 for name in MEGASCALE)  # found now: every poll
    collector.close()


def test_a_tick_only_tensorboard_reads_refreshes_only_chips_of_attached_jobs(
    fakes: Fakes,
) -> None:
    fake = fakes(scenario("v5e", 4))
    now = [1000.0]
    collector, _ = collect(V5E, fake.address, full_poll_interval=10.0, clock=lambda: now[0])
    fetched = dict(fake.metric_calls)
    fake.scenario = _more_hbm_in_use(fake.scenario)
    now[0] += 20.0  # a full poll would be due for a scrape
    other_job = collector.collect(CollectContext(pids=(77,), full=False))
    assert fake.metric_calls == fetched  # no attached job holds a chip: nothing to refresh
    assert fake.calls["ListSupportedMetrics"] == 1
    owner = collector.collect(CollectContext(pids=(77, 4242), full=False))  # 4242 holds them
    assert fake.calls["ListSupportedMetrics"] == 1  # its live gauges only, no full poll
    assert {n for n in fake.metric_calls if fake.metric_calls[n] > fetched[n]} == LIVE_METRICS
    in_use = [d.hardware.memory_used_bytes for d in owner.devices]
    assert in_use == [load.hbm_used for load in fake.scenario.devices]
    assert in_use != [d.hardware.memory_used_bytes for d in other_job.devices]
    collector.collect(CollectContext(pids=(77,)))  # a scrape: the full poll that was due
    assert fake.metric_calls[HLO_TIMING] == fetched[HLO_TIMING] + 1
    collector.close()


def test_no_rpc_on_a_tick_nobody_reads(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    now = [1000.0]
    collector, _ = collect(V5E, fake.address, clock=lambda: now[0])
    now[0] += 1.0
    fake.scenario = _more_hbm_in_use(fake.scenario)
    read = collector.collect(CollectContext())  # live: the new HBM numbers
    fetched = fake.calls["GetRuntimeMetric"]
    for _ in range(5):
        now[0] += 1.0
        unread = collector.collect(CollectContext(live=False))
        assert unread.devices == read.devices  # the last numbers stand
        assert unread.runtime_services == read.runtime_services
    assert fake.calls["GetRuntimeMetric"] == fetched
    now[0] += 5.0  # a full poll is due, but only made for a snapshot someone reads
    collector.collect(CollectContext(live=False))
    assert fake.metric_calls[HLO_TIMING] == 1
    collector.collect(CollectContext())
    assert fake.metric_calls[HLO_TIMING] == 2
    collector.close()


def test_a_service_down_is_retried_only_for_reads(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, down=True))
    now = [1000.0]
    collector, first = collect(V5E, fake.address, clock=lambda: now[0])
    assert not first.runtime_services[0].up
    tried = dict(fake.calls)
    for _ in range(3):
        now[0] += 20.0
        unread = collector.collect(CollectContext(live=False))
        assert unread.runtime_services == first.runtime_services
    assert fake.calls == tried
    fake.scenario = replace(fake.scenario, down=False)
    now[0] += 1.0
    assert collector.collect(CollectContext()).runtime_services[0].up
    collector.close()


def test_a_service_down_between_full_polls_is_listed_again(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    now = [1000.0]
    collector, _ = collect(V5E, fake.address, clock=lambda: now[0])
    fake.scenario = replace(fake.scenario, down=True)
    now[0] += 1.0
    down = collector.collect(CollectContext())
    assert not down.runtime_services[0].up
    assert down.runtime_services[0].error.startswith("unavailable")  # type: ignore[union-attr]
    assert all(d.hardware.memory_used_bytes is None for d in down.devices)
    fake.scenario = replace(fake.scenario, down=False, unlisted=frozenset({HBM_UTIL}))
    now[0] += 1.0
    back = collector.collect(CollectContext())
    assert back.runtime_services[0].up and HBM_UTIL not in back.runtime_services[0].supported
    assert fake.calls["ListSupportedMetrics"] == 2  # the first poll and the relisting
    collector.close()


def test_full_poll_interval_zero_fetches_everything_every_tick(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    collector, _ = collect(V5E, fake.address, full_poll_interval=0.0)
    collector.collect(CollectContext())
    assert fake.calls["ListSupportedMetrics"] == 1
    assert fake.metric_calls[HLO_TIMING] == 2
    collector.close()


def test_multislice_metrics_are_kept_as_libtpu_names_them(fakes: Fakes) -> None:
    fake = fakes(scenario("v6e", 8, multislice=True))
    collector, out = collect(FIXTURES / "v6e-8", fake.address)
    collector.close()
    metrics = out.runtime_services[0].metrics
    assert {m.name for m in metrics} >= set(MEGASCALE)
    dcn = [m for m in metrics if m.name == MEGASCALE[0]]
    assert [m.attributes for m in dcn] == [
        (("buffer_size", size), ("type", "grpc")) for size in ("1MB+", "8MB+")
    ]
    assert all(m.device is None and m.unit == "seconds" for m in dcn)
    rate = next(m for m in metrics if "delivery_rate" in m.name)
    assert rate.unit == "" and rate.distribution and rate.distribution.max == pytest.approx(27000)
    packets = [m for m in metrics if m.kind == "counter"]
    assert [m.device for m in packets] == list(range(8))


def test_one_failing_metric_leaves_the_rest(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, unavailable=frozenset({HBM_UTIL})))
    collector, out = collect(V5E, fake.address)
    collector.close()
    assert out.runtime_services[0].up
    hw = out.devices[0].hardware
    assert hw.memory_bandwidth_utilization_ratio is None and hw.memory_used_bytes is not None


def test_chips_without_a_running_job(tmp_path: Path) -> None:
    """Nothing listens: devices still listed, numbers absent, the service down (not an error)."""
    write_host(tmp_path, replace(HOSTS["v5e-4"], procs=()))
    collector, out = collect(tmp_path, f"localhost:{_closed_port()}")
    collector.close()
    assert [d.pids for d in out.devices] == [()] * 4
    assert all(d.hardware.memory_used_bytes is None for d in out.devices)
    (service,) = out.runtime_services
    assert not service.up and service.error and service.error.startswith("unavailable")


def test_starting_job_then_running(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, down=True))
    collector, out = collect(V5E, fake.address)
    assert not out.runtime_services[0].up
    fake.scenario = replace(fake.scenario, down=False)
    out = collector.collect(CollectContext())
    collector.close()
    assert out.runtime_services[0].up and out.devices[0].hardware.memory_used_bytes


def test_server_that_comes_up_later_is_picked_up_quickly(fakes: Fakes) -> None:
    port = _closed_port()
    collector, out = collect(V5E, f"localhost:{port}")
    assert not out.runtime_services[0].up
    fakes(scenario("v5e", 4), f"localhost:{port}")
    deadline = time.monotonic() + 10  # gRPC's reconnect backoff is capped at 2 s here
    while not collector.collect(CollectContext()).runtime_services[0].up:
        assert time.monotonic() < deadline, "collector never reconnected"
        time.sleep(0.2)
    collector.close()


def test_a_hung_runtime_costs_at_most_the_budget(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, delay_seconds=3.0))
    start = time.monotonic()
    collector, out = collect(V5E, fake.address, budget=0.3)
    elapsed = time.monotonic() - start
    collector.close()
    (service,) = out.runtime_services
    assert not service.up and service.error and service.error.startswith("deadline_exceeded")
    assert elapsed < 2.5


def test_older_libtpu_int_device_ordinals(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4, ordinal_as_int=True))
    collector, out = collect(V5E, fake.address)
    collector.close()
    queue = [m for m in out.runtime_services[0].metrics if m.name == QUEUE]
    assert [m.device for m in queue] == [0, 1, 2, 3]
    assert queue[0].attributes == (("core_type", "tensorcore"),)


def test_7x_devices_two_per_chip(fakes: Fakes) -> None:
    fake = fakes(scenario("7x", 4))
    collector, out = collect(FIXTURES / "7x-4", fake.address)
    collector.close()
    assert [(d.index, d.chip_index) for d in out.devices] == [(i, i // 2) for i in range(8)]
    assert all(d.hardware.memory_total_bytes == 96 * 2**30 for d in out.devices)
    assert {d.device_kind for d in out.devices} == {"TPU7x"}


def test_unix_socket_address(fakes: Fakes, tmp_path: Path) -> None:
    fake = fakes(scenario("v5e", 4), f"unix:{tmp_path / 'libtpu.sock'}")
    collector, out = collect(V5E, fake.address)
    collector.close()
    assert out.runtime_services[0].up and out.devices[3].hardware.memory_used_bytes


def test_container_without_sysfs_polls_the_given_address(fakes: Fakes) -> None:
    fake = fakes(scenario("v6e", 4))
    collector, out = collect(FIXTURES / "none", fake.address)
    collector.close()
    assert out.present and [d.index for d in out.devices] == [0, 1, 2, 3]
    assert {(d.device_kind, d.pci_bus_id) for d in out.devices} == {("TPU", None)}
    assert out.devices[0].hardware.memory_total_bytes == 33_550_229_504


def test_addresses_from_the_chip_owners_environment(fakes: Fakes, tmp_path: Path) -> None:
    """Two processes, four chips each, each serving its own metrics with ids 0-3."""
    a = fakes(scenario("v6e", 4))
    b = fakes(scenario("v6e", 4, devices=tuple(
        replace(d, hbm_used=d.hbm_used // 2) for d in scenario("v6e", 4).devices)))  # fmt: skip
    procs = tuple(
        Proc(p.pid, p.argv, p.chips, {"TPU_RUNTIME_METRICS_PORTS": f.address.rsplit(":", 1)[1]})
        for p, f in zip(HOSTS["v6e-8"].procs, (a, b), strict=True)
    )
    write_host(tmp_path, replace(HOSTS["v6e-8"], procs=procs))
    collector, out = collect(tmp_path)
    collector.close()
    assert [s.address for s in out.runtime_services] == [a.address, b.address]
    assert [d.runtime_address for d in out.devices] == [a.address] * 4 + [b.address] * 4
    used = [d.hardware.memory_used_bytes or 0 for d in out.devices]
    assert used[4:] == [u // 2 for u in used[:4]] and used[0] > 0  # b's 0 is xmon's 4
    assert [d.pids for d in out.devices] == [(5001,)] * 4 + [(5002,)] * 4


def test_default_address_when_owners_say_nothing(tmp_path: Path) -> None:
    collector, out = collect(V5E)
    collector.close()
    assert [s.address for s in out.runtime_services] == ["localhost:8431"]


def test_holders_are_rescanned_at_most_every_interval(fakes: Fakes, tmp_path: Path) -> None:
    fake = fakes(scenario("v5e", 4))
    write_host(tmp_path, replace(HOSTS["v5e-4"], procs=()))
    now = [100.0]
    collector = TpuCollector(tmp_path / "sys", tmp_path / "proc", (fake.address,),
                             holder_interval=5.0, clock=lambda: now[0])  # fmt: skip
    assert collector.collect(CollectContext()).devices[0].pids == ()
    write_host(tmp_path, HOSTS["v5e-4"])  # a job starts
    assert collector.collect(CollectContext()).devices[0].pids == ()
    now[0] += 5.0
    assert collector.collect(CollectContext()).devices[0].pids == (4242,)
    collector.close()


def test_runner_builds_it_from_the_daemon_config(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    config = DaemonConfig(sysfs_root=V5E / "sys", procfs_root=V5E / "proc",
                          tpu_metrics_addresses=(fake.address,), period_seconds=0.5,
                          tpu_full_poll_seconds=30.0)  # fmt: skip
    built = from_config(config)
    assert built.addresses == (fake.address,) and built.full_poll_interval == 30.0
    runner = CollectorRunner(["tpu"], timeout=2.0, config=config)
    try:
        output, (health,) = runner.run(CollectContext())
    finally:
        runner.close()
    assert health.name == "tpu" and health.up and health.present
    assert len(output.devices) == 4 and output.runtime_services[0].up


def test_snapshot_json_round_trip(fakes: Fakes) -> None:
    fake = fakes(scenario("v6e", 8, multislice=True))
    collector, out = collect(FIXTURES / "v6e-8", fake.address)
    collector.close()
    snap = Snapshot(1, 0.0, 0.0, "h", DaemonStats("0", 0.0), devices=out.devices,
                    runtime_services=out.runtime_services)  # fmt: skip
    assert snapshot_from_dict(snapshot_to_dict(snap)) == snap


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

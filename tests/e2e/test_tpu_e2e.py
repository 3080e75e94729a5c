"""A fixture TPU host through the daemon into a real Prometheus, queried with PromQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.fakes.libtpu_server import HLO_TIMING, Fakes, scenario
from support.fakes.tpu_daemon import tpu_only_daemon
from support.fakes.tpu_host import FIXTURES
from support.procs import wait_for


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


def test_tpu_series_in_prometheus(fakes: Fakes, tmp_path: Path, prometheus_for: Any) -> None:
    fake = fakes(scenario("v5e", 4))
    daemon = tpu_only_daemon(tmp_path, FIXTURES / "v5e-4", [fake.address])
    try:
        prom = prometheus_for([f"127.0.0.1:{daemon.metrics_port}"])
        used = wait_for(lambda: prom.values('xmon_device_memory_used_bytes{platform="tpu"}'),
                        60, "TPU memory in Prometheus")  # fmt: skip
        assert used == {str(i): float(d.hbm_used) for i, d in enumerate(fake.scenario.devices)}
        duty = prom.values("xmon_device_duty_cycle_ratio")
        assert duty["2"] == pytest.approx(0.9525)
        query = ("histogram_quantile(0.5, xmon_runtime_latency_seconds_bucket"
                 f'{{metric="{HLO_TIMING}",device="0"}})')  # fmt: skip
        p50 = wait_for(lambda: prom.query(query), 30, "the HLO timing histogram")
        assert 0.002 <= float(p50[0]["value"][1]) <= 0.0035  # samples centred on 2.4 ms
        up = prom.values("xmon_runtime_service_up")
        assert list(up.values()) == [1.0]
    finally:
        daemon.stop()

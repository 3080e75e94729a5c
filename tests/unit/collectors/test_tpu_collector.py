"""The tpu collector against fixture hosts and fake libtpu metrics servers (real gRPC)."""

from __future__ import annotations

from pathlib import Path

from xmon.collectors.base import CollectContext, CollectorOutput
from xmon.collectors.tpu import TpuCollector

from support.fakes.tpu_host import FIXTURES


def collect(root: Path, *addresses: str, **kw: object) -> tuple[TpuCollector, CollectorOutput]:
    collector = TpuCollector(root / "sys", root / "proc", tuple(addresses), **kw)  # type: ignore[arg-type]
    return collector, collector.collect(CollectContext())


def test_no_tpu_no_address_is_absent_not_an_error() -> None:
    collector, out = collect(FIXTURES / "none")
    assert not out.present and out.devices == () and out.runtime_services == ()

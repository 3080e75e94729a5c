"""Slice and worker identity of a host (xmon.daemon.topology), its config keys and its info
metric."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from xmon.config import ConfigError, load_config
from xmon.daemon.topology import (
    from_runtime_env,
    has_tpu,
    parse_tpu_env,
    resolve_slice_info,
)
from xmon.exporters.prometheus import SnapshotCollector
from xmon.model import DaemonStats, SliceInfo, Snapshot

from support.tpu_env import TPU_ENV

GKE_ENV = {
    "TPU_WORKER_ID": "2",
    "TPU_WORKER_HOSTNAMES": "w-0.svc,w-1.svc,w-2.svc,w-3.svc",
    "TPU_ACCELERATOR_TYPE": "v5litepod-16",
    "MEGASCALE_SLICE_ID": "1",
    "MEGASCALE_NUM_SLICES": "2",
}


def no_fetch(key: str) -> str | None:
    raise AssertionError(f"metadata must not be read here (asked for {key})")


def test_runtime_environment_fields() -> None:
    assert from_runtime_env(GKE_ENV) == {
        "slice_index": 1,
        "num_slices": 2,
        "worker": 2,
        "accelerator_type": "v5litepod-16",
        "num_workers": 4,
    }
    assert from_runtime_env({"CLOUD_TPU_TASK_ID": "5"}) == {"worker": 5}
    assert from_runtime_env({"TPU_WORKER_ID": "x", "CLOUD_TPU_TASK_ID": "5"}) == {"worker": 5}
    assert from_runtime_env({}) == {}


def test_tpu_env_attribute_is_parsed() -> None:
    assert parse_tpu_env(TPU_ENV) == {
        "accelerator_type": "v4-16",
        "slice": "train-v4-16",
        "worker": 1,
        "slice_index": 3,
        "num_slices": 4,
    }
    assert parse_tpu_env("garbage\nWORKER_ID: 'nope'\n") == {}


def test_nothing_known_is_none_and_metadata_is_not_read_off_tpu(tmp_path: Path) -> None:
    assert resolve_slice_info({}, {}, tmp_path, fetch=no_fetch) is None


def test_config_wins_over_environment_which_wins_over_metadata(tmp_path: Path) -> None:
    served = {"tpu-env": TPU_ENV, "worker-network-endpoints": "a:1:10.0.0.1,b:2:10.0.0.2"}
    info = resolve_slice_info(
        {"slice": "blue", "metadata": True}, {"TPU_WORKER_ID": "0"}, tmp_path, served.get
    )
    assert info == SliceInfo(
        slice="blue", slice_index=3, worker=0, num_slices=4, num_workers=2,
        accelerator_type="v4-16", source="metadata,env,config",
    )  # fmt: skip


def _fake_sysfs(root: Path, vendor: str, device: str) -> Path:
    function = root / "bus" / "pci" / "devices" / "0000:00:04.0"
    function.mkdir(parents=True)
    (function / "vendor").write_text(vendor + "\n")
    (function / "device").write_text(device + "\n")
    return root


def test_metadata_is_read_on_a_tpu_host_unless_the_worker_is_known(tmp_path: Path) -> None:
    sysfs = _fake_sysfs(tmp_path / "sys", "0x1ae0", "0x0063")  # a v5e chip
    assert has_tpu(sysfs)
    assert not has_tpu(_fake_sysfs(tmp_path / "gpu", "0x10de", "0x2330"))  # an H100
    assert not has_tpu(_fake_sysfs(tmp_path / "gce", "0x1ae0", "0x0042"))  # gVNIC on any VM
    assert not has_tpu(tmp_path / "no-sysfs")
    info = resolve_slice_info({}, {}, sysfs, {"tpu-env": TPU_ENV}.get)
    assert info is not None and (info.slice, info.worker, info.source) == (
        "train-v4-16", 1, "metadata",
    )  # fmt: skip
    known = resolve_slice_info({}, {"TPU_WORKER_ID": "7"}, sysfs, no_fetch)
    assert known == SliceInfo(worker=7, source="env")
    assert resolve_slice_info({"metadata": False}, {}, sysfs, no_fetch) is None


def test_host_table_and_environment_in_config(tmp_path: Path) -> None:
    path = tmp_path / "xmon.toml"
    path.write_text('[host]\nslice = "blue"\nworker = 3\nmetadata = false\n')
    config = load_config({}, {}, path)
    assert config.host == {"slice": "blue", "worker": 3, "metadata": False}
    config = load_config({}, {"XMON_SLICE": "green", "XMON_WORKER": "4"}, path)
    assert config.host == {"slice": "green", "worker": 4, "metadata": False}
    assert load_config({}, {}, default_path=tmp_path / "absent.toml").host == {}


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[host]\nworker = -1\n", {}, "host.worker must be an integer between 0"),
        ("[host]\nrack = 1\n", {}, "host.rack is unknown; valid keys: slice,"),
        ("[host]\nworkers = 1\n", {}, 'host.workers is unknown (did you mean "worker"?)'),
        ('[host]\nmetadata = "yes"\n', {}, 'host.metadata must be true, false or "auto"'),
        ('host = "a"\n', {}, "host must be a table"),
        ("", {"XMON_WORKER": "two"}, "environment XMON_WORKER: must be a non-negative integer"),
    ],
)
def test_bad_host_settings_are_named(tmp_path: Path, text: str, env: dict, message: str) -> None:
    path = tmp_path / "xmon.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config({}, env, path)


def _scrape(snapshot: Snapshot) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(snapshot=snapshot))
    return generate_latest(registry).decode()


def test_slice_info_metric() -> None:
    base = Snapshot(seq=1, wall_time=1.0, monotonic=1.0, hostname="h", daemon=DaemonStats("0", 1))
    assert "xmon_slice_info" not in _scrape(base)
    info = SliceInfo(slice="blue", worker=2, num_workers=4, source="env")
    text = _scrape(Snapshot(**{**base.__dict__, "slice_info": info}))
    assert (
        'xmon_slice_info{accelerator_type="",num_slices="",num_workers="4",slice="blue",'
        'slice_index="",source="env",worker="2"} 1.0'
    ) in text

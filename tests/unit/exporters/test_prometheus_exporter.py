"""The Prometheus exporter against real prometheus_client, a real HTTP server and promtool."""

from __future__ import annotations

import gzip
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from xmon.exporters.metrics_table import LABEL_VALUE_MAX, METRICS, OTHER_PROGRAM, SPEC_BY_NAME
from xmon.exporters.prometheus import (
    MetricsEndpoint,
    SnapshotCollector,
    snapshot_families,
)
from xmon.model import (
    Finding,
    Snapshot,
    Utilization,
)

from support.sample_snapshots import eval_job, program, snapshot, train_job

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "prometheus_metrics.txt"
Key = tuple[str, frozenset[tuple[str, str]]]


# --- fixtures --------------------------------------------------------------------------------


def exposed(family: object) -> str:
    name, typ = family.name, family.type  # type: ignore[attr-defined]
    return {"counter": name + "_total", "info": name + "_info"}.get(typ, name)


def samples(snap: Snapshot, program_limit: int = 50) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for family in snapshot_families(snap, program_limit):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def key(name: str, **labels: object) -> Key:
    return name, frozenset((k, str(v)) for k, v in labels.items())


TRAIN = {"job_name": "train", "pid": 1000}
EVAL = {"job_name": "eval", "pid": 2000}
DEV0 = {**TRAIN, "device": 0, "device_kind": "cpu", "platform": "cpu"}
GPU0 = {"device": 0, "device_kind": "NVIDIA H100 80GB HBM3", "platform": "gpu"}


# --- families --------------------------------------------------------------------------------


def test_every_family_is_in_the_table_and_every_entry_is_emitted() -> None:
    families = snapshot_families(snapshot())
    names = [exposed(f) for f in families]
    assert len(names) == len(set(names))
    for family, name in zip(families, names, strict=True):
        spec = SPEC_BY_NAME[name]
        assert family.documentation == spec.help
        assert family.type == spec.type
    assert set(names) == {spec.name for spec in METRICS}


EXPECTED = [
    (key("xmon_up"), 1.0),
    (key("xmon_agents_connected"), 2.0),
    (key("xmon_daemon_reports_rejected_total"), 1.0),
    (key("xmon_collector_up", collector="libtpu"), 0.0),
    (key("xmon_collector_present", collector="libtpu"), 0.0),
    (key("xmon_collector_duration_seconds", collector="host"), 0.002),
    (key("xmon_host_info", hostname="node0", cpu_count=16), 1.0),
    (key("xmon_host_memory_available_bytes"), 48 * 2**30),
    (key("xmon_host_load1"), 1.5),
    (key("xmon_device_info", **GPU0, uuid="GPU-abc", pci_bus_id="0000:01:00.0", source="nvml"), 1),
    (key("xmon_device_power_watts", **GPU0), 350.0),
    (key("xmon_device_memory_total_bytes", **GPU0), 80 * 2**30),
    (
        key(
            "xmon_job_info",
            **TRAIN,
            hostname="node0",
            platform="cpu",
            jax_version="0.10.2",
            jaxlib_version="0.10.2",
            process_index=0,
            process_count=1,
        ),
        1.0,
    ),  # fmt: skip
    (
        key(
            "xmon_job_device_info",
            **DEV0,
            process_index=0,
            coords="0,0",
            local_hardware_id=0,
            core_on_chip="",
            slice_index="",
        ),
        1.0,
    ),  # fmt: skip
    (key("xmon_job_device_memory_in_use_bytes", **DEV0), 1000.0),
    (key("xmon_job_device_memory_in_use_bytes", **{**DEV0, "device": 3}), 1003.0),
    (key("xmon_job_device_memory_fragmentation_ratio", **DEV0), 0.25),
    (key("xmon_job_device_allocations_total", **DEV0), 42.0),
    (key("xmon_job_compile_seconds_total", **TRAIN, phase="backend"), 3.5),
    (key("xmon_job_compile_seconds_total", **TRAIN, phase="trace"), 0.5),
    (key("xmon_job_compilation_cache_hits_total", **TRAIN), 3.0),
    (key("xmon_job_programs", **TRAIN), 60.0),
    (key("xmon_job_step_duration_seconds", **TRAIN, quantile="0.99"), 0.9),
    (key("xmon_job_step_duration_seconds_sum", **TRAIN), 50.0),
    (key("xmon_job_step_duration_seconds_count", **TRAIN), 100.0),
    (key("xmon_job_model_flops_utilization_ratio", **TRAIN), 0.3),
    (key("xmon_job_hardware_flops_utilization_ratio", **TRAIN), 0.5),
    (key("xmon_job_achieved_model_flops_per_second", **TRAIN), 1.2e12),
    (key("xmon_job_tokens_per_second", **TRAIN), 8192.0),
    (key("xmon_job_model_flops_per_step", **TRAIN), 6e11),
    (key("xmon_job_tokens_per_step", **TRAIN), 4096.0),
    (key("xmon_job_flops_lower_bound", **TRAIN), 1.0),
    (key("xmon_job_steps_inferred", **TRAIN, program=""), 0.0),
    (key("xmon_job_device_busy_ratio", **{**DEV0, "device": 3}), 0.6),
    (key("xmon_job_device_busy_ratio", **DEV0), 0.0),  # measured idle: 0, not absent
    (key("xmon_agent_ledger_samples_total", **TRAIN), 40.0),
    (key("xmon_agent_ledger_samples_skipped_total", **TRAIN), 2.0),
    (key("xmon_agent_capability_available", **TRAIN, capability="ledger", reason=""), 1.0),
    (
        key(
            "xmon_agent_capability_available",
            **TRAIN,
            capability="loop_cost",
            reason="no HLO text parser",
        ),
        0.0,
    ),
    (key("xmon_job_ledger_parse_errors_total", **TRAIN), 1.0),
    (key("xmon_job_ledger_samples", **TRAIN), 8.0),
    (key("xmon_job_ledger_sampled_seconds", **TRAIN), 0.8),
    (key("xmon_job_ledger_window_seconds", **TRAIN), 70.0),
    (key("xmon_job_ledger_last_sample_timestamp_seconds", **TRAIN), 1_700_000_190.0),
    (key("xmon_job_process_cpu_utilization_ratio", **TRAIN), 1.5),
    (key("xmon_agent_last_report_timestamp_seconds", **TRAIN), 1_700_000_100.0),
    (
        key(
            "xmon_job_device_memory_in_use_bytes",
            **EVAL,
            device=0,
            device_kind="cpu",
            platform="cpu",
        ),
        64.0,
    ),  # fmt: skip
    (key("xmon_job_steps_total", **EVAL), 0.0),
    (
        key(
            "xmon_job_fleet_info",
            **TRAIN,
            job_key="10.0.0.2:8476/4",
            process_index=2,
            process_count=4,
            slice_index=0,
            worker="w-2",
        ),
        1.0,
    ),
    (key("xmon_job_steps_begun_total", **TRAIN), 101.0),
    (key("xmon_job_open_step_seconds", **TRAIN), 0.25),
    (key("xmon_job_stalled", **TRAIN, waits_in="host"), 1.0),
    (key("xmon_job_step_host_seconds", **TRAIN), 0.05),
    (key("xmon_job_step_device_compute_seconds", **TRAIN), 0.3),
    (key("xmon_job_step_device_collective_seconds", **TRAIN), 0.15),
    (key("xmon_job_wall_seconds", **TRAIN, bucket="productive"), 3000.0),
    (key("xmon_job_wall_seconds", **TRAIN, bucket="compile"), 180.0),
    (key("xmon_job_goodput_ratio", **TRAIN, window="life"), 3000 / 3600),
    (key("xmon_job_goodput_ratio", **TRAIN, window="5m"), 0.9),
    (key("xmon_daemon_goodput_floor_ratio"), 0.5),
    (key("xmon_job_restart_lost_seconds", **TRAIN), 95.0),
]


@pytest.mark.parametrize(("series", "value"), EXPECTED, ids=lambda v: str(v)[:60])
def test_sample_values(series: Key, value: float) -> None:
    assert samples(snapshot())[series] == pytest.approx(value)


ABSENT = [
    # None fields are left out, never exported as 0
    key("xmon_device_power_watts", **{**GPU0, "device": 1}),
    key("xmon_job_device_memory_peak_bytes", **EVAL, device=0, device_kind="cpu", platform="cpu"),
    key("xmon_job_last_step_duration_seconds", **EVAL),
    key("xmon_job_goodput_ratio", **TRAIN, window="1h"),  # no hour of history yet
    key("xmon_job_wall_seconds", **EVAL, bucket="productive"),  # an agent with no account
    key("xmon_job_model_flops_utilization_ratio", **EVAL),
    key("xmon_job_hardware_flops_utilization_ratio", **EVAL),
    key("xmon_job_flops_lower_bound", **EVAL),  # no FLOPs known: nothing to qualify
    key("xmon_job_steps_inferred", **EVAL, program=""),  # never stepped
    key("xmon_job_device_busy_ratio", **EVAL, device=0, device_kind="cpu", platform="cpu"),
    key("xmon_job_ledger_last_sample_timestamp_seconds", **EVAL),
    key("xmon_job_ledger_window_seconds", **EVAL),  # no samples: no window
    key("xmon_job_step_duration_seconds", **EVAL, quantile="0.5"),
    key("xmon_job_process_resident_memory_bytes", **EVAL),
    key("xmon_job_start_time_seconds", **EVAL),
    key("xmon_agent_last_report_timestamp_seconds", **EVAL),
    key("xmon_collector_duration_seconds", collector="libtpu"),
]


@pytest.mark.parametrize("series", ABSENT, ids=lambda k: k[0])
def test_unknown_values_are_absent(series: Key) -> None:
    assert series not in samples(snapshot())


def test_no_host_sample_means_no_host_series() -> None:
    names = {name for name, _ in samples(replace(snapshot(), host=None))}
    host = {n for n in names if n.startswith("xmon_host_")}
    assert host == {"xmon_host_finding"}  # findings about the host need no psutil sample


def test_host_findings_are_counted_by_kind_and_severity() -> None:
    gpu = Finding("gpu_preallocated", "warning", "full", 1.0, subject="gpu 0")
    tpu = Finding("tpu_metrics_unreachable", "warning", "no service", 1.0, subject="tpu")
    s = samples(replace(snapshot(), findings=(gpu, replace(gpu, subject="gpu 1"), tpu)))
    found = {k: v for k, v in s.items() if k[0] == "xmon_host_finding"}
    assert found == {
        key("xmon_host_finding", kind="gpu_preallocated", severity="warning"): 2.0,
        key("xmon_host_finding", kind="tpu_metrics_unreachable", severity="warning"): 1.0,
    }


def program_series(s: dict[Key, float], name: str, job: dict[str, object]) -> dict[str, float]:
    """program label -> value of one program metric of one job."""
    want = {(k, str(v)) for k, v in job.items()}
    return {
        dict(labels)["program"]: v for (n, labels), v in s.items() if n == name and want <= labels
    }


def test_programs_past_the_limit_are_folded() -> None:
    s = samples(snapshot(), program_limit=50)
    flops = program_series(s, "xmon_job_program_flops", TRAIN)
    assert len(flops) == 51  # 50 heaviest + _other
    assert set(flops) - {OTHER_PROGRAM} == {f"jit_f{i}" for i in range(10, 60)}
    assert flops[OTHER_PROGRAM] == sum(range(10))  # the 10 lightest, summed
    rates = program_series(s, "xmon_job_program_executions_per_second", TRAIN)
    assert rates["jit_f59"] == 295.0 and rates[OTHER_PROGRAM] == sum(5.0 * i for i in range(10))
    assert program_series(s, "xmon_job_program_temp_bytes", TRAIN)[OTHER_PROGRAM] == 30
    assert program_series(s, "xmon_job_program_peak_memory_bytes", TRAIN)[OTHER_PROGRAM] == 109
    assert s[key("xmon_job_program_flops", **TRAIN, program="jit_f59", fingerprint="fp059")] == 59


def test_program_execution_truth_and_its_fold() -> None:
    s = samples(snapshot(), program_limit=50)
    f59 = {**TRAIN, "program": "jit_f59", "fingerprint": "fp059"}
    assert s[key("xmon_job_program_flops_xla", **f59)] == 29.5
    assert s[key("xmon_job_program_bytes_accessed_xla", **f59)] == 5.0
    assert s[key("xmon_job_program_flops_lower_bound", **f59)] == 1.0
    assert s[key("xmon_job_program_loops", **f59)] == 2.0
    assert s[key("xmon_job_program_loops_trip_count_unknown", **f59)] == 1.0
    assert s[key("xmon_job_program_device_seconds_per_execution", **f59)] == pytest.approx(0.059)
    assert s[key("xmon_job_program_executions_source_info", **f59, source="ledger")] == 1.0
    f56 = {**TRAIN, "program": "jit_f56", "fingerprint": "fp056"}
    assert s[key("xmon_job_program_flops_lower_bound", **f56)] == 0.0
    assert s[key("xmon_job_program_executions_source_info", **f56, source="capture")] == 1.0
    other = {**TRAIN, "program": OTHER_PROGRAM, "fingerprint": ""}
    assert s[key("xmon_job_program_flops_lower_bound", **other)] == 1.0  # any folded one is
    assert s[key("xmon_job_program_loops", **other)] == sum(i % 3 for i in range(10))
    assert s[key("xmon_job_program_executions_source_info", **other, source="mixed")] == 1.0
    assert key("xmon_job_program_device_seconds_per_execution", **other) not in s


def test_fold_keeps_a_common_executions_source() -> None:
    programs = tuple(program(i, executions_source="ledger") for i in range(4))
    job = replace(train_job(), programs=programs)
    s = samples(snapshot((job,)), program_limit=2)
    other = {**TRAIN, "program": OTHER_PROGRAM, "fingerprint": ""}
    assert s[key("xmon_job_program_executions_source_info", **other, source="ledger")] == 1.0


def test_program_without_executions_has_no_source() -> None:
    job = replace(train_job(), programs=(program(1, executions_source=None),))
    names = {name for name, _ in samples(snapshot((job,)))}
    assert "xmon_job_program_executions_source_info" not in names


def test_inferred_steps_name_their_program() -> None:
    steps = replace(train_job().steps, inferred=True, inferred_from="jit_train_step")
    s = samples(snapshot((replace(train_job(), steps=steps),)))
    assert s[key("xmon_job_steps_inferred", **TRAIN, program="jit_train_step")] == 1.0
    assert key("xmon_job_steps_inferred", **TRAIN, program="") not in s


def test_inferred_steps_have_a_rate_and_no_count() -> None:
    """A job that marks no steps: its steps have a rate (from the ledger) but nobody counts
    them, so the count is absent, not 0 beside the rate."""
    steps = replace(train_job().steps, steps_total=0, step_seconds_total=0.0, inferred=True,
                    inferred_from="jit_train_step", steps_per_second=7.6,
                    p50_step_seconds=1 / 7.6)  # fmt: skip
    s = samples(snapshot((replace(train_job(), steps=steps),)))
    assert s[key("xmon_job_steps_per_second", **TRAIN)] == 7.6
    assert s[key("xmon_job_step_duration_seconds", **TRAIN, quantile="0.5")] == 1 / 7.6
    names = {name for name, labels in s if dict(labels).get("pid") == str(TRAIN["pid"])}
    absent = {"xmon_job_steps_total", "xmon_job_step_duration_seconds_count",
              "xmon_job_step_duration_seconds_sum"}  # fmt: skip
    assert not names & absent, names & absent


def test_undeclared_model_flops_leave_mfu_absent_and_hfu_present() -> None:
    u = Utilization(achieved_flops_per_second=2e12, peak_flops_per_second=4e12,
                    hardware_flops_utilization_ratio=0.5)  # fmt: skip
    job = replace(train_job(), utilization=u, steps=replace(train_job().steps,
                  model_flops_per_step=None, tokens_per_step=None))  # fmt: skip
    s = samples(snapshot((job,)))
    assert s[key("xmon_job_hardware_flops_utilization_ratio", **TRAIN)] == 0.5
    assert s[key("xmon_job_flops_lower_bound", **TRAIN)] == 0.0
    undeclared = (
        "xmon_job_model_flops_utilization_ratio",
        "xmon_job_tokens_per_second",
        "xmon_job_achieved_model_flops_per_second",
        "xmon_job_model_flops_per_step",
    )
    for absent in undeclared:
        assert key(absent, **TRAIN) not in s


def test_program_rank_uses_devices_then_compile_time() -> None:
    unseen = {"executions_per_second": None}  # no capture has counted executions
    programs = (
        program(0, flops=10.0, num_devices=1, **unseen),
        program(1, flops=4.0, num_devices=4, **unseen),  # 16 on all devices: heavier than 0
        program(2, flops=None, compile_seconds=9.0, **unseen),
        program(3, flops=None, compile_seconds=1.0, **unseen),
        program(1, flops=1e9),  # same fingerprint again: reported once, first wins
    )
    job = replace(train_job(), programs=programs)
    s = samples(snapshot((job,)), program_limit=3)
    compile_s = program_series(s, "xmon_job_program_compile_seconds", TRAIN)
    assert set(compile_s) == {"jit_f1", "jit_f0", "jit_f2", OTHER_PROGRAM}
    assert compile_s[OTHER_PROGRAM] == 1.0
    assert OTHER_PROGRAM not in program_series(s, "xmon_job_program_flops", TRAIN)  # all None
    assert s[key("xmon_job_programs", **TRAIN)] == 4


def test_programs_a_capture_saw_running_outrank_heavier_idle_ones() -> None:
    heavy_once = program(0, flops=100.0, executions_per_second=None)  # no capture yet
    light_often = program(1, flops=10.0, executions_per_second=None)
    before = samples(snapshot((replace(train_job(), programs=(heavy_once, light_often)),)),
                     program_limit=1)  # fmt: skip
    assert set(program_series(before, "xmon_job_program_flops", TRAIN)) == {"jit_f0", OTHER_PROGRAM}
    counted = (replace(heavy_once, executions_per_second=0.5),  # 50 FLOP/s
               replace(light_often, executions_per_second=20.0))  # 200 FLOP/s  # fmt: skip
    after = samples(snapshot((replace(train_job(), programs=counted),)), program_limit=1)
    assert set(program_series(after, "xmon_job_program_flops", TRAIN)) == {"jit_f1", OTHER_PROGRAM}


def test_no_fold_series_within_the_limit() -> None:
    s = samples(snapshot((train_job(n_programs=5),)))
    assert OTHER_PROGRAM not in program_series(s, "xmon_job_program_flops", TRAIN)


def test_client_label_values_are_truncated() -> None:
    long = "j" * 500
    job = replace(train_job(n_programs=1), job_name=long, programs=(program(1, name="p" * 300),))
    for (_, labels), _value in samples(snapshot((job,))).items():
        assert all(len(v) <= LABEL_VALUE_MAX for _, v in labels)
    assert key("xmon_job_steps_total", job_name="j" * LABEL_VALUE_MAX, pid=1000) in samples(
        snapshot((job,))
    )


def test_duplicate_series_are_dropped() -> None:
    dup = snapshot().devices[0]
    samples(replace(snapshot(), devices=(dup, dup)))  # asserts no duplicate keys


def test_dead_job_series_disappear() -> None:
    collector = SnapshotCollector()
    collector.set_snapshot(snapshot())
    assert any(s.labels.get("job_name") == "eval" for f in collector.collect() for s in f.samples)
    collector.set_snapshot(snapshot((train_job(),), seq=2))
    assert not any(
        s.labels.get("job_name") == "eval" for f in collector.collect() for s in f.samples
    )
    assert collector.describe() == []


def test_before_the_first_snapshot_only_self_metrics() -> None:
    text = MetricsEndpoint().body().decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {n for n in names if not n.startswith("process_")} == {"xmon_build_info", "xmon_up"}
    assert "xmon_up 0.0" in text


def test_the_daemon_exports_its_own_process_metrics() -> None:
    """What node_exporter and dcgm-exporter users expect of any exporter: its own CPU, RSS,
    file descriptors and start time, from /proc."""
    text = MetricsEndpoint().body().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "process_max_fds"):  # fmt: skip
        assert name in families, sorted(families)
    (rss,) = families["process_resident_memory_bytes"].samples
    assert 1e6 < rss.value < 4e9
    (started,) = families["process_start_time_seconds"].samples
    assert abs(started.value - psutil.Process().create_time()) < 2
    assert not any(n.startswith("python_") for n in families)


def test_endpoint_renders_once_per_update() -> None:
    endpoint = MetricsEndpoint()
    endpoint.update(snapshot())
    first = endpoint.body()
    assert endpoint.body() is first  # cached bytes, not a re-render
    assert gzip.decompress(endpoint.body(accept_gzip=True)) == first
    assert endpoint.body(accept_gzip=True) is endpoint.body(accept_gzip=True)
    endpoint.update(snapshot((train_job(),), seq=2))
    assert b'job_name="eval"' in first
    # The new snapshot may be rendering in the background; until then the previous is served.
    deadline = time.monotonic() + 10
    while b'job_name="eval"' in endpoint.body() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b'job_name="eval"' not in endpoint.body()


# --- golden file and timing ------------------------------------------------------------------


def golden_text() -> str:
    endpoint = MetricsEndpoint(program_limit=3)
    endpoint.update(snapshot((train_job(n_programs=5), eval_job())))
    # the daemon's Python version and its own process_* series are machine-dependent
    text = re.sub(r'python_version="[^"]*"', 'python_version="X"', endpoint.body().decode())
    return re.sub(r"^(# (HELP|TYPE) )?process_.*\n", "", text, flags=re.M)


def test_golden_exposition() -> None:
    text = golden_text()
    if os.environ.get("XMON_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed: rerun with XMON_UPDATE_GOLDEN=1"


def test_render_time_for_about_2k_series(capsys: pytest.CaptureFixture[str]) -> None:
    """Measured, not asserted: render cost of a large snapshot (see docs/metrics.md budget)."""
    jobs = tuple(replace(train_job(), job_name=f"train{i}", pid=1000 + i) for i in range(4))
    endpoint = MetricsEndpoint()
    endpoint.update(snapshot(jobs))
    series = endpoint.body().count(b"\n") - 2 * len(METRICS)
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        endpoint.update(snapshot(jobs))
        endpoint.body()
        timings.append(time.perf_counter() - start)
    start = time.perf_counter()
    endpoint.body(accept_gzip=True)
    gz = time.perf_counter() - start
    with capsys.disabled():
        print(f"\nrender ~{series} series: {min(timings) * 1e3:.1f} ms; gzip-1 {gz * 1e3:.1f} ms")
    assert series > 1500


def test_rare_scrapes_get_the_newest_snapshot() -> None:
    """A snapshot published when no scrape is due is rendered by the next scrape, not skipped."""
    now = [0.0]
    endpoint = MetricsEndpoint(clock=lambda: now[0])
    endpoint.body()  # two scrapes 100 s apart: the next one is not due soon
    now[0] = 100.0
    endpoint.body()
    now[0] = 101.0
    endpoint.update(snapshot())
    now[0] = 102.0
    assert b"xmon_up 1.0" in endpoint.body()

"""``xmon monitor`` reports: built from constructed snapshots, checked against the JSON Schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from xmon.model import (
    AgentHealth,
    CollectorHealth,
    CompileEvent,
    DeviceInfo,
    DeviceMemory,
    DeviceProcess,
    Finding,
    FleetIdentity,
    Goodput,
    JobDevice,
    LedgerStats,
    StepBreakdown,
    StepStats,
    Utilization,
)
from xmon.views.monitor_report import (
    DETAIL_MAX_CHARS,
    GROUPS,
    ReportOptions,
    build_report,
    job_matches,
    rfc3339,
)

from support.views import job, snapshot, tpu_device

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "monitor.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def valid(validator: jsonschema.Draft202012Validator, report: dict[str, Any]) -> dict[str, Any]:
    """Round-trip through JSON text (as `xmon monitor` prints it) and validate."""
    text = json.dumps(report, allow_nan=False)
    decoded = json.loads(text)
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(decoded)]
    assert not errors, "\n".join(errors[:10])
    return decoded


def rich_snapshot(seq: int = 1, **job_kw: Any) -> Any:
    train = job("train", 1000, devices=4, **job_kw)
    cpu = dataclasses.replace(job("eval", 2000, devices=1, platform="cpu"), process=None)
    gpu = dataclasses.replace(
        tpu_device(0, (1000,)), processes=(DeviceProcess(1000, 2**30), DeviceProcess(7, None))
    )
    devices = (gpu, tpu_device(1, (1000,), util=None))
    collectors = (CollectorHealth("host", True, 0, 0.002),
                  CollectorHealth("libtpu", False, 2, None, "connection refused"))  # fmt: skip
    return dataclasses.replace(
        snapshot(seq, jobs=(train, cpu), devices=devices), collectors=collectors
    )


def test_first_report_has_totals_no_deltas_and_validates(validator: Any) -> None:
    report = valid(validator, build_report(rich_snapshot(), None))
    assert report["schema_version"] == 2
    assert report["period_seconds"] is None
    assert report["timestamp"].endswith("Z")
    train = report["jobs"][0]
    assert len(train["devices"]) == 4
    assert train["steps"]["total"] == {"steps": 100, "seconds": 50.0}
    assert train["steps"]["delta"] is None
    assert train["compile"]["delta"] is None
    assert train["programs"] == {"count": 3, "new": None, "items": train["programs"]["items"]}
    assert len(train["compile"]["events"]) == 5  # first report: what the daemon still holds
    assert train["memory"] == {
        "in_use_bytes": 4 * 2**30, "peak_bytes_in_use": 8 * 2**30, "bytes_limit": 64 * 2**30,
    }  # fmt: skip
    hardware = report["hardware"]
    assert hardware["device_count"] == 2 and hardware["device_kinds"] == ["TPU v6 lite"]
    assert hardware["devices"][1]["counters"]["utilization_ratio"] is None
    assert hardware["devices"][0]["processes"] == [
        {"pid": 1000, "memory_used_bytes": 2**30}, {"pid": 7, "memory_used_bytes": None},
    ]  # fmt: skip


def test_deltas_are_per_period_against_the_previous_report(validator: Any) -> None:
    first = rich_snapshot(1)
    later = job("train", 1000, devices=4, steps=130, programs=5, compiles=7)
    later = dataclasses.replace(later, agent=AgentHealth(reports_sent_total=9))
    second = dataclasses.replace(rich_snapshot(6), jobs=(later, first.jobs[1]))
    report = valid(validator, build_report(second, first))
    assert report["period_seconds"] == pytest.approx(5.0)
    train = report["jobs"][0]
    assert train["steps"]["delta"] == {"steps": 30, "seconds": pytest.approx(15.0)}
    assert train["compile"]["delta"]["compiles"] == 2
    assert train["programs"]["new"] == 2
    assert train["agent"]["delta"]["reports_sent"] == 9
    # Only compiles finished after the previous report's snapshot.
    assert all(e["wall_time"] > first.wall_time for e in train["compile"]["events"])
    collectors = {c["name"]: c for c in report["hardware"]["collectors"]}
    assert collectors["libtpu"]["errors"] == {"total": 2, "delta": 0}


def test_no_baseline_gives_null_deltas(validator: Any) -> None:
    first = rich_snapshot(1)
    restarted = job("train", 1000, devices=4, steps=3)  # same process, counters went back
    newcomer = job("new", 3000, devices=1)
    second = dataclasses.replace(rich_snapshot(2), jobs=(restarted, newcomer))
    report = valid(validator, build_report(second, first))
    assert [j["steps"]["delta"] for j in report["jobs"]] == [None, None]
    assert report["jobs"][1]["programs"]["new"] is None


def test_missing_is_null_never_zero(validator: Any) -> None:
    bare = JobDevice(DeviceInfo(0, "cpu", "cpu"), DeviceMemory(live_array_bytes=64))
    sparse = dataclasses.replace(
        job("cpu", 42, devices=1, mfu=None), devices=(bare,), steps=StepStats(), process=None
    )
    snap = dataclasses.replace(snapshot(1, jobs=(sparse,)), host=None)
    report = valid(validator, build_report(snap, None))
    assert report["system"] is None
    entry = report["jobs"][0]
    memory = entry["devices"][0]["memory"]
    assert memory["bytes_in_use"] is None and memory["bytes_limit"] is None
    assert memory["in_use_bytes"] == 64  # falls back to the live-array sum
    assert entry["memory"]["bytes_limit"] is None
    assert entry["utilization"]["model_flops_utilization_ratio"] is None
    assert entry["steps"]["p50_step_seconds"] is None
    assert entry["process"] is None


def test_nan_and_infinity_become_null(validator: Any) -> None:
    nan_job = dataclasses.replace(job(), steps=StepStats(steps_per_second=float("nan")))
    report = valid(validator, build_report(snapshot(1, jobs=(nan_job,)), None))
    assert report["jobs"][0]["steps"]["steps_per_second"] is None


@pytest.mark.parametrize(
    "groups",
    [frozenset({"system"}), frozenset({"hardware"}), frozenset({"jobs"}), frozenset(GROUPS)],
)
def test_only_selected_groups_appear(validator: Any, groups: frozenset[str]) -> None:
    report = valid(validator, build_report(rich_snapshot(), None, ReportOptions(groups)))
    for group in ("system", "hardware", "jobs"):
        assert (group in report) == (group in groups)
    if "jobs" in groups:
        assert ("items" in report["jobs"][0]["programs"]) == ("programs" in groups)


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ((), ["train", "eval"]),
        (("train",), ["train"]),
        (("ev*",), ["eval"]),
        (("2000",), ["eval"]),
        (("nope", "1000"), ["train"]),
        (("x*",), []),
    ],
)
def test_job_filters_match_names_as_globs_or_pids(
    patterns: tuple[str, ...], expected: list[str]
) -> None:
    report = build_report(rich_snapshot(), None, ReportOptions(jobs=patterns))
    assert [j["job_name"] for j in report["jobs"]] == expected
    assert job_matches(job("a", 1), ()) and not job_matches(job("a", 1), ("b",))


def test_compile_events_since_previous_report() -> None:
    j = job(compiles=0)
    events = tuple(CompileEvent("jit(f)", 0.1, 1_700_000_201.0 + i) for i in range(4))
    j = dataclasses.replace(j, compile=dataclasses.replace(j.compile, recent=events))
    previous = snapshot(1, jobs=(j,))  # wall_time 1_700_000_201.0
    report = build_report(snapshot(2, jobs=(j,)), previous)
    assert [e["wall_time"] for e in report["jobs"][0]["compile"]["events"]] == [
        1_700_000_202.0, 1_700_000_203.0, 1_700_000_204.0,
    ]  # fmt: skip


def test_schema_rejects_what_the_builder_must_not_emit(validator: Any) -> None:
    good = json.loads(json.dumps(build_report(rich_snapshot(), None)))
    assert validator.is_valid(good)
    cases = [
        ("unknown top-level key", lambda r: r.update(extra=1)),
        ("unknown job key", lambda r: r["jobs"][0].update(gpu_util=0.5)),
        ("unknown steps key", lambda r: r["jobs"][0]["steps"].update(p42_step_seconds=1.0)),
        ("missing device memory", lambda r: r["jobs"][0]["devices"][0].pop("memory")),
        ("string counter", lambda r: r["hardware"]["devices"][0]["counters"].update(x="1")),
        ("negative delta", lambda r: r["jobs"][0]["steps"].update(delta={"steps": -1})),
        ("bad timestamp", lambda r: r.update(timestamp="yesterday")),
        ("wrong version", lambda r: r.update(schema_version=1)),
        ("busy above 1", lambda r: r["jobs"][0]["devices"][0].update(busy_ratio=1.5)),
        (
            "unknown source",
            lambda r: r["jobs"][0]["programs"]["items"][0].update(executions_source="guess"),
        ),
    ]
    for what, mutate in cases:
        bad = json.loads(json.dumps(good))
        mutate(bad)
        assert not validator.is_valid(bad), what


def execution_truth_job() -> Any:
    """A job with the execution ledger's numbers: inferred steps, busy devices, looped programs."""
    base = job("train", 1000, devices=2)
    devices = tuple(dataclasses.replace(d, busy_ratio=0.25 * (i + 1))
                    for i, d in enumerate(base.devices))  # fmt: skip
    looped = dataclasses.replace(
        base.programs[0], flops_xla=1e8, flops_lower_bound=True, loops=2,
        loops_unknown_trip_count=1, bytes_accessed_xla=5e5, executions_source="ledger",
        device_seconds_per_execution=0.004,
    )  # fmt: skip
    steps = dataclasses.replace(base.steps, inferred=True, inferred_from="jit_train_0",
                                model_flops_per_step=6e11, tokens_per_step=2048.0)  # fmt: skip
    utilization = Utilization(
        achieved_flops_per_second=2e12, achieved_model_flops_per_second=1.2e12,
        peak_flops_per_second=4e12, model_flops_utilization_ratio=0.3,
        hardware_flops_utilization_ratio=0.5, flops_lower_bound=True, tokens_per_second=4096.0,
    )  # fmt: skip
    return dataclasses.replace(
        base, devices=devices, programs=(looped, *base.programs[1:]), steps=steps,
        utilization=utilization, agent=AgentHealth(ledger_samples_total=12,
                                                   ledger_samples_skipped_total=1),
        ledger=LedgerStats(samples=6, sampled_seconds=0.6, window_seconds=50.0,
                           last_sample_at=1_700_000_190.0, parse_errors_total=2),
    )  # fmt: skip


def test_execution_truth_reaches_the_report(validator: Any) -> None:
    first = snapshot(1, jobs=(execution_truth_job(),))
    later = execution_truth_job()
    later = dataclasses.replace(
        later, ledger=dataclasses.replace(later.ledger, parse_errors_total=3)
    )
    report = valid(validator, build_report(snapshot(2, jobs=(later,)), first))
    entry = report["jobs"][0]
    assert [d["busy_ratio"] for d in entry["devices"]] == [0.25, 0.5]
    steps = entry["steps"]
    assert steps["inferred"] is True and steps["inferred_from"] == "jit_train_0"
    uncounted = dataclasses.replace(
        later, steps=dataclasses.replace(later.steps, steps_total=0, step_seconds_total=0.0)
    )
    counts = valid(validator, build_report(snapshot(3, jobs=(uncounted,)), None))["jobs"][0]
    assert counts["steps"]["total"] == {} and counts["steps"]["delta"] is None  # not 0
    assert steps["model_flops_per_step"] == 6e11 and steps["tokens_per_step"] == 2048.0
    u = entry["utilization"]
    assert (u["model_flops_utilization_ratio"], u["hardware_flops_utilization_ratio"]) == (0.3, 0.5)
    assert u["tokens_per_second"] == 4096.0 and u["flops_lower_bound"] is True
    item = entry["programs"]["items"][0]
    assert (item["flops_lower_bound"], item["loops"], item["loops_unknown_trip_count"]) == (
        True, 2, 1)  # fmt: skip
    assert item["executions_source"] == "ledger"
    assert item["device_seconds_per_execution"] == 0.004
    assert entry["agent"]["total"]["ledger_samples"] == 12
    assert entry["ledger"] == {
        "samples": 6, "sampled_seconds": 0.6, "window_seconds": 50.0,
        "last_sample_at": 1_700_000_190.0, "next_sample_at": None, "sample_seconds_asked": None,
        "sample_seconds_most": None,
        "parse_errors": {"total": 3, "delta": 1},
    }  # fmt: skip


def test_a_process_of_a_multi_process_job_says_which_and_where_its_step_goes(
    validator: Any,
) -> None:
    stalled = dataclasses.replace(
        job(), fleet=FleetIdentity("10.0.0.2:8476/4", 3, 4, 0, "w-3", True),
        step_breakdown=StepBreakdown(0.05, 0.01, 0.03, 0.01),
        steps=StepStats(steps_total=100, steps_begun_total=101, open_step_seconds=42.0,
                        stall_waits_in="host"),
    )  # fmt: skip
    entry = valid(validator, build_report(snapshot(1, jobs=(stalled,)), None))["jobs"][0]
    assert entry["fleet"] == {
        "job_key": "10.0.0.2:8476/4", "process_index": 3, "process_count": 4, "slice_index": 0,
        "worker": "w-3", "distributed": True, "job_key_declared": False,
    }  # fmt: skip
    assert entry["step_breakdown"] == {
        "step_seconds": 0.05, "compute_seconds": 0.01, "collective_seconds": 0.03,
        "host_seconds": 0.01,
    }  # fmt: skip
    steps = entry["steps"]
    assert (steps["steps_begun"], steps["open_step_seconds"], steps["stall_waits_in"]) == (
        101, 42.0, "host")  # fmt: skip
    alone = valid(validator, build_report(snapshot(1, jobs=(job(),)), None))["jobs"][0]
    assert alone["fleet"] is None and alone["step_breakdown"] is None


def test_without_samples_the_ledger_window_is_null(validator: Any) -> None:
    report = valid(validator, build_report(snapshot(1, jobs=(job(),)), None))
    entry = report["jobs"][0]
    assert entry["ledger"]["samples"] == 0 and entry["ledger"]["window_seconds"] is None
    assert entry["devices"][0]["busy_ratio"] is None
    assert entry["steps"]["inferred"] is False


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_700_000_000.1234) == "2023-11-14T22:13:20.123Z"


STACKS = (
    "Thread MainThread (1):\n" + '  File "/job/train.py", line 9, in wait_for_the_loader\n' * 200
)


def test_findings_of_jobs_and_host_are_in_every_report(validator: Any) -> None:
    stall = Finding("stall", "warning", "no step has finished for 31 s", 1_700_000_150.0,
                    evidence=(("seconds since last step", "31.0"),), fix="Read the stack.",
                    value=31.0, detail=STACKS)  # fmt: skip
    host = Finding("gpu_preallocated", "info", "gpu 0 looks 75% full", 1_700_000_100.0,
                   subject="gpu 0", value=5e10, fix="PREALLOCATE=false")  # fmt: skip
    base = rich_snapshot()
    stalled = dataclasses.replace(base.jobs[0], findings=(stall,))
    snap = dataclasses.replace(base, jobs=(stalled, base.jobs[1]), findings=(host,))
    report = valid(validator, build_report(snap, None))
    (finding,) = report["jobs"][0]["findings"]
    assert finding["kind"] == "stall" and finding["severity"] == "warning"
    assert finding["since"] == 1_700_000_150.0 and finding["value"] == 31.0
    assert finding["evidence"] == [{"name": "seconds since last step", "value": "31.0"}]
    assert finding["fix"] == "Read the stack." and finding["subject"] is None
    assert len(STACKS) > DETAIL_MAX_CHARS and finding["detail_truncated"] is True
    assert finding["detail"] == STACKS[:DETAIL_MAX_CHARS]
    assert report["jobs"][1]["findings"] == []
    assert report["findings"][0]["subject"] == "gpu 0"
    assert report["findings"][0]["detail_truncated"] is False
    # host findings do not depend on the groups; a job's come with the jobs group
    only_system = build_report(snap, None, ReportOptions(groups=frozenset({"system"})))
    assert valid(validator, only_system)["findings"][0]["kind"] == "gpu_preallocated"
    bad = json.loads(json.dumps(report))
    bad["findings"][0]["severity"] = "fatal"
    assert not validator.is_valid(bad)


def test_the_wall_time_account_is_reported_with_its_ratios(validator: Any) -> None:
    goodput = Goodput(100.0, (("productive", 70.0), ("host_wait", 10.0), ("compile", 20.0)),
                      ratio=0.7, ratio_5m=0.7, ratio_1h=None, biggest_badput="compile")  # fmt: skip
    entry = valid(validator, build_report(snapshot(1, jobs=(dataclasses.replace(
        job(), goodput=goodput),)), None))["jobs"][0]  # fmt: skip
    assert entry["goodput"] == {
        "wall_seconds": 100.0, "seconds": {"productive": 70.0, "host_wait": 10.0, "compile": 20.0},
        "ratio": 0.7, "ratio_5m": 0.7, "ratio_1h": None, "biggest_badput": "compile",
        "steps_marked": True, "restart_seconds": None,
    }  # fmt: skip
    assert valid(validator, build_report(snapshot(1, jobs=(job(),)), None))["jobs"][0][
        "goodput"] is None  # fmt: skip
    bad = build_report(snapshot(1, jobs=(dataclasses.replace(job(), goodput=goodput),)), None)
    bad["jobs"][0]["goodput"]["seconds"]["coffee"] = 1.0
    assert list(validator.iter_errors(bad))

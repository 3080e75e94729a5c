"""What the daemon reuses from one period to the next for a job's programs: their encoding for
views, their series for /metrics, and the programs the builder makes from the ledger. Each
must change the moment a program does (the ledger gives a program new executions every tick),
and none may keep a job that has gone, nor may the exposition differ from prometheus_client's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import gzip
import json
import time
import weakref

import pytest
from prometheus_client.exposition import generate_latest

from xmon.analysis.peaks import PeakTable
from xmon.daemon.bounds import StateBudget
from xmon.daemon.hub import Frame, Hub
from xmon.daemon.intake.convert import hello_of, report_of
from xmon.daemon.job_builder import JobBuilder
from xmon.daemon.jobs import JobState
from xmon.execution.samples import SampleReading
from xmon.exporters.prometheus import MetricsEndpoint, SnapshotCollector
from xmon.exporters.prometheus_programs import ProgramSeriesCache
from xmon.model import Job, Snapshot, from_dict, snapshot_to_dict
from xmon.wire.client import RequestFailed, SnapshotReader, decode
from xmon.wire.proto import xmon_pb2
from xmon.wire.snapshot_encoding import GZIP_FROM_BYTES, SnapshotEncoder

from support.sample_snapshots import snapshot, train_job


def _with_rate(job: Job, index: int, rate: float) -> Job:
    """The job with its program ``index`` given a new executions rate (a new object, as the
    ledger makes one)."""
    programs = list(job.programs)
    programs[index] = dataclasses.replace(programs[index], executions_per_second=rate)
    return dataclasses.replace(job, programs=tuple(programs))


def _plain(message: xmon_pb2.SnapshotMessage) -> object:
    payload = message.json
    return json.loads(gzip.decompress(payload) if payload[:2] == b"\x1f\x8b" else payload)


def test_an_encoded_snapshot_reads_back_whole_small_or_compressed() -> None:
    encoder = SnapshotEncoder()
    small = snapshot((train_job(n_programs=3),))
    message = encoder.encode(small)
    assert message.json[:1] == b"{" and decode(message) == small
    large = snapshot(tuple(dataclasses.replace(train_job(n_programs=600), pid=i) for i in range(3)))
    message = encoder.encode(large)
    assert len(gzip.decompress(message.json)) >= GZIP_FROM_BYTES  # several gzip members
    assert decode(message) == large and _plain(message) == snapshot_to_dict(large)


def test_programs_are_encoded_once_and_again_when_one_changes() -> None:
    encoder = SnapshotEncoder()
    jobs = tuple(dataclasses.replace(train_job(n_programs=600), pid=i) for i in range(2))
    encoder.encode(snapshot(jobs))
    assert encoder.programs_encoded == 1200
    encoder.encode(snapshot(jobs, seq=2))
    assert encoder.programs_encoded == 1200  # the same program objects: nothing re-encoded
    changed = (_with_rate(jobs[0], 5, 123.0), jobs[1])
    message = encoder.encode(snapshot(changed, seq=3))
    assert encoder.programs_encoded == 1800  # only the job whose program changed
    assert decode(message).jobs[0].programs[5].executions_per_second == 123.0
    assert decode(message) == snapshot(changed, seq=3)


def test_the_encoder_keeps_only_the_jobs_of_the_latest_snapshot() -> None:
    encoder = SnapshotEncoder()
    job = train_job(n_programs=50)
    gone = weakref.ref(job.programs[0])
    encoder.encode(snapshot((job,)))
    del job
    encoder.encode(snapshot(()))
    gc.collect()
    assert gone() is None


def test_the_builder_reuses_programs_until_the_ledger_changes() -> None:
    budget = StateBudget()
    hello = hello_of(xmon_pb2.AgentHello(protocol_version=1, job_name="j", pid=7), budget)
    state = JobState(hello=hello, connected_at=0.0, budget=budget)
    infos = [
        xmon_pb2.ProgramInfo(fingerprint=f"{i:064x}", name=f"p{i}", compiled_at=i + 1.0,
                             program_ids=[100 + i])
        for i in range(4)
    ]  # fmt: skip
    report = report_of(xmon_pb2.AgentReport(programs=infos), budget)
    state.apply(report, time.time(), time.monotonic())
    builder = JobBuilder(PeakTable())
    first = builder.build(state, None).programs
    assert first is state.sorted_programs()  # no ledger sample: the programs as reported
    state.ledger.add(_sample(executions=10))
    counted = builder.build(state, None).programs
    assert [p.executions for p in counted] == [10, 0, 0, 0]
    assert builder.build(state, None).programs is counted  # nothing changed: the same objects
    state.ledger.add(_sample(executions=30))
    again = builder.build(state, None).programs
    assert again is not counted and again[0].executions == 40


def _sample(executions: int) -> SampleReading:
    return SampleReading(
        started_at=time.time(), duration_seconds=1.0, core_seconds=1.0,
        executions={100: executions}, dominant=100, steps_marked=False, steps_in_core=None,
        device_busy_seconds={0: 0.5}, program_device_seconds={100: 0.5},
        program_device_runs={100: executions},
    )  # fmt: skip


def test_program_series_follow_a_changed_program_and_forget_gone_jobs() -> None:
    cache = ProgramSeriesCache()
    job = train_job(n_programs=300)

    def text(j: Job, seq: int) -> bytes:
        return generate_latest(SnapshotCollector(5, snapshot((j,), seq=seq), cache))

    assert text(job, 1) == generate_latest(SnapshotCollector(5, snapshot((job,), seq=1)))
    assert text(job, 1) == text(job, 1)
    flops = [p.flops or 0 for p in job.programs]
    heaviest = flops.index(max(flops))
    changed = _with_rate(job, heaviest, 4321.0)
    assert b"4321.0" in text(changed, 2)
    assert text(changed, 2) == generate_latest(SnapshotCollector(5, snapshot((changed,), seq=2)))
    gone = weakref.ref(changed.programs[0])
    cache.keep(())
    del job, changed
    gc.collect()
    assert gone() is None


def test_a_rendered_snapshot_is_not_kept_alive_by_its_render() -> None:
    endpoint = MetricsEndpoint()
    job = train_job(n_programs=20)
    gone = weakref.ref(job.programs[0])
    endpoint.update(snapshot((job,)))
    assert b"xmon_job_programs" in endpoint.body()
    endpoint.update(snapshot((), seq=2))
    endpoint.body()
    del job
    gc.collect()
    assert gone() is None  # nor by the previous render, kept for scrapes that come early


def test_the_exposition_is_prometheus_clients_byte_for_byte() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, Info

    from xmon.exporters.prometheus_text import exposition

    odd = dataclasses.replace(train_job(n_programs=40), job_name='we"ird\\na\nme')
    for snap in (snapshot(), snapshot((odd,)), snapshot(())):
        collector = SnapshotCollector(5, snap)
        assert exposition(collector) == generate_latest(collector)
    registry = CollectorRegistry()  # the kinds xmon does not use today, escapes in help text
    Counter("c", 'help \\ with\nnewline "quoted"', ["l"], registry=registry).labels("v").inc()
    Histogram("h", "h", registry=registry).observe(1.0)
    Info("i", "i", registry=registry).info({"a": "b"})
    assert exposition(registry) == generate_latest(registry)


class _Cycle:
    me: object = None


def test_release_after_streams_closed_frees_what_sits_in_cycles() -> None:
    from xmon.daemon import memory

    gc.disable()  # as when the interpreter has not yet started a full collection by itself
    try:
        held = _Cycle()
        held.me = held
        gone = weakref.ref(held)
        del held
        memory.release(collect=False)
        assert gone() is not None
        memory.release(collect=True)
        assert gone() is None
    finally:
        gc.enable()


def test_changes_name_the_programs_a_view_already_has_and_read_back_whole() -> None:
    encoder = SnapshotEncoder()
    jobs = tuple(dataclasses.replace(train_job(n_programs=600), pid=i) for i in range(3))
    first = snapshot(jobs)
    reader = SnapshotReader()
    earlier = reader.read(encoder.encode(first))
    assert earlier == first
    assert encoder.changes is not None and decode(encoder.changes) == first  # nothing before
    # job 1 gets a new rate; job 0 leaves; the others keep their program objects, job 2 moves
    second = snapshot((_with_rate(jobs[1], 5, 77.0), jobs[2]), seq=2)
    whole = encoder.encode(second)
    changes = encoder.changes
    assert changes is not None and len(changes.json) < 0.6 * len(whole.json)  # one job of two
    plain = _plain(changes)
    assert isinstance(plain, dict)
    assert [j["programs"] for j in plain["jobs"]][1] == {"same_as_job": 2}
    assert len(plain["jobs"][0]["programs"]) == 600  # changed: sent again
    read = reader.read(changes)
    assert read == second and read.jobs[1].programs is earlier.jobs[2].programs  # not decoded
    # a view that was not sent the first cannot read the changes: a clear error, not a guess
    with pytest.raises(RequestFailed, match="programs are those of a snapshot not read"):
        SnapshotReader().read(changes)
    assert decode(whole) == second


@pytest.mark.parametrize(
    "programs",
    ['{"same_as_job": "0"}', '{"same_as_job": true}', '{"other": 1}', '{"same_as_job": -1}'],
)
def test_a_hostile_reference_to_earlier_programs_is_refused(programs: str) -> None:
    reader = SnapshotReader()
    reader.read(SnapshotEncoder().encode(snapshot((train_job(n_programs=2),))))
    text = json.dumps(snapshot_to_dict(snapshot((train_job(n_programs=2),), seq=2)))
    text = text.replace('"programs": [', f'"programs": {programs}, "was": [', 1)
    with pytest.raises(RequestFailed, match="unusable"):
        reader.read(xmon_pb2.SnapshotMessage(json=text.encode()))


def test_a_hub_sends_changes_only_after_the_whole_frame_before() -> None:
    hub = Hub(period_seconds=1.0)
    view: asyncio.Queue[Frame] = asyncio.Queue(2)
    hub.subscribers.add(view)
    job = train_job(n_programs=300)
    hub.publish(snapshot((job,), seq=1))
    first = view.get_nowait()
    assert first.changes is None  # no frame before it
    hub.publish(snapshot((job,), seq=2))
    second = view.get_nowait()
    assert second.changes is not None and second.for_view(first.number) is second.changes
    assert second.for_view(None) is second.whole  # a view that joins now
    assert second.for_view(first.number - 1) is second.whole  # a view that skipped a frame
    hub.subscribers.clear()
    hub.publish(snapshot((job,), seq=3))  # not encoded: nobody reads it
    hub.subscribers.add(view)
    hub.publish(snapshot((job,), seq=4))
    assert view.get_nowait().changes is None  # the frame before was never sent
    hub.publish(snapshot((job,), seq=5))
    assert view.get_nowait().changes is not None
    hub.max_message_bytes = 2_000  # too small for the programs: trimmed
    hub.publish(snapshot((job,), seq=6))
    trimmed = view.get_nowait()
    assert trimmed.changes is None
    hub.max_message_bytes = 16 << 20
    hub.publish(snapshot((job,), seq=7))
    assert view.get_nowait().changes is None  # its views lack programs the encoder holds


def test_a_view_reads_a_newer_daemon_s_fields_and_an_older_one_s_gaps() -> None:
    whole = snapshot((train_job(n_programs=3),))
    data = snapshot_to_dict(whole)
    data["jobs"][0]["programs"][1]["from_a_newer_daemon"] = 1.5  # unknown: left out
    del data["jobs"][0]["goodput"]  # an older daemon's: the default
    before = json.dumps(data)
    read = from_dict(Snapshot, data)
    assert json.dumps(data) == before  # the caller's dict is not changed
    assert read.jobs[0].programs == whole.jobs[0].programs and read.jobs[0].goodput is None
    assert isinstance(read.jobs[0].programs[1].program_ids, tuple)

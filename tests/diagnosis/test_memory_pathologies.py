"""Memory pathologies against a real daemon: a job that runs out of memory (caught and not),
and one that leaks. Real JAX jobs on 4 CPU devices; the numbers are checked against what
each job itself holds.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import memory_jobs as scripts
import pytest
from google.protobuf import empty_pb2
from google.protobuf.unknown_fields import UnknownFieldSet
from job_suite import JobSuite, job_suite

from xmon.model import Finding
from xmon.wire.client import DaemonClient

from support.procs import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("memory-pathologies")]  # the module's jobs

FINDING_SECONDS = 60  # from the start of all jobs, jax start-up included
MIB = 1 << 20


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSuite]:
    root = tmp_path_factory.mktemp("memory")
    jobs = {"oom": scripts.OOM_CAUGHT, "oomdies": scripts.OOM_UNCAUGHT, "leak": scripts.LEAK,
            "paramleak": scripts.PARAMS_LEAK}  # fmt: skip
    with job_suite(root, jobs, FINDING_SECONDS) as running:
        yield running


def _evidence(finding: Finding) -> dict[str, str]:
    return dict(finding.evidence)


def test_a_caught_out_of_memory_names_the_largest_array_and_the_program(suite: JobSuite) -> None:
    job, finding = suite.finding("oom", "oom")
    assert finding.severity == "error" and finding.subject == "jit_expand"
    assert "out of memory in jit_expand: 16TiB could not be allocated" in finding.summary
    evidence = _evidence(finding)
    # the job's largest array: float32[2048,1024], 8 MiB, 2 MiB on each of the 4 devices
    largest = evidence["largest live array 1"]
    assert largest.startswith("float32[2048,1024] 8MiB; device 0: 2MiB, device 1: 2MiB")
    assert "device 3: 2MiB" in largest and "NamedSharding" in largest
    # the bias: 1 MiB on the one device the step's output lands on (XLA picks which)
    assert re.match(r"float32\[512,512\] 1MiB; device \d: 1MiB", evidence["largest live array 2"])
    assert evidence["program"] == "jit_expand (allocation size matches its memory analysis)"
    assert "output 16TiB" in evidence["program memory"]
    assert evidence["seen"] == "step" and "RESOURCE_EXHAUSTED" in evidence["error"]
    for word in ("donate_argnums", "jax.checkpoint", "smaller batch", "shard",
                 "XLA_PYTHON_CLIENT_MEM_FRACTION"):  # fmt: skip
        assert word in finding.fix
    files = [Path(v) for k, v in finding.evidence if k == "file"]
    assert {p.suffix for p in files} == {".json", ".prof"}
    _check_files(files, job.pid)
    assert "caught: JaxRuntimeError" in suite.procs["oom"].log()  # the job saw its error
    doctor = suite.doctor("--job", "oom")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "ERROR oom: out of memory in jit_expand" in doctor.stdout
    assert re.search(r"largest live array 1 +float32\[2048,1024\] 8MiB", doctor.stdout)


def test_an_uncaught_out_of_memory_is_reported_before_the_job_dies(suite: JobSuite) -> None:
    proc = suite.procs["oomdies"]
    status = proc.popen.wait(FINDING_SECONDS)
    log = proc.log()
    # the job's behaviour is its own: the traceback and exit status of an uncaught exception
    assert status == 1, log
    assert "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED" in log
    runs = list((suite.root / "daemon" / "tb").glob("oomdies-*/oom/*.json"))
    assert len(runs) == 1, sorted((suite.root / "daemon" / "tb").rglob("*"))
    pid = int(runs[0].parent.parent.name.rsplit("-", 1)[1])
    report = _check_files([runs[0], runs[0].with_suffix(".prof")], pid)
    assert report["seen_by"] == "excepthook"
    assert report["program"]["name"] == "jit_expand"

    # After the crash the job is gone, and what killed it is still told (a host finding)
    def left_behind() -> list[Finding]:
        with DaemonClient(suite.daemon.socket_path) as client:
            snapshot = client.get_snapshot()
        return [f for f in snapshot.findings if f.kind == "ended_job"
                and f.subject == f"oomdies (pid {pid})"]  # fmt: skip

    (ended,) = wait_for(left_behind, 10, "the dead job's out-of-memory finding", interval=0.5)
    assert ended.severity == "error" and "jit_expand" in ended.summary + str(ended.evidence)
    doctor = suite.doctor()
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert f"oomdies (pid {pid}) ended with this oom finding" in doctor.stdout


def _check_files(files: list[Path], pid: int) -> dict[str, object]:
    report: dict[str, object] = {}
    for path in files:
        assert path.parent.parent.name.endswith(f"-{pid}"), path
        if path.suffix == ".json":
            report = json.loads(path.read_text())
            largest = report["largest_arrays"][0]  # type: ignore[index]
            assert largest["shape"] == ["2048", "1024"] and int(largest["nbytes"]) == 8 * MIB
        else:  # a pprof profile: gzip'd protobuf with pprof's string table (field 6)
            profile = empty_pb2.Empty()
            profile.ParseFromString(gzip.decompress(path.read_bytes()))
            fields = {f.field_number: f for f in UnknownFieldSet(profile)}
            assert 6 in fields and 2 in fields, sorted(fields)  # string_table, samples
            strings = [f.data for f in UnknownFieldSet(profile) if f.field_number == 6]
            assert b"space" in strings or b"bytes" in strings, strings[:8]
    return report


def test_a_leak_is_fitted_at_the_job_s_own_bytes_per_step(suite: JobSuite) -> None:
    job, finding = suite.finding("leak", "memory_leak")
    truth = json.loads((suite.root / "leak.truth").read_text())
    assert truth["bytes_per_step"] == scripts.LEAK_BYTES
    steps_per_second = truth["steps"] / truth["seconds"]
    expected = scripts.LEAK_BYTES * steps_per_second  # bytes per second the job adds
    evidence = _evidence(finding)
    slope = _parse_bytes(evidence["growth per second"])
    assert expected * 0.75 <= slope <= expected * 1.25, (slope, expected, evidence)
    assert finding.value is not None and finding.value > 0  # seconds to out of memory
    limit = _parse_bytes(evidence["host memory available"])
    latest = _parse_bytes(evidence["first / latest bytes in use"].split(" / ")[1])
    projected = (limit - latest) / slope
    assert finding.value == pytest.approx(projected, rel=0.1)
    assert f"{finding.value:.0f}" == evidence["seconds to out of memory"]


def test_a_copy_of_the_params_kept_every_step_is_a_leak_at_its_rate(suite: JobSuite) -> None:
    """4 MiB kept every step in 64 arrays: the device reading (a paced walk of every live
    array) or the process's resident memory shows it, at the job's own rate."""
    _, finding = suite.finding("paramleak", "memory_leak")
    truth = json.loads((suite.root / "paramleak.truth").read_text())
    assert truth["bytes_per_step"] == 64 * 128 * 128 * 4
    expected = truth["bytes_per_step"] * truth["steps"] / truth["seconds"]
    slope = _parse_bytes(_evidence(finding)["growth per second"])
    assert expected * 0.75 <= slope <= expected * 1.25, (slope, expected, finding.evidence)


def _parse_bytes(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+) ?(B|KiB|MiB|GiB|TiB)", text.strip())
    assert match, text
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    return float(match[1]) * scale[match[2]]

"""`xmon capture` against a real daemon and a real stepping JAX job on 4 CPU devices."""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.wire.client import DaemonClient, RequestFailed

from support.procs import Daemon, wait_for
from support.profiling_procs import (
    Job,
    can_mount,
    get_json,
    profiling_daemon,
    run_stepping_job,
    tensorboard_server,
    tmpfs,
    xmon_cli,
)

MIN_FREE = 16 * 1024


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Job, Path]]:
    work = tmp_path_factory.mktemp("capture")
    daemon = profiling_daemon(work / "daemon", capture_min_free_bytes=MIN_FREE)
    job = None
    try:
        job = run_stepping_job(work / "job", daemon, "capjob")
        yield daemon, job, work
        assert "RESULT" in job.stop(), "the job must keep running through every capture"
    finally:
        if job is not None and job.proc.alive():
            job.proc.stop()
        daemon.stop()


def _paths(stdout: str) -> list[Path]:
    return [Path(line.strip()) for line in stdout.splitlines() if line.startswith("  /")]


def _capture(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    result = xmon_cli(daemon, "capture", *args)
    return result.returncode, result.stdout, result.stderr


def test_trace_lands_in_the_jobs_run_and_xprof_finds_the_jitted_function(setup) -> None:
    daemon, job, _ = setup
    code, out, err = _capture(daemon, "--job", "capjob", "--duration", "1s")
    assert code == 0, err
    [trace] = _paths(out)
    tb = Path(daemon.extra_env["XMON_LOGDIR"])
    assert trace.parent.parent == tb / f"capjob-{job.pid}" / "plugins" / "profile"
    assert trace.name.endswith(".xplane.pb") and trace.stat().st_size > 0
    assert f"xprof server --logdir {tb} --port 8791" in out
    assert f"tensorboard --logdir {tb}" in out
    note = json.loads((trace.parent / "xmon_capture.json").read_text())
    assert (note["trigger"], note["pid"], note["kind"]) == ("manual", job.pid, "trace")

    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(trace)], "trace_viewer", {})
    names = {event.get("name", "") for event in json.loads(data)["traceEvents"]}
    assert any("train_step" in name for name in names), sorted(names)[:50]


def test_tensorboard_shows_scalars_and_trace_in_one_run(setup) -> None:
    daemon, job, work = setup
    code, out, err = _capture(daemon, "--pid", str(job.pid), "--duration", "300ms")
    assert code == 0, err
    session = _paths(out)[0].parent.name
    run = f"capjob-{job.pid}"
    tb = Path(daemon.extra_env["XMON_LOGDIR"])
    with tensorboard_server(tb, work) as url:
        wait_for(lambda: f"{run}/{session}" in get_json(f"{url}/data/plugin/profile/runs"),
                 60, "the profile plugin to list the capture")  # fmt: skip
        wait_for(lambda: run in get_json(f"{url}/data/runs"), 60, "the scalar run")
        tools = get_json(f"{url}/data/plugin/profile/run_tools?run={run}/{session}")
        assert "trace_viewer@" in tools or "trace_viewer" in tools, tools


def test_memory_profile_is_a_gzipped_pprof_next_to_its_note(setup) -> None:
    daemon, job, _ = setup
    code, out, err = _capture(daemon, "--job", "capjob", "--memory")
    assert code == 0, err
    [profile] = _paths(out)
    assert profile.suffix == ".prof" and profile.parent.name == "memory"
    assert gzip.decompress(profile.read_bytes())  # pprof protos are gzipped
    assert json.loads(profile.with_suffix(".json").read_text())["kind"] == "memory"
    assert f"pprof -http=localhost:8080 {profile}" in out


def test_second_capture_of_the_same_job_is_busy(setup) -> None:
    daemon, job, _ = setup
    first: dict[str, object] = {}

    def long_capture() -> None:
        with DaemonClient(daemon.socket_path) as client:
            first["result"] = client.capture(job_pid=job.pid, duration_s=4.0)

    thread = threading.Thread(target=long_capture)
    thread.start()
    try:

        def busy() -> str | None:
            code, _, err = _capture(daemon, "--job", "capjob", "--duration", "1s")
            return err if code == 1 and "busy" in err else None

        err = wait_for(busy, 30, "a second capture to be refused as busy", interval=0.2)
        assert re.match(r"xmon capture: busy: job 'capjob' \(pid \d+\) is already capturing", err)
        assert err.count("\n") == 1, "one line, no traceback"
    finally:
        thread.join(60)
    assert first["result"].paths  # the first capture is unaffected


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--job", "nosuchjob"), 1, "xmon capture: no job named 'nosuchjob'; attached: capjob"),
        (("--pid", "1"), 1, "xmon capture: no job with pid 1; attached: capjob"),
        (("--duration", "20m"), 1, "xmon capture: duration must be between 0.05 s and 300 s"),
        (("--duration", "1ms"), 1, "xmon capture: duration must be between 0.05 s and 300 s"),
        (("--duration", "9999999s"), 1, "xmon capture: duration must be between 0.05 s and 300"),
        (("--duration", "soon"), 2, "xmon capture: --duration: expected a duration like 3s"),
        (("--duration", "0"), 2, "xmon capture: --duration: must be longer than 0"),
    ],
)
def test_bad_requests_get_one_clear_line(setup, args, code, message) -> None:
    daemon, _, _ = setup
    got, out, err = _capture(daemon, *args)
    assert (got, out) == (code, "")
    assert err.startswith(message) and err.count("\n") == 1, err


def test_logdir_that_is_a_file_is_refused(setup, tmp_path: Path) -> None:
    daemon, _, _ = setup
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = _capture(daemon, "--logdir", str(blocker), "--duration", "100ms")
    assert code == 1 and err == f"xmon capture: logdir {blocker} is not a directory\n"
    code, _, err = _capture(daemon, "--logdir", str(blocker / "sub"), "--duration", "100ms")
    assert code == 1 and err.startswith("xmon capture: logdir not writable: job 'capjob'"), err


needs_mount = pytest.mark.skipif(not can_mount(), reason="needs root to mount a small tmpfs")


@needs_mount
def test_read_only_logdir_is_refused_and_the_job_goes_on(setup, tmp_path: Path) -> None:
    daemon, _, _ = setup
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        code, _, err = _capture(daemon, "--logdir", str(ro), "--duration", "100ms")
    assert code == 1, err
    assert err.startswith("xmon capture: logdir not writable: job 'capjob'"), err
    assert "Read-only file system" in err and err.count("\n") == 1
    assert _capture(daemon, "--duration", "100ms")[0] == 0, "still capturing afterwards"


@needs_mount
def test_full_disk_is_refused_before_asking_the_job(setup, tmp_path: Path) -> None:
    daemon, _, _ = setup
    with tmpfs(tmp_path / "tiny", "8k") as tiny:
        code, _, err = _capture(daemon, "--logdir", str(tiny), "--duration", "100ms")
        assert not any(tiny.iterdir())
    assert code == 1
    assert err.startswith("xmon capture: disk full: only 8.0 KiB free on "), err


@needs_mount
def test_disk_filling_up_during_the_trace_is_reported_and_cleaned(setup, tmp_path: Path) -> None:
    daemon, job, _ = setup
    with tmpfs(tmp_path / "small", "48k") as small:
        code, _, err = _capture(daemon, "--logdir", str(small), "--duration", "1s")
        leftovers = [p for p in small.rglob("*") if p.is_file()]
    assert code == 1, "a 1 s trace of a stepping job does not fit in 48 KiB"
    assert err.startswith(f"xmon capture: disk full: job 'capjob' (pid {job.pid}): could not "
                          "write the trace"), err  # fmt: skip
    assert "No space left on device" in err and err.count("\n") == 1
    assert not [p for p in leftovers if p.name.endswith(".xplane.pb")], "partial trace removed"
    # jax keeps its profiler session after a failed export; the agent must have reset it
    code, out, err = _capture(daemon, "--duration", "100ms")
    assert code == 0, err


def test_client_api_for_views(setup) -> None:
    daemon, job, _ = setup
    with DaemonClient(daemon.socket_path) as client:
        result = client.capture(job_pid=job.pid, duration_s=0.2)
        assert (result.job_name, result.pid, result.kind) == ("capjob", job.pid, "trace")
        assert result.run_dir.endswith(f"/capjob-{job.pid}")
        with pytest.raises(RequestFailed) as caught:
            client.capture(job_pid=job.pid, duration_s=0.001)
        assert caught.value.code == "INVALID_ARGUMENT"


def test_capture_counts_reach_the_snapshot_and_metrics(setup) -> None:
    daemon, job, _ = setup
    assert _capture(daemon, "--duration", "100ms")[0] == 0
    with DaemonClient(daemon.socket_path) as client:

        def counted() -> object:
            jobs = [j for j in client.get_snapshot().jobs if j.pid == job.pid]
            manual = [c for c in jobs[0].captures if (c.kind, c.trigger) == ("trace", "manual")]
            return manual and manual[0].ok_total >= 1 and manual[0]

        count = wait_for(counted, 30, "capture counts in the snapshot")
    assert count.last_paths and count.last_reason == "requested with xmon capture"
    text = daemon.scrape()
    assert re.search(r'xmon_job_captures_total\{job_name="capjob",kind="trace",pid="\d+",'
                     r'trigger="manual"\} [1-9]', text), text  # fmt: skip
    assert 'xmon_exporter_up{exporter="tensorboard"} 1.0' in text

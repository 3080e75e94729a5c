"""What ran, how often, and the work it did, against the truth real JAX jobs compute themselves:
FLOPs per step, FLOP/s, HFU, MFU, steps inferred without markers, device busy ratio.

Each job (tests/fidelity/execution_jobs.py) runs under ``xmon run`` on 4 CPU devices, attached
to a real daemon; the execution ledger samples it every 2 s for 1 s. The test reads the
daemon's snapshot once several samples are in, then compares with the job's own numbers over
the same steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xmon.model import Job
from xmon.wire.client import DaemonClient

from support.procs import CPU_PEAKS, Daemon, Proc, start_job, wait_for

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).with_name("execution_jobs.py")
LEDGER_ENV = {"XMON_LEDGER_INTERVAL": "2", "XMON_LEDGER_DURATION": "1"}
SAMPLES = 5
PEAK = CPU_PEAKS["cpu"]["flops_per_second"] * 4  # the job's 4 devices together


def run_case(
    tmp_path: Path,
    daemon: Daemon,
    case: str,
    timeout: float = 90,
    samples: int = SAMPLES,
    inferred: bool = False,
    ledger_env: dict[str, str] = LEDGER_ENV,
    until: Callable[[Job], bool] | None = None,
) -> tuple[Job, dict[str, Any]]:
    """Run the case until the ledger has ``samples`` samples (and, with ``inferred``, its
    steps are inferred; with ``until``, that holds of its snapshot); its snapshot and the
    job's truth."""
    out = tmp_path / f"{case}.json"
    script = f"import runpy, sys\nsys.argv = {[str(JOBS), case, str(out)]!r}\n"
    script += f"runpy.run_path({str(JOBS)!r}, run_name='__main__')\n"
    job = start_job(tmp_path, daemon.socket_path, script, case, period=0.5, **ledger_env)
    try:
        with DaemonClient(daemon.socket_path) as client:

            def sampled() -> Job | None:
                assert job.alive(), job.log()
                jobs = [j for j in client.get_snapshot().jobs if j.job_name == case]
                ready = jobs and jobs[0].ledger.samples >= samples
                ready = ready and (until is None or until(jobs[0]))
                return jobs[0] if ready and (jobs[0].steps.inferred or not inferred) else None

            seen = wait_for(sampled, timeout, f"{samples} execution samples of {case}")
        Path(f"{out}.stop").touch()
        assert job.popen.wait(60) == 0, job.log()
    finally:
        _stop(job)
    truth = json.loads(out.read_text())
    return seen, truth


def _stop(job: Proc) -> None:
    if job.alive():
        job.stop()


def own_rate(truth: dict[str, Any], job: Job, min_steps: int = 16) -> float:
    """The job's steps/s over the very steps whose durations the daemon's window holds: the
    job's own step begins are matched to that window by their intervals."""
    begins = truth["begins"]
    own = [b - a for a, b in zip(begins, begins[1:], strict=False)]
    window = list(job.steps.window)
    assert len(window) >= min_steps and len(own) >= len(window)
    offsets = range(len(own) - len(window) + 1)
    best = min(offsets, key=lambda k: sum(abs(own[k + i] - w) for i, w in enumerate(window)))
    matched = own[best : best + len(window)]
    # The job reads its clock just before xmon's step begins: the two differ by the time the
    # GIL takes to come back, usually microseconds.
    mismatch = sum(abs(a - b) for a, b in zip(matched, window, strict=True)) / len(window)
    assert mismatch < 0.001, f"the job's steps do not match the daemon's window ({mismatch} s)"
    return len(matched) / sum(matched)


def close(value: float | None, truth: float, tolerance: float) -> bool:
    return value is not None and abs(value - truth) <= tolerance * abs(truth)


@pytest.mark.parametrize(
    "case", ["aot", "same_name", "accumulate", "eval", "eval_10", "scan_layers", "data_movement"]
)
def test_flops_per_step_count_what_ran(tmp_path: Path, daemon: Daemon, case: str) -> None:
    job, truth = run_case(tmp_path, daemon, case)
    steps, util = job.steps, job.utilization
    assert not steps.inferred and steps.steps_per_second
    assert close(steps.flops_per_step, truth["flops_per_step"], 0.02), [
        (p.name, p.flops, p.executions_per_step, p.executions) for p in job.programs if p.executions
    ]
    # the job's own analytic matmul count agrees with its cost analysis (of the unrolled twin
    # where the step has a loop)
    assert close(truth["flops_per_step"], truth["analytic_flops_per_step"], 0.02)
    rate = own_rate(truth, job)
    assert close(steps.steps_per_second, rate, 0.02)
    assert close(util.achieved_flops_per_second, truth["flops_per_step"] * rate, 0.03)
    assert close(util.hardware_flops_utilization_ratio, truth["flops_per_step"] * rate / PEAK,
                 0.03)  # fmt: skip
    assert util.model_flops_utilization_ratio is None  # nothing declared: no MFU
    assert not util.flops_lower_bound

    ran = sorted(p.executions_per_step for p in job.programs if p.executions_per_step)
    expected = {"aot": [1.0], "same_name": [1.0, 1.0], "accumulate": [1.0, 4.0],
                "eval": [0.5, 1.0], "eval_10": [0.1, 1.0],
                "scan_layers": [1.0, 1.0], "data_movement": [1.0, 1.0]}[case]  # fmt: skip
    # within 2 % each: an eval every 10 steps counted one too many in a sample is +25 %
    assert ran == pytest.approx(expected, rel=0.02), [
        (p.name, p.executions_per_step) for p in job.programs
    ]
    if case == "same_name":
        assert {p.name for p in job.programs if p.executions_per_step} == {"jit_step"}


@pytest.mark.parametrize("case", ["branches", "switch_layers"])
def test_a_branch_the_data_picks_is_counted_as_often_as_it_runs(
    tmp_path: Path, daemon: Daemon, case: str
) -> None:
    """XLA costs a lax.cond or lax.switch at its costliest branch, whichever runs. One job takes
    its costly branch one step in four; the other switches among three in each of 6 scanned
    layers, by the layer and the step. The samples show which branch each run took: FLOPs per
    step are what ran, no longer an upper bound, within 2 % of the job's own count."""
    job, truth = run_case(tmp_path, daemon, case, until=branches_counted)
    steps, util = job.steps, job.utilization
    assert not util.flops_upper_bound and not util.flops_lower_bound
    (step,) = [p for p in job.programs if p.flops_branch_mix]  # the step's program
    assert step.executions_per_step == 1.0 and not step.flops_upper_bound
    assert step.flops_xla is not None  # XLA's own figure, the costliest branch, stays as it was
    costliest = truth["costliest_flops_per_step"]
    assert close(step.flops_xla * step.num_devices, costliest, 0.02)
    print(f"{case}: FLOPs/step {steps.flops_per_step:.4g} (the job's "
          f"{truth['flops_per_step']:.4g}, XLA's costliest {costliest:.4g})")  # fmt: skip
    assert close(steps.flops_per_step, truth["flops_per_step"], 0.02)
    assert close(truth["flops_per_step"], truth["analytic_flops_per_step"], 0.02)
    rate = own_rate(truth, job)
    assert close(steps.steps_per_second, rate, 0.02)
    assert close(util.achieved_flops_per_second, truth["flops_per_step"] * rate, 0.03)


def branches_counted(job: Job) -> bool:
    """Whether a program's conditionals have had their branches counted (the benchmark waits
    for it too)."""
    return any(p.flops_branch_mix for p in job.programs)


@pytest.mark.alone  # its samples are tried on the ledger's duty, which a busy host delays
def test_a_job_tracing_itself_has_its_ledger_numbers_absent_and_told_why(
    tmp_path: Path, daemon: Daemon
) -> None:
    """The job holds the process's one profiler for its whole run: every sample is skipped.
    What stands on samples is absent (never 0 or a guess), what does not (marked steps) is
    right, and the job's findings say why (xmon doctor shows them)."""

    def told(job: Job) -> bool:
        return any(f.kind == "ledger_kept_busy" for f in job.findings)

    # three samples skipped, at one try every 2 s, once the job has started: slower on a busy host
    job, truth = run_case(tmp_path, daemon, "traced", samples=0, until=told, timeout=180)
    steps, util = job.steps, job.utilization
    assert job.ledger.samples == 0 and job.agent.ledger_samples_busy_total >= 3
    assert steps.flops_per_step is None and util.achieved_flops_per_second is None
    assert util.hardware_flops_utilization_ratio is None and job.step_breakdown is None
    assert all(d.busy_ratio is None for d in job.devices)
    assert close(steps.steps_per_second, own_rate(truth, job), 0.02)
    (finding,) = [f for f in job.findings if f.kind == "ledger_kept_busy"]
    assert "own trace" in finding.summary and "jax.profiler.trace" in finding.fix
    assert list((tmp_path / "traced.trace").rglob("*.xplane.pb")), "the job's trace was written"


@pytest.mark.parametrize(
    "case", ["slow_0.3", pytest.param("slow_2", marks=pytest.mark.slow(45)),
             pytest.param("slow_10", marks=pytest.mark.slow(90))]
)  # fmt: skip
def test_steps_longer_than_a_sample_are_held_whole(
    tmp_path: Path, daemon: Daemon, case: str
) -> None:
    # A sample is configured for 1 s: 0.3 s steps fall across its ends, 2 s and 10 s steps
    # outlast it. Samples of 10 s steps are 20 s apart (the duty): two of them, over 4 steps.
    ten = case == "slow_10"
    job, truth = run_case(tmp_path, daemon, case, timeout=200 if ten else 150,
                          samples=2 if ten else SAMPLES)  # fmt: skip
    steps, util = job.steps, job.utilization
    ran = [p.executions_per_step for p in job.programs if p.executions_per_step]
    assert ran == [1.0], [(p.name, p.executions_per_step, p.executions) for p in job.programs]
    assert close(steps.flops_per_step, truth["flops_per_step"], 0.02)
    rate = own_rate(truth, job, min_steps=4 if ten else 16)
    assert close(steps.steps_per_second, rate, 0.02), (steps.steps_per_second, rate)
    assert close(util.achieved_flops_per_second, truth["flops_per_step"] * rate, 0.03)
    assert close(util.hardware_flops_utilization_ratio, truth["flops_per_step"] * rate / PEAK,
                 0.03)  # fmt: skip


def test_an_eval_too_rare_for_a_default_sample_is_counted_over_longer_ones(
    tmp_path: Path, daemon: Daemon
) -> None:
    # Samples of the default 0.2 s hold 8-32 steps of this job (6-25 ms each), and an eval
    # every 30 steps once or not at all: counted in the step program's windows (about 100
    # steps, 3 or 4 evals), it came out 10-20 % off. The daemon asks for samples of 2.5 eval
    # periods, which hold two of its starts, between which it is counted exactly. Three
    # windows in a row: one window's counts can be right by chance.
    env = {"XMON_LEDGER_INTERVAL": "0.5", "XMON_LEDGER_DURATION": "0.2"}
    exact_at: list[float | None] = []

    def exact(job: Job) -> bool:
        ran = sorted(p.executions_per_step for p in job.programs if p.executions_per_step)
        right = ran == pytest.approx([1 / 30, 1.0], rel=0.02)
        if right and job.ledger.last_sample_at not in exact_at:
            exact_at.append(job.ledger.last_sample_at)
        elif not right:
            exact_at.clear()
        return len(exact_at) >= 3

    job, truth = run_case(tmp_path, daemon, "eval_30", timeout=240, samples=6, ledger_env=env,
                          until=exact)  # fmt: skip
    asked = job.ledger.sample_seconds_asked
    # Longer than configured, within the cap: 2.5 periods of 30 steps (6-25 ms a step, by
    # toolchain and load), unless the byte cap cuts it.
    assert asked is not None and float(env["XMON_LEDGER_DURATION"]) < asked <= 5.0, asked
    assert close(job.steps.flops_per_step, truth["flops_per_step"], 0.02)


def test_samples_too_large_to_read_are_shortened_until_they_are_read(
    tmp_path: Path, daemon: Daemon
) -> None:
    """A step of 600 calls of a tiny program makes a few hundred thousand profiler events a
    second: 2 s samples hold more than the daemon reads (131,072). It refuses them and asks
    the job for samples half as long at each refusal, until they are read; the ledger's
    numbers then come from them, right."""
    env = {"XMON_LEDGER_INTERVAL": "4", "XMON_LEDGER_DURATION": "2"}
    job, truth = run_case(tmp_path, daemon, "many_ops", timeout=150, samples=2, ledger_env=env)
    most = job.ledger.sample_seconds_most
    # half the refused sample's length, which counts the session's start (tenths of a second
    # on a loaded host)
    refused_length = float(env["XMON_LEDGER_DURATION"]) + 0.5
    assert most is not None and most <= 0.5 * refused_length, most
    assert job.ledger.samples_dropped_total >= 1
    refused = re.search(
        r'xmon_daemon_refused_total\{bound="xspace_events"\} (\S+)', daemon.scrape()
    )
    assert refused and float(refused.group(1)) >= 1
    # The samples read are shorter than configured, as asked: a marked one also holds a whole
    # step (~30 ms), and its length counts the session's start (up to tenths of a second on a
    # loaded host)
    # (a sample read before the last refusal was asked to be twice as long as the last ask)
    mean_sample = job.ledger.sampled_seconds / job.ledger.samples
    assert mean_sample < float(env["XMON_LEDGER_DURATION"]) and mean_sample <= 2 * most + 0.5
    ran = [p.executions_per_step for p in job.programs if p.executions_per_step]
    assert ran == [pytest.approx(truth["calls_per_step"], rel=0.02)], [
        (p.name, p.executions_per_step, p.executions) for p in job.programs
    ]
    assert max(d.busy_ratio or 0.0 for d in job.devices) > 0
    assert "samples_too_large" not in {f.kind for f in job.findings}  # read now


@pytest.mark.slow(40)
def test_a_job_compiling_a_new_program_every_step_has_its_flops_per_step(
    tmp_path: Path, daemon: Daemon
) -> None:
    job, truth = run_case(tmp_path, daemon, "recompile", timeout=150)
    assert close(job.steps.flops_per_step, truth["flops_per_step"], 0.02), [
        (p.name, p.flops, p.executions_per_step, p.executions) for p in job.programs if p.executions
    ]


UNMARKED = ["unmarked", "slow_0.3_unmarked", "slow_2_unmarked", "slow_10_unmarked"]
# Short steps' sampled rates are slowed by the profiler more on a busy host: judged alone.
# Long steps are inferred slowly, and their rates hardly slowed: run beside the rest.
UNMARKED_MARKS = {
    "unmarked": pytest.mark.alone, "slow_0.3_unmarked": pytest.mark.alone,
    "slow_2_unmarked": pytest.mark.slow(50), "slow_10_unmarked": pytest.mark.slow(150),
}  # fmt: skip


def unmarked_timeout(case: str) -> float:
    """Samples grow from 1 s (4x each, then 3.5 periods) until they hold three starts of the
    step's program, spaced to keep the duty: 10 s steps are inferred about 3 minutes in."""
    return 330 if case == "slow_10_unmarked" else 150


def run_unmarked(tmp_path: Path, daemon: Daemon, case: str) -> tuple[Job, dict[str, Any]]:
    return run_case(tmp_path, daemon, case, timeout=unmarked_timeout(case), inferred=True)


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=UNMARKED_MARKS[case]) for case in UNMARKED]
)
def test_steps_are_inferred_without_markers(tmp_path: Path, daemon: Daemon, case: str) -> None:
    job, truth = run_unmarked(tmp_path, daemon, case)
    steps = job.steps
    assert steps.inferred and steps.inferred_from == "jit__layer"
    assert steps.steps_total == 0
    assert close(steps.flops_per_step, truth["flops_per_step"], 0.02)
    overall = (len(truth["begins"]) - 1) / (truth["begins"][-1] - truth["begins"][0])
    # Sampled rates run while the profiler records, which slows a CPU job by a few percent.
    assert close(steps.steps_per_second, overall, 0.10), (steps.steps_per_second, overall)
    assert steps.p50_step_seconds == pytest.approx(1 / steps.steps_per_second)
    assert close(job.utilization.achieved_flops_per_second,
                 truth["flops_per_step"] * overall, 0.10)  # fmt: skip


@pytest.mark.alone  # short steps' sampled rate, which the profiler slows more on a busy host
def test_accumulation_without_markers_is_counted_per_micro_step_and_said_to_be(
    tmp_path: Path, daemon: Daemon
) -> None:
    """Four micro-steps, then the update, no markers: the samples cannot tell this from a
    train step with an eval every fourth, so steps are the busiest program's (the micro-step)
    and each number is right for them, and the job is told its steps may be 4 times fewer."""

    def told(job: Job) -> bool:
        return any(f.kind == "inferred_step_ambiguous" for f in job.findings)

    job, truth = run_case(tmp_path, daemon, "accumulate_unmarked", timeout=150, inferred=True,
                          until=told)  # fmt: skip
    steps = job.steps
    assert steps.inferred and steps.inferred_from == "jit_micro" and steps.steps_total == 0
    (finding,) = [f for f in job.findings if f.kind == "inferred_step_ambiguous"]
    assert "jit_update runs once every 4 of them" in finding.summary, finding
    # per micro-step: one micro-step and a quarter of the update
    assert close(steps.flops_per_step, truth["flops_per_step"] / 4, 0.02)
    overall = (len(truth["begins"]) - 1) / (truth["begins"][-1] - truth["begins"][0])
    # Sampled rates run while the profiler records, which slows a CPU job by a few percent.
    assert close(steps.steps_per_second, 4 * overall, 0.10), (steps.steps_per_second, overall)


@pytest.mark.alone  # the job times its own calls: on a busy host they wait for a core too
def test_device_busy_ratio_shows_a_host_bound_job(tmp_path: Path, daemon: Daemon) -> None:
    job, truth = run_case(tmp_path, daemon, "host_bound")
    own = truth["device_seconds"] / truth["wall_seconds"]
    busy = {d.info.id: d.busy_ratio for d in job.devices}
    assert busy[0] is not None and abs(busy[0] - own) <= 0.05, (busy, own)
    assert all(busy[d] is not None and busy[d] < 0.02 for d in (1, 2, 3)), busy
    # The step's breakdown follows the device the step uses, not the mean of all four (which
    # put a quarter of the compute in it and the rest in the host's share).
    steps = len(truth["begins"])
    step_seconds = truth["wall_seconds"] / steps
    own_compute = truth["device_seconds"] / steps
    breakdown = job.step_breakdown
    assert breakdown is not None
    assert abs(breakdown.compute_seconds - own_compute) <= 0.05 * step_seconds, (
        breakdown, own_compute, step_seconds)  # fmt: skip
    assert abs(breakdown.host_seconds - (step_seconds - own_compute)) <= 0.05 * step_seconds


# The transformer's many small ops: ~930 profiler events a step over its 4 devices, and up to
# ~150 steps a second (5 ms of host work each). Its 1 s samples could pass the daemon's bound
# of 131,072 events a sample, and in one run every one was refused; half a second stays under.
SHORT_SAMPLES = {**LEDGER_ENV, "XMON_LEDGER_DURATION": "0.5"}


def test_transformer_mfu_from_declared_model_flops(tmp_path: Path, daemon: Daemon) -> None:
    job, truth = run_case(tmp_path, daemon, "transformer", ledger_env=SHORT_SAMPLES)
    steps, util = job.steps, job.utilization
    rate = own_rate(truth, job)
    assert steps.model_flops_per_step == truth["model_flops_per_step"]
    assert close(util.model_flops_utilization_ratio,
                 truth["model_flops_per_step"] * rate / PEAK, 0.03)  # fmt: skip
    assert close(steps.flops_per_step, truth["flops_per_step"], 0.02), [
        (p.name, p.flops, p.executions_per_step, p.executions) for p in job.programs if p.executions
    ]
    assert close(util.hardware_flops_utilization_ratio, truth["flops_per_step"] * rate / PEAK,
                 0.03)  # fmt: skip
    # XLA counts more than the model: the optimizer update, softmax, activations
    assert util.hardware_flops_utilization_ratio > util.model_flops_utilization_ratio

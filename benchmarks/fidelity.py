"""Write docs/fidelity.md: every number xmon derives beside the truth a real JAX job computed
without xmon, on the patterns real training uses.

Runs the fidelity suite's own jobs (tests/fidelity/: patterns.py, execution_jobs.py,
memory_jobs.py) on 4 CPU devices against a real daemon, the same way its tests do, and writes
the measured values, not the tests' verdicts.

    python benchmarks/fidelity.py [--quick] [--out PATH]  # --quick: a few cases, elsewhere

On the newest toolchain it writes docs/fidelity.md; on the oldest, with
``--out docs/fidelity-oldest.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import REPO, RESULTS, machine, table, today

sys.path.insert(0, str(REPO / "tests" / "fidelity"))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from support.procs import Daemon, start_daemon  # noqa: E402

# Beside the benchmarks' results page: elsewhere when the test suite checks that this runs.
OUT = RESULTS.with_name("fidelity.md")
Row = list[object]


def error(value: float | None, truth: float | None) -> str:
    if value is None or truth is None:
        return "—"
    if truth == 0:
        return f"{value:+.3g}"
    return f"{(value / truth - 1) * 100:+.2f} %"


def number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def program_rows(quick: bool) -> list[Row]:
    import patterns
    from test_program_flops import xmon_program

    rows: list[Row] = []
    names = list(patterns.BUILDERS)[:2] if quick else list(patterns.BUILDERS)
    for name in names:
        pattern = patterns.BUILDERS[name]()
        program = xmon_program(pattern)
        mark = "≥ " if program.flops_lower_bound else ""
        rows.append([
            name, number(pattern.truth), number(pattern.matmul_flops), number(program.flops_xla),
            mark + number(program.flops), error(program.flops, pattern.truth),
            f"{program.loops} ({program.loops_unknown_trip_count} unknown)",
        ])  # fmt: skip
    return rows


def execution_rows(workdir: Path, daemon: Daemon, quick: bool) -> list[Row]:
    from test_execution import (
        PEAK,
        SAMPLES,
        UNMARKED,
        branches_counted,
        own_rate,
        run_case,
        run_unmarked,
    )

    rows: list[Row] = []
    cases = ["aot"] if quick else ["aot", "same_name", "accumulate", "eval", "eval_10",
                                   "scan_layers", "transformer", "slow_0.3", "slow_2",
                                   "slow_10", "recompile", "branches", "switch_layers"]  # fmt: skip
    for case in cases:
        (workdir / case).mkdir()
        ten = case == "slow_10"  # samples 20 s apart: two of them, over 4 steps
        # a conditional's branches are counted once its samples have shown them run
        until = branches_counted if case in ("branches", "switch_layers") else None
        job, truth = run_case(workdir / case, daemon, case, timeout=200 if ten else 150,
                              samples=2 if ten else SAMPLES, until=until)  # fmt: skip
        rate = own_rate(truth, job, min_steps=4 if ten else 16)
        flops, util = truth["flops_per_step"], job.utilization
        rows += [
            [case, "hardware FLOPs / step", number(flops), number(job.steps.flops_per_step),
             error(job.steps.flops_per_step, flops)],
            [case, "steps / s (same steps)", number(rate), number(job.steps.steps_per_second),
             error(job.steps.steps_per_second, rate)],
            [case, "hardware FLOP/s", number(flops * rate),
             number(util.achieved_flops_per_second),
             error(util.achieved_flops_per_second, flops * rate)],
            [case, "HFU", number(flops * rate / PEAK),
             number(util.hardware_flops_utilization_ratio),
             error(util.hardware_flops_utilization_ratio, flops * rate / PEAK)],
        ]  # fmt: skip
        if "model_flops_per_step" in truth:
            mfu = truth["model_flops_per_step"] * rate / PEAK
            rows.append([case, "MFU (declared 6·N·tokens)", number(mfu),
                         number(util.model_flops_utilization_ratio),
                         error(util.model_flops_utilization_ratio, mfu)])  # fmt: skip
    if quick:
        return rows
    for case in (*UNMARKED, "host_bound"):
        (workdir / case).mkdir()
    for case in UNMARKED:
        job, truth = run_unmarked(workdir / case, daemon, case)
        begins = truth["begins"]
        overall = (len(begins) - 1) / (begins[-1] - begins[0])
        rows += [
            [f"{case} (inferred)", "hardware FLOPs / step", number(truth["flops_per_step"]),
             number(job.steps.flops_per_step),
             error(job.steps.flops_per_step, truth["flops_per_step"])],
            [f"{case} (inferred)", "steps / s (whole run)", number(overall),
             number(job.steps.steps_per_second), error(job.steps.steps_per_second, overall)],
        ]  # fmt: skip
    job, truth = run_case(workdir / "host_bound", daemon, "host_bound")
    own = truth["device_seconds"] / truth["wall_seconds"]
    busy = next(d.busy_ratio for d in job.devices if d.info.id == 0)
    rows.append(["host_bound", "device 0 busy ratio", number(own), number(busy),
                 "—" if busy is None else f"{busy - own:+.3f}"])  # fmt: skip
    return rows


def memory_rows(workdir: Path, daemon: Daemon) -> list[Row]:
    from test_memory import finish, off_by, run_job

    rows: list[Row] = []
    for case, flags in (("data_parallel", ()), ("donated", ("--markers",)), ("donated", ())):
        label = case + (" (marked)" if flags else "")
        where = workdir / label.replace(" ", "_")
        where.mkdir()
        job, result, out = run_job(where, daemon, case, *flags)
        try:
            taken = [r for t, r in result["readings"] if t >= result["truth_since"]]
            worst = max((off_by(r, result["truth"]) for r in taken), default=None)
            truth = result["truth"]
            rows.append([label, f"{min(truth.values()):,}–{max(truth.values()):,} B", len(taken),
                         "—" if worst is None else f"{worst * 100:.2f} %"])  # fmt: skip
        finally:
            finish(job, out)
    return rows


def step_rows(workdir: Path, daemon: Daemon) -> list[Row]:
    from test_memory import finish, run_job

    from xmon.wire.client import DaemonClient

    (workdir / "steps").mkdir()
    job, result, out = run_job(workdir / "steps", daemon, "steps", "--seconds", "3")
    try:
        with DaemonClient(daemon.socket_path) as client:
            jobs = [j for j in client.get_snapshot(fresh=True).jobs if "steps" in j.job_name]
        steps = jobs[0].steps if jobs else None
    finally:
        finish(job, out)
    own = result["step_seconds_total"]
    got = steps.step_seconds_total if steps else None
    return [
        ["step seconds (sum)", number(own), number(got), error(got, own)],
        ["steps (count)", result["steps_total"], steps.steps_total if steps else "—", ""],
    ]


def with_daemon(workdir: Path, run: Callable[[Daemon], Any]) -> Any:
    daemon = start_daemon(Path(tempfile.mkdtemp(dir=workdir)) / "daemon")
    try:
        return run(daemon)
    finally:
        daemon.stop()


CANNOT_KNOW = """\
## Where xmon cannot know

- **A loop whose trip count depends on data** (`while_loop` stopping on a value): its body is
  counted once, the program's `loops_unknown_trip_count` and `flops_lower_bound` are set, and
  every FLOPs figure it feeds (program, FLOPs per step, FLOP/s, HFU) is shown as a lower bound
  (`≥` in `xmon top` and `xmon programs`, `xmon_job_flops_lower_bound` and
  `xmon_job_program_flops_lower_bound` in Prometheus); the low-utilisation alert does not fire
  on it. See the `data_dependent_while` row above.
- **Custom-calls no cost analysis counts** (Pallas and Triton kernels, cuDNN convolutions,
  LAPACK): counted as 0, and the program is marked a lower bound the same way. GEMM custom-calls
  (cuBLAS, on GPU) are counted from their shapes.
- **Model FLOPs**: xmon cannot know a model's parameter count or tokens, so MFU exists only
  where the job declares them (`xmon.declare_model_flops`); HFU is always shown.
- **Steps without markers** are inferred from the program that used the most device time;
  their rate comes from the profiler samples, which run while the profiler slows the job a few
  percent on CPU (the `unmarked` rows). A program run k times a step (gradient accumulation)
  with no markers makes k inferred steps per real step: mark steps (`xmon.step()`) there. A
  sample of a job without markers lasts its configured duration (0.2 s by default) until the
  daemon, seeing too few runs of the busiest program in it, asks for longer ones (3.5 of its
  periods): the first inferred numbers of a job of 2 s steps come a few samples later than a
  marked job's. Marked steps of any length up to 60 s are held whole from the first sample
  (the `slow_` rows: 0.3 s, 2 s and 10 s steps sampled for a configured 1 s).
- **Device busy ratio on CPU**: virtual CPU devices share the host's cores, so each device's
  ratio is its own op time; on GPU and TPU each device is its own hardware.
- **Device memory on CPU**: one reading costs a walk of `jax.live_arrays()`; readings are paced
  to 0.1 % of wall time and taken only at rest, so at many live arrays they are minutes apart.
"""


def toolchain() -> str:
    import jax

    return f"Python {sys.version.split()[0]}, jax {jax.__version__}"


def main(quick: bool = False, out: Path = OUT) -> str:
    sections = [
        "# Fidelity: xmon's numbers beside the truth\n",
        f"{today()} — {machine()} — {toolchain()}\n",
        "The page is written on the newest toolchain xmon supports (`docs/fidelity.md`) and on "
        "the oldest (`docs/fidelity-oldest.md`), from the same jobs.\n",
        "Written by `benchmarks/fidelity.py` from the jobs of `tests/fidelity/` (4 CPU devices, "
        "a real daemon; the execution ledger sampling 1 s every 2 s to keep runs short). "
        "Each truth is computed by the job itself without xmon: analytic matmul counts and the "
        "cost analysis of an unrolled twin (program FLOPs), each program's own cost analysis "
        "times how often the job runs it (FLOPs per step), the job's own clock over the same "
        "steps (rates), the time it waited for its device (busy ratio), the bytes of every "
        "array it holds, each buffer once (memory). The tests hold these to: program FLOPs "
        "1 %, FLOPs per step 2 %, FLOP/s, HFU and MFU 3 % (2 % of FLOPs per step and 1 % of "
        "matching the steps), busy ratio 0.05, memory 2 % in every reading, step sum 0.5 %.\n",
        "## Program FLOPs (per device, one execution)\n",
        table(
            [
                "pattern",
                "truth: unrolled twin",
                "matmul count",
                "XLA cost analysis",
                "xmon",
                "xmon vs truth",
                "loops",
            ],
            program_rows(quick),
        ),  # fmt: skip
    ]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rows = with_daemon(workdir, lambda d: execution_rows(workdir, d, quick))
        sections += ["\n## What ran: per step, per second, utilisation\n",
                     table(["job", "quantity", "truth", "xmon", "error"], rows)]  # fmt: skip
        if not quick:
            memory = with_daemon(workdir, lambda d: memory_rows(workdir, d))
            steps = with_daemon(workdir, lambda d: step_rows(workdir, d))
            sections += [
                "\n## Device memory (every reading the agent published while the job ran)\n",
                table(["job", "truth per device", "readings", "worst reading off by"], memory),
                "\n## Step sums\n",
                table(["quantity", "job's clock", "xmon", "error"], steps),
            ]
    text = "\n".join(sections) + "\n\n" + CANNOT_KNOW
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few cases: checks it runs")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()
    print(main(quick=args.quick, out=args.out))

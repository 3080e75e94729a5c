"""Execution samples recorded on a real GPU (an H200, jax 0.11.2, by
benchmarks/record_gpu_sample.py), read here without one. On GPU the kernels carry their program
id and name but no run id, and there is no "XLA Modules" line: executions are the host's
launches (run ids) of each program's name. The recording job stepped `jit_big` (8 bf16 dots of
4096^3) once and `jit_small` three times per marked step, at 20 steps a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmon.analysis.peaks import PeakTable
from xmon.execution.ledger import ledger_rates
from xmon.execution.samples import parse_sample
from xmon.execution.xplane import count_executions
from xmon.wire.proto import xplane_pb2

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "xspace"
META = json.loads((FIXTURES / "h200-jax0.11.2-samples.json").read_text())
BIG, SMALL = 1325, 19843  # their program ids in the recording


def sample(index: int) -> bytes:
    return (FIXTURES / f"h200-jax0.11.2-sample-{index}.xspace").read_bytes()


def readings() -> list:  # type: ignore[type-arg]
    return [
        parse_sample(sample(i), 1000.0 + i, s["duration"], s["step_begins"], steps_marked=True)
        for i, s in enumerate(META["samples"])
    ]


@pytest.mark.parametrize("index", [0, 1])
def test_each_launch_is_one_execution_of_its_program(index: int) -> None:
    reading = readings()[index]
    assert reading.dominant == BIG
    per_step = {p: n / reading.steps_in_core for p, n in reading.executions.items()}
    assert per_step == {BIG: pytest.approx(1.0, rel=0.01), SMALL: pytest.approx(3.0, rel=0.01)}
    rates = {p: n / reading.core_seconds for p, n in reading.executions.items()}
    assert rates[BIG] == pytest.approx(META["rate"], rel=0.01)
    assert rates[SMALL] == pytest.approx(3 * META["rate"], rel=0.01)


def test_busy_lies_between_the_peak_s_floor_and_the_job_s_blocked_time() -> None:
    """The job cannot time its kernels without a profiler; what bounds the device's busy share
    is physics below (a step's FLOPs at the H200's dense bf16 peak) and the job's time blocked
    on results above (kernels plus launch and copy latency)."""
    peak = PeakTable().lookup(META["device_kind"])
    assert peak is not None and peak.flops_per_second is not None
    floor = META["flops_per_big"] / peak.flops_per_second * META["rate"]
    rates = ledger_rates(readings())
    busy = rates.busy_ratio[0]
    assert floor <= busy <= META["busy"], (floor, busy, META["busy"])
    per_execution = rates.device_seconds_per_execution[BIG]
    assert META["flops_per_big"] / peak.flops_per_second <= per_execution < 1 / META["rate"]


def test_a_captured_gpu_trace_counts_the_launches_of_each_program() -> None:
    space = xplane_pb2.XSpace.FromString(sample(0))
    counts = count_executions([space])
    assert counts[BIG] == 10 and counts[SMALL] == 3 * counts[BIG] + 3, counts


def test_ids_the_catalogue_does_not_hold_are_matched_by_name_to_its_newest_program() -> None:
    """The profiler's program id on GPU may not be a module id the agent read from the
    executable: the kernels' program name then stands in, for the newest program of the name
    (a function recompiled for other shapes keeps its name)."""
    from xmon.execution.rates import unclaimed_ids, with_ledger
    from xmon.model import Program

    rates = ledger_rates(readings())
    # As recorded: the agent's catalogue held other ids than the profiler's for both programs.
    catalogue = META["catalogue_ids"]
    assert not {BIG, SMALL} & {i for ids in catalogue.values() for i in ids}, catalogue
    old = Program("f-old", "jit_big", program_ids=(7,), compiled_at=1.0)
    new = Program("f-new", "jit_big", program_ids=tuple(catalogue["jit_big"]), compiled_at=2.0)
    small = Program("f-small", "jit_small", program_ids=(SMALL,), compiled_at=1.0)
    extra = unclaimed_ids([old, new, small], rates)
    assert extra == {"f-new": (BIG,)}  # SMALL is claimed by its own id
    counted = with_ledger(new, rates, META["rate"], extra["f-new"])
    assert counted.executions_per_step == pytest.approx(1.0, rel=0.01)
    assert with_ledger(old, rates, META["rate"]).executions_per_step == 0.0

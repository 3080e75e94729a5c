"""What ``xmon fleet`` prints: each multi-process job's processes, the straggler and any
stalled or missing process marked, as text or JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from xmon.analysis.units import duration as format_seconds
from xmon.fleet.judge import FleetVerdict, ProcessReading

HEADER = ["PROC", "WORKER", "DAEMON", "PID", "STEPS", "STEP/S", "SINCE STEP", "HOST/STEP",
          "COMPUTE", "COLLECTIVE", "GOOD 5M", "STATE"]  # fmt: skip


def trouble(verdict: FleetVerdict) -> bool:
    """Whether the job has a straggler, a hang or a missing process."""
    return bool(verdict.straggler or verdict.hang_first or verdict.missing)


def render_text(verdicts: Sequence[FleetVerdict]) -> str:
    if not verdicts:
        return "no multi-process job reports to this Prometheus"
    return "\n\n".join(_render_job(v) for v in verdicts)


def _render_job(v: FleetVerdict) -> str:
    facts = [f"{len(v.processes)} of {v.process_count} processes reporting"]
    if v.step_seconds:
        facts.append(f"step {format_seconds(v.step_seconds)}")
    if v.skew_ratio is not None:
        facts.append(f"host skew {v.skew_ratio:.0%} of a step")
    if v.goodput_ratio is not None:
        facts.append(f"goodput {v.goodput_ratio:.0%} (its least productive process's, 5 min)")
    lines = [f"job {v.job_key}: " + ", ".join(facts)]
    if v.straggler:
        s = v.straggler
        lines.append(f"  straggler: process {s.process_index}, its devices wait for its host "
                     f"{format_seconds(s.excess_seconds)} a step longer than the next slowest "
                     f"process's ({s.excess_ratio:.0%} of the step)")  # fmt: skip
    if v.hang_first:
        who = ", ".join(str(i) for i in v.hang_first)
        lines.append(f"  hung: stopped first at process {who} (the others wait inside jax)")
    if v.missing:
        more = v.missing_count - len(v.missing)
        tail = f" and {more} more" if more > 0 else ""
        lines.append("  missing: process " + ", ".join(str(i) for i in v.missing) + tail)
    rows = [HEADER] + [_cells(v, p) for p in v.processes]
    rows += [[str(i), *["-"] * (len(HEADER) - 2), "MISSING"] for i in v.missing]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]  # fmt: skip
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_seconds(value)


def _cells(v: FleetVerdict, p: ProcessReading) -> list[str]:
    state = []
    if v.straggler and v.straggler.process_index == p.process_index:
        state.append(f"STRAGGLER +{format_seconds(v.straggler.excess_seconds)}/step")
    if p.stalled_waits_in is not None:
        state.append(f"STALLED in {p.stalled_waits_in}")
    if p.process_index in v.hang_first:
        state.append("<- stopped first")
    return [
        str(p.process_index),
        p.worker or "-",
        p.instance or "-",
        str(p.pid),
        "-" if p.steps_total is None else f"{p.steps_total:.0f}",
        "-" if p.steps_per_second is None else f"{p.steps_per_second:.3g}",
        _seconds(p.seconds_since_last_step),
        _seconds(p.host_seconds),
        _seconds(p.compute_seconds),
        _seconds(p.collective_seconds),
        "-" if p.goodput_ratio is None else f"{p.goodput_ratio:.0%}",
        " ".join(state) or "ok",
    ]


def as_json(verdicts: Sequence[FleetVerdict]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(v) | {"trouble": trouble(v)} for v in verdicts]

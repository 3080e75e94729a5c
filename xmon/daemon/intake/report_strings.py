"""Strings the daemon keeps from a job's last report, cut to the lengths an agent sends.

What a job keeps of its last report (``xmon.daemon.received.ReportParts``) holds the
recompiled functions and the stall; `xmon doctor` and `xmon monitor` print them. An agent
bounds them itself (16 functions; 4 changes and 32 arguments of 200 characters each; a
1,024-character explanation; 64 KiB of stacks), but a report that pads them made 24 jobs hold
15 MiB each and views print 60 MiB. Each string past its length is cut in the received
message, before the intake converts it (``xmon.daemon.intake.convert``), and counted
(``bound="report_strings"``).
"""

from __future__ import annotations

from google.protobuf.internal.containers import RepeatedScalarFieldContainer

from xmon.analysis.compiles import MAX_ARGUMENTS, MAX_CHANGES, MAX_TEXT
from xmon.daemon.bounds import StateBudget
from xmon.wire.proto import xmon_pb2

FUNCTION_NAME_CHARS = 128  # a label's length (xmon.exporters.metrics_table.LABEL_VALUE_MAX)
ITEM_CHARS = MAX_TEXT  # each change and argument of a recompiled function
EXPLANATION_CHARS = 1024  # jax's explanation of a recompile, as the agent cuts it
STALL_CHARS = 64 * 1024  # the stall's stacks and where its step thread waits


def cut_report_strings(report: xmon_pb2.AgentReport, budget: StateBudget) -> None:
    """Cut ``report``'s kept strings (in place) to their lengths, counting each cut."""
    cut = 0
    for row in report.compile_functions:
        cut += _cut_field(row, "name", FUNCTION_NAME_CHARS)
        cut += _cut_field(row, "jax_explanation", EXPLANATION_CHARS)
        cut += _cut_list(row.changes, MAX_CHANGES, ITEM_CHARS)
        cut += _cut_list(row.arguments, MAX_ARGUMENTS, ITEM_CHARS)
    if report.HasField("stall"):
        for name in ("stacks", "step_thread_waits_in", "step_thread_in_program"):
            cut += _cut_field(report.stall, name, STALL_CHARS)
    budget.refuse("report_strings", cut)


def _cut_field(message: object, name: str, limit: int) -> int:
    value = getattr(message, name)
    if len(value) <= limit:
        return 0
    setattr(message, name, value[:limit])
    return 1


def _cut_list(values: RepeatedScalarFieldContainer[str], count: int, limit: int) -> int:
    """Keep the first ``count`` strings of ``values``, each cut to ``limit``: the number cut
    or left out."""
    cut = max(0, len(values) - count)
    del values[count:]
    for i, value in enumerate(values):
        if len(value) > limit:
            values[i] = value[:limit]
            cut += 1
    return cut

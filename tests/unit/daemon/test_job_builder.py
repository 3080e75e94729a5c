"""What the daemon's job builder reads from an agent's report for the findings: the report is
read where the daemon took it (its intake), and the detectors get model objects
(AgentEvidence)."""

from __future__ import annotations

from xmon.daemon.bounds import StateBudget
from xmon.daemon.intake.convert import report_of
from xmon.daemon.job_builder import agent_evidence
from xmon.findings.recompiles import FunctionCompiles
from xmon.findings.tracker import NO_EVIDENCE, AgentEvidence
from xmon.wire.proto import xmon_pb2


def test_a_reports_recompiled_functions_and_stall_become_evidence() -> None:
    report = xmon_pb2.AgentReport(
        compile_functions=[
            xmon_pb2.FunctionCompiles(
                name="jit_step", compiles_total=9, steady_recompiles_total=8, eager=True,
                first_compiled_at=10.0, last_compiled_at=20.0, changes=["shape: arg 0"],
                arguments=["tokens", "params"], jax_explanation="a new shape",
            )
        ],
        stall=xmon_pb2.StallReport(
            stacks="Thread MainThread (1):\n", step_thread_in_program="jit_step"
        ),
    )  # fmt: skip
    assert agent_evidence(report_of(report, StateBudget()).parts) == AgentEvidence(
        functions=(
            FunctionCompiles(
                "jit_step", 9, 8, eager=True, first_compiled_at=10.0, last_compiled_at=20.0,
                changes=("shape: arg 0",), arguments=("tokens", "params"),
                jax_explanation="a new shape",
            ),
        ),
        stall_stacks="Thread MainThread (1):\n",
        step_thread_in_program="jit_step",
    )  # fmt: skip


def test_no_report_or_no_stall_is_no_evidence() -> None:
    assert agent_evidence(None) is NO_EVIDENCE
    assert agent_evidence(report_of(xmon_pb2.AgentReport(), StateBudget()).parts) == NO_EVIDENCE

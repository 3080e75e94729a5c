"""The agent's one seam to private jax and CPython details (xmon.agent.internals): each private
access, removed or renamed, turns its capability unavailable with a reason, at attach (the
probe) and at run time, and the state reaches /metrics and `xmon doctor` from a real job."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmon.agent import internals


def test_a_report_goes_without_stacks_where_threads_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xmon

    agent = xmon.attach(job_name="nostacks", socket_path=tmp_path / "none.sock", ledger=False)
    try:

        def unreadable() -> None:
            raise internals.Unavailable("CPython's sys._current_frames not found")

        monkeypatch.setattr(agent.stall, "report", unreadable)
        message, _ = agent.build_report()
        assert not message.report.HasField("stall")
        states = {c.name: c.unavailable_reason for c in message.report.capabilities}
        assert "sys._current_frames" in states["stall_stacks"]
    finally:
        xmon.detach()

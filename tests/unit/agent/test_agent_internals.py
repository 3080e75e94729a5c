"""The agent's one seam to private jax and CPython details (xmon.agent.internals): each private
access, removed or renamed, turns its capability unavailable with a reason, at attach (the
probe) and at run time, and the state reaches /metrics and `xmon doctor` from a real job."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from xmon.agent import internals
from xmon.agent.capabilities import Capabilities
from xmon.agent.sampler import FAILURES_UNTIL_UNAVAILABLE, ExecutionSampler, LedgerConfig


def test_every_capability_is_available_on_this_jax() -> None:
    assert internals.probe() == dict.fromkeys(internals.CAPABILITIES, "")


class _NoSessionName:
    """jax's profiler state with its running-session attribute renamed."""

    lock = threading.Lock()


def _from_hlo_without_avals(*args: Any, **kwargs: Any) -> None:
    """``from_hlo`` with its arguments renamed."""


def _module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _break_ledger(m: pytest.MonkeyPatch) -> None:
    m.setattr(_module("jax._src.profiler"), "_profile_state", _NoSessionName())


def _break_catalogue(m: pytest.MonkeyPatch) -> None:
    m.delattr(_module("jax._src.compiler"), "compile_or_get_cached")


def _break_loop_cost(m: pytest.MonkeyPatch) -> None:
    from jax._src.lib import xla_client

    m.delattr(xla_client._xla, "hlo_module_cost_analysis")


def _break_module_proto_reader(m: pytest.MonkeyPatch) -> None:
    m.delattr(_module("jaxlib._hlo"), "HloModule")


def _break_recompile_cause(m: pytest.MonkeyPatch) -> None:
    pxla = _module("jax._src.interpreters.pxla")
    m.setattr(pxla.UnloadedMeshExecutable, "from_hlo", staticmethod(_from_hlo_without_avals))


def _break_frames(m: pytest.MonkeyPatch) -> None:
    m.delattr(sys, "_current_frames")


def _break_backends(m: pytest.MonkeyPatch) -> None:
    m.delattr(_module("jax._src.xla_bridge"), "backends_are_initialized")


def _break_distributed(m: pytest.MonkeyPatch) -> None:
    m.delattr(_module("jax._src.distributed"), "global_state")


BREAKS = [
    ("ledger", _break_ledger, "no session attribute"),
    ("catalogue", _break_catalogue, "compile_or_get_cached not found"),
    ("loop_cost", _break_loop_cost, "hlo_module_cost_analysis not found"),
    ("loop_cost", _break_module_proto_reader, "no HLO module proto reader"),
    ("recompile_cause", _break_recompile_cause, "takes no global_in_avals, in_shardings"),
    ("stall_stacks", _break_frames, "no sys._current_frames"),
    ("memory_readings", _break_backends, "backends_are_initialized not found"),
    ("job_identity", _break_distributed, "global_state not found"),
]


@pytest.mark.parametrize(
    ("capability", "breaks", "reason"),
    BREAKS,
    ids=[b[1].__name__.removeprefix("_break_") for b in BREAKS],
)
def test_a_private_access_removed_or_renamed_is_named_by_its_capability(
    monkeypatch: pytest.MonkeyPatch, capability: str, breaks: Any, reason: str
) -> None:
    breaks(monkeypatch)
    found = internals.probe()
    assert reason in found[capability] and "supported: jax" in found[capability], found
    unaffected = {name for name, why in found.items() if not why}
    assert capability not in unaffected and len(unaffected) >= len(found) - 2, found


def test_every_capability_has_a_probe_that_can_fail() -> None:
    assert {b[0] for b in BREAKS} == set(internals.CAPABILITIES)


def test_the_session_attribute_of_either_jax_release_is_read() -> None:
    for name in ("session", "profile_session"):  # jax 0.12; jax 0.10 and 0.11
        owner = type("State", (), {"lock": threading.Lock(), name: object()})()
        assert internals.ProfilerState(owner).session_running()
        setattr(owner, name, None)
        assert not internals.ProfilerState(owner).session_running()


def _sampler(capabilities: Capabilities) -> ExecutionSampler:
    config = LedgerConfig(duration=0.01, interval=1.0, first_delay=0.0)
    return ExecutionSampler(config, lambda sample: True, lambda: True, capabilities=capabilities)


def test_a_ledger_access_gone_at_run_time_turns_the_capability_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capabilities = Capabilities(dict.fromkeys(internals.CAPABILITIES, ""))
    ledger = _sampler(capabilities)
    _break_ledger(monkeypatch)
    assert not ledger.sample_once()
    assert dict(capabilities.states())["ledger"].startswith("jax._src.profiler._profile_state")
    assert not ledger.sample_once() and ledger.skipped_total == 2  # no more sessions tried


def test_sessions_that_keep_failing_turn_the_ledger_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capabilities = Capabilities(dict.fromkeys(internals.CAPABILITIES, ""))
    ledger = _sampler(capabilities)

    def refuse(options: Any) -> Any:
        raise RuntimeError("profiler refused")

    monkeypatch.setattr(internals, "start_raw_session", refuse)
    for _ in range(FAILURES_UNTIL_UNAVAILABLE - 1):
        assert not ledger.sample_once()
    assert capabilities.available("ledger")  # one failure can be transient
    assert not ledger.sample_once()
    reason = dict(capabilities.states())["ledger"]
    assert f"{FAILURES_UNTIL_UNAVAILABLE} profiler sessions in a row failed" in reason
    assert "profiler refused" in reason

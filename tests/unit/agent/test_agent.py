"""The in-job agent, in this process, with real JAX on CPU (several virtual devices)."""

from __future__ import annotations

from pathlib import Path

import pytest

import xmon
from xmon.agent.core import default_job_name
from xmon.agent.programs import normalise_cost_analysis
from xmon.agent.steps import StepTimer


def test_step_api_without_agent_is_a_no_op() -> None:
    assert not xmon.is_attached()
    with xmon.step():
        pass

    @xmon.step
    def f(x: int) -> int:
        return x + 1

    assert f(1) == 2


def test_step_timer_uses_start_to_start_intervals() -> None:
    now = [0.0]
    timer = StepTimer(clock=lambda: now[0])
    for start, end in [(0.0, 0.5), (1.0, 1.1), (3.0, 3.2)]:
        now[0] = start
        timer.begin()
        now[0] = end
        timer.end()
    assert timer.take_recent() == [1.0, 2.0]  # each step once its successor begins
    assert timer.steps_total == 3
    assert timer.step_seconds_total == pytest.approx(3.2)  # first start to last end


def test_nested_steps_count_once() -> None:
    timer = StepTimer()
    with timer.step():
        with timer.step():
            assert timer.in_step()
    assert timer.steps_total == 1 and not timer.in_step()


@pytest.mark.parametrize(
    "raw,expected",
    [
        (None, {}),
        ([], {}),
        ([{"flops": 2.0}], {"flops": 2.0}),  # jax <= 0.4.37
        ({"flops": 3, "bytes accessed": 4.0, "x": "text"}, {"flops": 3.0, "bytes accessed": 4.0}),
    ],
)
def test_cost_analysis_normalisation(raw: object, expected: dict[str, float]) -> None:
    assert normalise_cost_analysis(raw) == expected


@pytest.mark.parametrize(
    "argv,env,expected",
    [
        (["train.py", "--lr", "1"], {}, "train"),
        (["/x/y/finetune.py"], {}, "finetune"),
        (["-m"], {}, "python"),
        (["train.py"], {"XMON_JOB_NAME": "named"}, "named"),
    ],
)
def test_default_job_name(argv: list[str], env: dict[str, str], expected: str) -> None:
    assert default_job_name(argv, env) == expected


def test_attach_rejects_a_bad_period(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="period must be between"):
        xmon.attach(period=0, socket_path=tmp_path / "s.sock")
    assert not xmon.is_attached()

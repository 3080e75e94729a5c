"""Triggered captures: the rules on synthetic snapshots, then a real job with an injected slow
step next to a steady one, against a real daemon."""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import replace

import pytest

from xmon.config.profiling import ProfilingConfig
from xmon.daemon.triggers import TriggerEngine, TriggerRules, _History
from xmon.model import (
    AgentHealth,
    CompileStats,
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Snapshot,
    StepStats,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job(steps: tuple[float, ...], total: int | None = None, pid: int = 7, compiles: int = 0,
        samples: int = 0, **memory: int) -> Job:  # fmt: skip
    device = JobDevice(DeviceInfo(0, "gpu", "H100"), DeviceMemory(**memory))
    stats = StepStats(steps_total=len(steps) if total is None else total, window=steps[-64:])
    return Job(job_name="j", pid=pid, hostname="h", platform="gpu", jax_version="",
               jaxlib_version="", devices=(device,), steps=stats,
               compile=CompileStats(compiles_total=compiles),
               agent=AgentHealth(ledger_samples_total=samples))  # fmt: skip


def snap(*jobs: Job) -> Snapshot:
    return Snapshot(seq=1, wall_time=0.0, monotonic=0.0, hostname="h",
                    daemon=DaemonStats("0", 0.0), jobs=jobs)  # fmt: skip


RULES = TriggerRules(step_time_factor=3.0, min_steps=10, memory_ratio=0.9, min_interval_seconds=60)


def steady(n: int) -> tuple[float, ...]:
    return tuple(0.1 + 0.001 * (i % 5) for i in range(n))


def test_the_look_back_keeps_only_the_steps_it_can_reach() -> None:
    """Forgetting judged steps changes no verdict of the persistence rule, and a fast job
    keeps about persist_seconds of steps, not thousands."""
    rng = random.Random(7)
    engine = TriggerEngine(RULES, clock=Clock())
    kept, everything = _History(), _History()
    everything.judged = deque(maxlen=None)
    for _ in range(2000):
        fresh = [rng.choice((0.002, 0.01, 0.05, 0.3)) for _ in range(rng.randint(1, 64))]
        for history in (kept, everything):
            history.judged.extend((s, s - 0.01 if s > 0.03 else 0.0) for s in fresh)
        engine._keep_reachable(kept)
        assert engine._persists(kept) == engine._persists(everything)
    assert len(kept.judged) < 600 < len(everything.judged)
    fast = _History()
    for _ in range(200):  # 64 steps of 10 ms a snapshot
        fast.judged.extend((0.01, 0.0) for _ in range(64))
        engine._keep_reachable(fast)
    assert len(fast.judged) <= 100 + 1


def warmed(engine: TriggerEngine, n: int = 20) -> tuple[float, ...]:
    """Steps the engine saw at first sight, then ``RULES.min_steps`` it saw arrive."""
    history = steady(n)
    assert engine.evaluate(snap(job(history))) == []  # first sight: history only
    history += steady(RULES.min_steps)
    assert engine.evaluate(snap(job(history))) == []
    return history


def test_slow_step_fires_once_with_its_reason() -> None:
    engine = TriggerEngine(RULES, Clock())
    history = warmed(engine)
    history += (0.11, 1.5)
    [fire] = engine.evaluate(snap(job(history)))
    assert (fire.trigger, fire.pid, fire.memory) == ("step_time", 7, False)
    assert re.match(r"step took 1\.5 s, 14\.\d x the median 0\.102 s of recent steps "
                    r"\(rule: > 3 x\)", fire.reason), fire.reason  # fmt: skip
    history += (0.9,)
    assert engine.evaluate(snap(job(history))) == [], "rate-limited"


def test_steady_steps_and_start_up_do_not_fire() -> None:
    engine = TriggerEngine(RULES, Clock())
    history = (5.0,)  # the first step compiles
    engine.evaluate(snap(job(history)))
    for _ in range(40):
        history += (0.1,)
        assert engine.evaluate(snap(job(history))) == []
    early = TriggerEngine(RULES, Clock())
    early.evaluate(snap(job(steady(3))))
    assert early.evaluate(snap(job(steady(3) + (9.0,)))) == [], "fewer than min_steps seen"


def test_rate_limit_expires_and_busy_jobs_are_skipped() -> None:
    clock = Clock()
    engine = TriggerEngine(RULES, clock)
    history = warmed(engine)
    history += (2.0,)
    assert engine.evaluate(snap(job(history)), busy={7}) == [], "already capturing"
    history += (2.0,)
    assert len(engine.evaluate(snap(job(history)))) == 1
    clock.now += 61
    history += (2.0,)
    assert len(engine.evaluate(snap(job(history)))) == 1


def test_many_steps_between_snapshots_are_all_checked() -> None:
    engine = TriggerEngine(RULES, Clock())
    engine.evaluate(snap(job(steady(20))))
    burst = steady(20) + (0.1,) * 10 + (1.8,) + (0.1,) * 10
    [fire] = engine.evaluate(snap(job(burst)))
    assert "1.8 s" in fire.reason


def test_a_moderate_regression_fires_only_when_it_persists() -> None:
    engine = TriggerEngine(RULES, Clock())
    history = warmed(engine)
    history += (0.5,)
    assert engine.evaluate(snap(job(history))) == [], "one 5x step: a hiccup"
    history += (0.1, 0.5)
    assert engine.evaluate(snap(job(history))) == []
    history += (0.5,)
    [fire] = engine.evaluate(snap(job(history)))
    assert fire.reason.endswith("(rule: > 3 x, 3 slow steps of the last few)"), fire.reason


def fast_rules() -> TriggerRules:
    return replace(RULES, min_steps=20)


@pytest.mark.parametrize(
    ("median", "burst", "fires"),
    [
        (0.001, (0.014,), False),  # a 1 ms step stretched 14x by the scheduler: jitter
        (0.001, (0.014,) * 3, False),  # three of them: still 40 ms in all
        (0.02, (0.17, 0.02, 0.17, 0.02, 0.17), False),  # 8.5x, 3 of the last few: 0.45 s
        (0.02, (0.07,) * 60, True),  # every step 3.5x for over a second: a regression
        (0.02, (2.0,), True),  # one step 2 s long: extreme
    ],
)
def test_host_jitter_is_not_a_regression(median: float, burst: tuple[float, ...],
                                         fires: bool) -> None:  # fmt: skip
    engine = TriggerEngine(fast_rules(), Clock())
    history = (median,) * 200
    engine.evaluate(snap(job(history)))
    for _ in range(3):
        history += (median,) * 40
        assert engine.evaluate(snap(job(history))) == []
    fired = []
    for seconds in burst:  # one step per snapshot, as a slow job reports them
        history += (seconds,)
        fired += engine.evaluate(snap(job(history)))
    assert bool(fired) == fires, fired


def test_inherited_steps_are_never_judged() -> None:
    """A daemon restart (or a fresh attach) sees a job mid-run: nothing fires until it has
    watched ``min_steps`` steps arrive itself."""
    engine = TriggerEngine(RULES, Clock())
    history = steady(60) + (9.0,)
    assert engine.evaluate(snap(job(history))) == []
    for _ in range(RULES.min_steps - 2):
        history += (0.1,)
        assert engine.evaluate(snap(job(history))) == []
    history += (9.0,)
    assert engine.evaluate(snap(job(history))) == [], "9 of the 10 steps seen"


@pytest.mark.parametrize("mark", ["compiles", "samples"])
def test_steps_after_a_compile_or_a_ledger_sample_are_not_judged(mark: str) -> None:
    engine = TriggerEngine(RULES, Clock())
    history = warmed(engine)
    history += (5.0,)
    assert engine.evaluate(snap(job(history, **{mark: 1}))) == [], "the compiling step"
    history += (5.0,)
    assert engine.evaluate(snap(job(history, **{mark: 1}))) == [], "the step after it"
    history += (0.1, 5.0)
    assert len(engine.evaluate(snap(job(history, **{mark: 1})))) == 1


def test_memory_rule_needs_a_limit() -> None:
    engine = TriggerEngine(RULES, Clock())
    [fire] = engine.evaluate(snap(job((), bytes_in_use=95, bytes_limit=100)))
    assert fire.memory and fire.reason == "device 0: 95 of 100 bytes in use (95.0 % >= 90 %)"
    other = TriggerEngine(RULES, Clock())
    assert other.evaluate(snap(job((), bytes_in_use=50, bytes_limit=100))) == []
    assert other.evaluate(snap(job((), live_array_bytes=10**12))) == [], "CPU: no limit"


def test_rules_from_config_and_switched_off() -> None:
    rules = TriggerRules.from_config(
        ProfilingConfig(trigger_step_time_factor=0, trigger_memory_ratio=0.5)
    )
    assert rules.step_time_factor is None and rules.memory_ratio == 0.5
    engine = TriggerEngine(rules, Clock())
    engine.evaluate(snap(job(steady(30))))
    assert engine.evaluate(snap(job(steady(30) + (50.0,)))) == []


def test_gone_jobs_are_forgotten() -> None:
    engine = TriggerEngine(RULES, Clock())
    engine.evaluate(snap(job(steady(20))))
    engine.evaluate(snap())
    # the same pid again is a new job: its first snapshot seeds history, nothing fires
    assert engine.evaluate(snap(job(steady(20) + (5.0,)))) == []


def test_a_restarted_step_counter_reseeds() -> None:
    engine = TriggerEngine(RULES, Clock())
    engine.evaluate(snap(job(steady(30))))
    assert engine.evaluate(snap(replace(job(steady(5)), pid=7))) == []

"""Collector registry, generated flags, and the runner's isolation of failing collectors."""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from xmon.collectors import (
    CollectContext,
    CollectorOutput,
    CollectorRegistry,
    CollectorRunner,
    merge_outputs,
)
from xmon.config import ConfigError
from xmon.model import CollectorHealth, Device, HardwareCounters, HostSample, ProcessSample

CONTEXT = CollectContext(pids=(), monotonic=0.0)
HOST = HostSample("h", 1, 0.5, 100, 50, 50)


class Fixed:
    """Returns the same output every time and counts calls."""

    def __init__(self, name: str, output: CollectorOutput | None = None) -> None:
        self.name = name
        self.output = output or CollectorOutput(host=HOST)
        self.calls = 0
        self.closed = False

    def collect(self, context: CollectContext) -> CollectorOutput:
        self.calls += 1
        return self.output

    def close(self) -> None:
        self.closed = True


class Raising(Fixed):
    """Raises while ``failing`` is set."""

    def __init__(self, name: str = "broken") -> None:
        super().__init__(name)
        self.failing = True

    def collect(self, context: CollectContext) -> CollectorOutput:
        self.calls += 1
        if self.failing:
            raise RuntimeError("device on fire")
        return self.output


class Hanging(Fixed):
    """Blocks its first call until ``release`` is set."""

    def __init__(self, name: str = "hung") -> None:
        super().__init__(name, CollectorOutput())
        self.release = threading.Event()

    def collect(self, context: CollectContext) -> CollectorOutput:
        self.calls += 1
        if self.calls == 1:
            self.release.wait(10)
        return self.output


def health_of(health: tuple[Any, ...], name: str) -> Any:
    return next(h for h in health if h.name == name)


# --- registry and flags -----------------------------------------------------------------------


def make_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register("alpha", lambda: Fixed("alpha"), help="the first one")

    @registry.register("beta", default_enabled=False, help="off unless asked")
    def beta() -> Fixed:
        return Fixed("beta")

    assert callable(beta)  # the decorator hands the factory back
    return registry


def test_registered_lists_names_defaults_and_help() -> None:
    entries = make_registry().registered()
    assert [(e.name, e.default_enabled, e.help) for e in entries] == [
        ("alpha", True, "the first one"),
        ("beta", False, "off unless asked"),
    ]


@pytest.mark.parametrize("name", ["Alpha", "1x", "has-dash", "", "a b"])
def test_register_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="collector name must match"):
        CollectorRegistry().register(name, lambda: Fixed(name))


def test_register_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="'alpha' is already registered"):
        make_registry().register("alpha", lambda: Fixed("alpha"))


def test_generated_flags_and_help() -> None:
    registry = make_registry()
    parser = argparse.ArgumentParser()
    registry.add_collector_flags(parser)
    help_text = parser.format_help()
    for flag in ("--collector.alpha", "--no-collector.alpha", "--collector.beta"):
        assert flag in help_text
    assert "the first one (default: enabled)" in help_text
    assert "off unless asked (default: disabled)" in help_text
    assert registry.enabled_collectors(parser.parse_args([])) == ["alpha"]
    args = parser.parse_args(["--no-collector.alpha", "--collector.beta"])
    assert registry.enabled_collectors(args) == ["beta"]


# (flags, config, enabled): flag > config > registered default
ENABLED = [
    ({}, {}, ["alpha"]),
    ({}, {"alpha": False, "beta": True}, ["beta"]),
    ({"alpha": True}, {"alpha": False}, ["alpha"]),
    ({"beta": False}, {"beta": True}, ["alpha"]),
    ({"alpha": None}, {"alpha": False}, []),
]


@pytest.mark.parametrize(("flags", "config", "expected"), ENABLED)
def test_enabled_collectors_precedence(
    flags: dict[str, bool | None], config: dict[str, bool], expected: list[str]
) -> None:
    assert make_registry().enabled_collectors(flags, config) == expected


def test_unknown_collector_in_config_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        make_registry().enabled_collectors(None, {"alhpa": True})
    assert str(caught.value) == (
        'config [collectors]: unknown collector "alhpa"; known collectors: alpha, beta'
    )


# --- runner -----------------------------------------------------------------------------------


def _run_sync(runner: CollectorRunner) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
    return runner.run(CONTEXT)


def _run_on_a_loop(
    runner: CollectorRunner,
) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
    # a new loop each tick: a call finishing after its loop closed must be harmless
    return asyncio.run(runner.run_async(CONTEXT))


@pytest.mark.parametrize("tick", [_run_sync, _run_on_a_loop], ids=["run", "run_async"])
def test_runner_isolates_raising_and_hanging_collectors(
    tick: Callable[[CollectorRunner], tuple[CollectorOutput, tuple[CollectorHealth, ...]]],
) -> None:
    good, broken, hung = Fixed("good"), Raising(), Hanging()
    runner = CollectorRunner([good, broken, hung], timeout=0.2)
    try:
        began = time.monotonic()
        output, health = tick(runner)
        assert time.monotonic() - began < 1.0
        assert output.host == HOST
        assert [h.name for h in health] == ["good", "broken", "hung"]
        assert health_of(health, "good").up and health_of(health, "good").errors_total == 0
        assert health_of(health, "broken").last_error == "RuntimeError: device on fire"
        hung_health = health_of(health, "hung")
        assert not hung_health.up and hung_health.last_error == "timed out after 0.2s"
        assert hung_health.duration_seconds is not None and hung_health.duration_seconds >= 0.2

        began = time.monotonic()
        output, health = tick(runner)  # hung is still inside its first call
        assert time.monotonic() - began < 0.15, "a busy collector must not be waited for"
        assert hung.calls == 1, "a collector still running must not be started again"
        assert output.host == HOST
        assert health_of(health, "hung").errors_total == 2
        assert "still running" in (health_of(health, "hung").last_error or "")
        assert health_of(health, "broken").errors_total == 2

        hung.release.set()
        deadline = time.monotonic() + 5
        while not health_of(tick(runner)[1], "hung").up:
            assert time.monotonic() < deadline
        assert hung.calls >= 2
    finally:
        hung.release.set()
        runner.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "run_async"])
def test_a_tick_nobody_reads_wakes_no_worker_until_the_jobs_change(asynchronous: bool) -> None:
    host, broken = Fixed("host"), Raising()
    runner = CollectorRunner([host, broken], timeout=1)

    def tick(
        pids: tuple[int, ...], live: bool
    ) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
        context = CollectContext(pids=pids, monotonic=time.monotonic(), live=live)
        return asyncio.run(runner.run_async(context)) if asynchronous else runner.run(context)

    try:
        first, health = tick((1,), live=False)  # nothing collected yet: collect anyway
        assert host.calls == 1 and first.host == HOST
        duration = health_of(health, "host").duration_seconds
        for _ in range(3):
            output, health = tick((1,), live=False)
            assert output.host == HOST and health_of(health, "host").up
            assert health_of(health, "host").duration_seconds == duration  # the call it re-serves
        assert host.calls == 1, "an unread tick must not call the collector again"
        assert broken.calls == 4, "a failed call is never re-served: it is retried every tick"
        assert health_of(health, "broken").errors_total == 4
        tick((1,), live=True)
        assert host.calls == 2
        tick((1, 2), live=False)  # a job came: its process must be sampled
        assert host.calls == 3
        tick((1, 2), live=False)
        assert host.calls == 3
    finally:
        runner.close()


def test_errors_total_counts_every_failed_tick_and_recovery_keeps_it() -> None:
    broken = Raising()
    runner = CollectorRunner([broken], timeout=1)
    for _ in range(3):
        runner.run(CONTEXT)
    broken.failing = False
    output, (health,) = runner.run(CONTEXT)
    assert health.up and health.errors_total == 3
    assert health.last_error == "RuntimeError: device on fire"  # the last one seen
    assert output.host == HOST
    runner.close()


def test_logs_once_per_state_change(caplog: pytest.LogCaptureFixture) -> None:
    broken = Raising()
    runner = CollectorRunner([broken], timeout=1)
    with caplog.at_level(logging.INFO, logger="xmon.collectors"):
        for _ in range(3):
            runner.run(CONTEXT)
        broken.failing = False
        for _ in range(3):
            runner.run(CONTEXT)
    runner.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "xmon.collectors"]
    assert messages == [
        "collector broken down: RuntimeError: device on fire",
        "collector broken up again",
    ]
    down = next(r for r in caplog.records if "down" in r.getMessage())
    assert down.levelno == logging.WARNING and down.exc_info is not None


def test_not_present_is_up_and_contributes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    device = Device(0, "gpu", "H100", "absent", HardwareCounters())
    absent = Fixed("absent", CollectorOutput(devices=(device,), present=False))
    runner = CollectorRunner([absent], timeout=1)
    with caplog.at_level(logging.INFO, logger="xmon.collectors"):
        for _ in range(2):
            output, (health,) = runner.run(CONTEXT)
    runner.close()
    assert health.up and not health.present and health.errors_total == 0
    assert output.devices == ()
    assert [r.getMessage() for r in caplog.records] == [
        "collector absent: hardware not present on this host"
    ]


def test_bad_return_value_is_an_error() -> None:
    odd = Fixed("odd")
    odd.collect = lambda context: {"host": None}  # type: ignore[method-assign,assignment,return-value]
    runner = CollectorRunner([odd], timeout=1)
    _, (health,) = runner.run(CONTEXT)
    runner.close()
    assert not health.up
    assert health.last_error == "TypeError: collect() returned dict, not CollectorOutput"


def test_factory_runs_on_first_tick_and_is_retried() -> None:
    attempts: list[int] = []

    def flaky() -> Fixed:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("library not loaded")
        return Fixed("flaky")

    registry = CollectorRegistry()
    registry.register("flaky", flaky, help="fails to start once")
    runner = CollectorRunner(["flaky"], timeout=1, registry=registry)
    assert attempts == []  # nothing is built before the first tick
    first = runner.run(CONTEXT)[1][0]
    second = runner.run(CONTEXT)[1][0]
    runner.close()
    assert (first.up, first.last_error) == (False, "OSError: library not loaded")
    assert second.up and len(attempts) == 2


def test_injected_clock_gives_the_duration() -> None:
    now = [100.0]

    class Slow(Fixed):
        def collect(self, context: CollectContext) -> CollectorOutput:
            now[0] += 0.25  # the collector "takes" 0.25 s of the injected clock
            return self.output

    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    runner = CollectorRunner([Slow("slow")], timeout=1, clock=clock)
    _, (health,) = runner.run(CONTEXT)
    runner.close()
    assert health.duration_seconds == pytest.approx(0.25)


def test_close_calls_collector_close() -> None:
    fixed = Fixed("fixed")
    runner = CollectorRunner([fixed], timeout=1)
    runner.run(CONTEXT)
    runner.close()
    assert fixed.closed


def test_runner_rejects_unknown_and_duplicate_names() -> None:
    with pytest.raises(ConfigError, match='unknown collector "nope"; known collectors: alpha'):
        CollectorRunner(["nope"], registry=make_registry())
    with pytest.raises(ValueError, match="given twice"):
        CollectorRunner([Fixed("a"), Fixed("a")])
    with pytest.raises(ValueError, match="timeout must be positive"):
        CollectorRunner([], timeout=0)


def test_merge_outputs() -> None:
    other_host = HostSample("other", 2, None, 1, 1, 0)
    gpu = Device(0, "gpu", "H100", "nvml", HardwareCounters())
    tpu = Device(0, "tpu", "TPU v6 lite", "libtpu", HardwareCounters())
    first = ProcessSample(0.5, 1.0, 10)
    merged = merge_outputs(
        [
            CollectorOutput(host=HOST, devices=(gpu,), processes={1: first}),
            CollectorOutput(host=other_host, devices=(tpu,), processes={1: ProcessSample(0, 0, 0)}),
            CollectorOutput(devices=(gpu,), present=False),
        ]
    )
    assert merged == CollectorOutput(host=HOST, devices=(gpu, tpu), processes={1: first})

"""``xmon monitor`` as a command: flags and config file, period gating, and the real thing
against a real daemon and the demo JAX job on 4 CPU devices."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from xmon.cli import monitor
from xmon.cli.monitor import MonitorConfigError, PeriodGate, parse_duration, settings_from_args

from support.views import snapshot


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    monitor.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5, 5.0),
        (0.5, 0.5),
        ("5", 5.0),
        ("5s", 5.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        (" 1h ", 3600.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value, "period") == seconds


@pytest.mark.parametrize("value", ["", "5x", "-1", "0", "fast", True, [1]])
def test_bad_durations_name_the_setting(value: object) -> None:
    with pytest.raises(MonitorConfigError, match="^period: "):
        parse_duration(value, "period")


def test_config_file_json_and_toml_with_flags_winning(tmp_path: Path) -> None:
    json_file = tmp_path / "m.json"
    json_file.write_text('{"period": "5s", "groups": ["system", "jobs"], "jobs": ["train*", 42]}')
    settings = settings_from_args(parse("-c", str(json_file)))
    assert settings.period == 5.0
    assert settings.options.groups == {"system", "jobs"}
    assert settings.options.jobs == ("train*", "42")
    toml_file = tmp_path / "m.toml"
    toml_file.write_text('period = 2\ngroups = ["hardware"]\n')
    flagged = settings_from_args(
        parse("-c", str(toml_file), "--period", "3", "--groups", "jobs", "--job", "x")
    )
    assert (flagged.period, flagged.options.groups, flagged.options.jobs) == (3.0, {"jobs"}, ("x",))
    assert settings_from_args(parse()).period is None  # default: every snapshot


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ("{", ".json", "is not valid json"),
        ("period = ", ".toml", "is not valid toml"),
        ('{"perod": 1}', ".json", "unknown key 'perod'"),
        ("[1]", ".json", "expected an object"),
        ('{"groups": ["gpu"]}', ".json", "unknown group 'gpu'"),
        ('{"jobs": "train"}', ".json", "jobs must be a list"),
    ],
)
def test_bad_config_files(tmp_path: Path, content: str, suffix: str, message: str) -> None:
    path = tmp_path / f"monitor{suffix}"
    path.write_text(content)
    with pytest.raises(MonitorConfigError, match=message):
        settings_from_args(parse("-c", str(path)))
    with pytest.raises(MonitorConfigError, match="cannot read config file"):
        settings_from_args(parse("-c", str(tmp_path / "absent.json")))


@pytest.mark.parametrize(
    ("period", "tick", "expected"),
    [
        (None, 1.0, list(range(1, 13))),
        (5.0, 1.0, [1, 6, 11]),
        (1.0, 0.5, [1, 3, 5, 7, 9, 11]),
        (0.2, 1.0, list(range(1, 13))),
        (2.6, 1.0, [1, 4, 7, 10]),
        (2.4, 1.0, [1, 3, 5, 7, 9, 11]),
    ],
)
def test_period_gate_skips_snapshots(
    period: float | None, tick: float, expected: list[int]
) -> None:
    gate = PeriodGate(period)
    emitted = []
    for seq in range(1, 13):
        snap = snapshot(seq, period=tick)
        if gate.due(snap):
            emitted.append(seq)
            gate.last = snap
    assert emitted == expected

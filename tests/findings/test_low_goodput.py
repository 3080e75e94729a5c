"""The low_goodput finding (xmon.findings.goodput): judged over the process's life after five
minutes, naming the biggest badput bucket and its fix."""

from __future__ import annotations

import pytest

from xmon.findings.goodput import FIXES, MIN_WALL_SECONDS, detect_low_goodput
from xmon.findings.host_bound import SHARED_HOST_FIX
from xmon.model import GOODPUT_BUCKETS, Goodput


def account(wall: float, ratio: float | None, **seconds: float) -> Goodput:
    badput = {k: v for k, v in seconds.items() if k != "productive" and v > 0}
    return Goodput(wall, tuple(seconds.items()), ratio, ratio, None,
                   max(badput, key=badput.__getitem__) if badput else None)  # fmt: skip


def test_compile_eating_the_wall_time_is_named_with_the_cache_as_the_fix() -> None:
    goodput = account(600.0, 0.3, productive=180.0, compile=300.0, startup=120.0)
    finding = detect_low_goodput(goodput, 5.0, floor=0.5)
    assert finding is not None
    assert (finding.kind, finding.severity, finding.subject) == ("low_goodput", "warning",
                                                                "compile")  # fmt: skip
    assert finding.summary == "goodput 30% (floor 50%): compiling took 300 s, 50% of the wall time"
    assert "jax_compilation_cache_dir" in finding.fix
    assert ("compile seconds", "300.0") in finding.evidence


@pytest.mark.parametrize(
    ("goodput", "floor"),
    [
        (account(MIN_WALL_SECONDS - 1, 0.1, productive=29.9, startup=269.1), 0.5),  # young
        (account(600.0, 0.6, productive=360.0, compile=240.0), 0.5),  # above the floor
        (account(600.0, 0.3, productive=180.0, compile=240.0, host_wait=180.0), 0.2),
        (account(600.0, None, steps_unmeasured=600.0), 0.5),  # no busy reading yet
        # badput spread over many buckets, none with a tenth of the time: no one fix
        (
            account(
                1000.0,
                0.4,
                productive=400.0,
                **{
                    b: 99.0
                    for b in (
                        "host_wait",
                        "startup",
                        "compile",
                        "checkpoint_save",
                        "checkpoint_restore",
                        "stall",
                    )
                },
            ),
            0.5,
        ),  # fmt: skip
    ],
)
def test_no_finding(goodput: Goodput, floor: float) -> None:
    assert detect_low_goodput(goodput, 0.0, floor) is None


def test_every_badput_bucket_has_a_fix() -> None:
    assert set(FIXES) == set(GOODPUT_BUCKETS) - {"productive"}


def test_host_wait_on_a_host_other_processes_hold_is_the_host_s_doing() -> None:
    # Measured: an MLP among four jobs on two cores, busy 0.44 of its steps, its threads
    # waiting for a CPU. Prefetching would not help it; fewer processes per host would.
    goodput = account(300.0, 0.43, productive=129.0, host_wait=162.0, startup=4.0, compile=5.0)
    alone = detect_low_goodput(goodput, 0.0, 0.5)
    shared = detect_low_goodput(goodput, 0.0, 0.5, shared_host=True)
    assert alone is not None and shared is not None
    assert (alone.severity, shared.severity) == ("warning", "info")
    assert "prefetch" in alone.fix and shared.fix == SHARED_HOST_FIX
    assert shared.summary.endswith("while the job's threads waited for a CPU other processes hold")
    # another bucket is the job's own doing, shared host or not
    compiling = account(600.0, 0.3, productive=180.0, compile=300.0, host_wait=120.0)
    finding = detect_low_goodput(compiling, 0.0, 0.5, shared_host=True)
    assert finding is not None and finding.severity == "warning"
    assert "jax_compilation_cache_dir" in finding.fix

"""Execution samples and traces are data a job sends: whatever numbers and sizes they hold,
they must not end the daemon, which serves every other job on the host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flood_attacks import (
    RawStream,
    config_daemon,
    execution_sample,
    hello,
    refused,
    scrape_seconds,
    stepping_space,
)
from procs import wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("gap", [1e308, 5e-324])
def test_step_begins_no_session_could_hold_are_refused(tmp_path: Path, gap: float) -> None:
    """Begins 1e308 s apart made the step rate 1e-308 (OverflowError rounding an infinite
    ratio), 5e-324 s apart infinite (ZeroDivisionError): either ended the daemon."""
    daemon = config_daemon(tmp_path)
    sample = execution_sample(stepping_space(), step_begins=[0.0, gap])
    stream = RawStream(daemon.socket_path, [hello(4242), sample, sample], keepalive=0.5)
    try:
        wait_for(lambda: refused(daemon.scrape()).get("sample_numbers", 0) >= 1, 20,
                 "the sample to be refused")  # fmt: skip
        time.sleep(2.0)  # a few snapshots: the ledger's rates are taken at each
        assert daemon.alive(), daemon.log()
        assert scrape_seconds(daemon.metrics_url) < 1.0
        assert "Traceback" not in daemon.log()
        assert daemon.log().count("execution samples refused") == 1
    finally:
        stream.close()
        daemon.stop()

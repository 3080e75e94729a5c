"""The daemon's snapshot is one consistent moment: jobs and agent counts agree."""

from __future__ import annotations

import time
from pathlib import Path


def test_a_one_off_scrape_gets_readings_taken_for_it(tmp_path: Path) -> None:
    """No scraper rhythm, no view: the daemon reads no collector between ticks, and a `curl`
    must still get new readings, not the ones from the daemon's start."""
    import re
    import urllib.request

    from support.procs import start_daemon

    daemon = start_daemon(tmp_path, period=0.2, extra_args=["--collector.host"])
    pattern = re.compile(r'^xmon_collector_duration_seconds\{collector="host"\} (\S+)$', re.M)

    def host_duration() -> str:
        with urllib.request.urlopen(daemon.metrics_url, timeout=10) as response:
            match = pattern.search(response.read().decode())
        assert match, "no host collector duration in the scrape"
        return match.group(1)

    try:
        time.sleep(1.5)  # ticks nobody reads
        first = host_duration()
        time.sleep(1.5)
        second = host_duration()
        assert first != second, "the second scrape was served the first one's readings"
    finally:
        daemon.stop()

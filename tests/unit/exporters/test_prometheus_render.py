"""When /metrics renders: the scrape rhythm and serving ready bytes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from xmon.exporters.prometheus_render import BackgroundRenderer, Rendered, ScrapeRhythm


@pytest.mark.parametrize(
    "scrapes,now,horizon,due",
    [
        ([], 0.0, 1.5, False),  # nobody ever scraped: render lazily
        ([0.0], 0.5, 1.5, False),  # one scrape is no rhythm: the next renders on demand
        ([0.0], 600.0, 1.5, False),  # a one-off curl long ago
        ([0.0, 15.0, 30.0], 31.0, 1.5, False),  # next at 45 s
        ([0.0, 15.0, 30.0], 43.9, 1.5, True),
        ([0.0, 15.0, 30.0], 50.0, 1.5, True),  # overdue but alive
        ([0.0, 15.0, 30.0], 91.0, 1.5, False),  # 4 intervals of silence: scraper gone
        ([0.0, 1.0, 1.01, 2.0], 2.5, 1.5, True),  # a second scraper at +10 ms is no rhythm
    ],
)
def test_scrape_rhythm(scrapes: list[float], now: float, horizon: float, due: bool) -> None:
    rhythm = ScrapeRhythm()
    for t in scrapes:
        rhythm.observe(t)
    assert rhythm.due_within(now, horizon) is due


def test_rhythm_interval_ignores_concurrent_scrapers() -> None:
    rhythm = ScrapeRhythm()
    for t in (0.0, 0.01, 15.0, 15.01, 30.0):
        rhythm.observe(t)
    assert rhythm.interval == pytest.approx(15.0)


def test_rendered_renders_once() -> None:
    calls = []
    rendered = Rendered(lambda: calls.append(1) or b"x 1\n")
    assert not rendered.ready
    assert rendered.text() is rendered.text()
    assert rendered.ready and len(calls) == 1
    assert rendered.gzipped() is rendered.gzipped()


def test_background_renderer_renders_latest_request() -> None:
    done = threading.Event()
    renderer = BackgroundRenderer()
    rendered = Rendered(lambda: (done.set(), b"y 2\n")[1])
    renderer.request(rendered, with_gzip=True)
    assert done.wait(5)
    renderer.close()
    assert rendered.text() == b"y 2\n"


def test_endpoint_serves_previous_snapshot_while_newest_renders() -> None:
    from xmon.exporters.prometheus import MetricsEndpoint
    from xmon.model import DaemonStats, Snapshot

    def snap(seq: int) -> Snapshot:
        return Snapshot(seq=seq, wall_time=float(seq), monotonic=float(seq), hostname="h",
                        daemon=DaemonStats(version="t", started_at=0.0))  # fmt: skip

    now = [0.0]
    endpoint = MetricsEndpoint(clock=lambda: now[0])
    endpoint.update(snap(1))
    first = endpoint.body()  # nothing rendered before: renders synchronously
    now[0] = 1.0
    assert endpoint.body() is first  # a second scrape: the rhythm is one per second
    release = threading.Event()
    endpoint._new_rendered = lambda s, fresh=True: Rendered(lambda: (release.wait(5), b"new\n")[1])  # type: ignore[method-assign]
    now[0] = 1.5
    endpoint.update(snap(2))  # a scrape is due: background render starts and blocks
    assert endpoint.body() is first  # served from ready bytes, not waiting
    release.set()
    for _ in range(500):
        if endpoint.body() == b"new\n":
            break
        threading.Event().wait(0.01)
    assert endpoint.body() == b"new\n"


def test_a_single_scrape_does_not_make_every_update_render() -> None:
    from xmon.exporters.prometheus import MetricsEndpoint
    from xmon.model import DaemonStats, Snapshot

    now = [0.0]
    endpoint = MetricsEndpoint(clock=lambda: now[0])
    renders: list[int] = []

    def counted(snapshot: Snapshot, fresh: bool = True) -> Rendered:
        return Rendered(lambda: (renders.append(snapshot.seq), b"x\n")[1])

    endpoint._new_rendered = counted  # type: ignore[method-assign]
    for seq in range(1, 31):
        endpoint.update(Snapshot(seq=seq, wall_time=now[0], monotonic=now[0], hostname="h",
                                 daemon=DaemonStats(version="t", started_at=0.0)))  # fmt: skip
        if seq == 2:
            endpoint.body()  # a one-off curl
        now[0] += 1.0
    threading.Event().wait(0.2)  # a background render, had one been asked for, is done
    assert renders == [2]


def test_scrape_due_follows_the_scrapers_rhythm() -> None:
    from xmon.exporters.prometheus import MetricsEndpoint
    from xmon.model import DaemonStats, Snapshot

    now = [0.0]
    endpoint = MetricsEndpoint(clock=lambda: now[0])

    def tick() -> None:
        daemon = DaemonStats(version="t", started_at=0.0)
        seq = int(now[0]) + 1
        endpoint.update(Snapshot(seq=seq, wall_time=now[0], monotonic=now[0], hostname="h",
                                 daemon=daemon))  # fmt: skip

    for second in range(17):  # a snapshot a second, a scraper at 0.5 s and 15.5 s
        now[0] = float(second)
        tick()
        if second == 0:
            assert not endpoint.scrape_due()  # nobody scrapes
        if second in (0, 15):
            now[0] += 0.5
            endpoint.body()
    assert not endpoint.scrape_due()  # at 16 s; the next scrape is at 30.5 s
    now[0] = 29.0
    assert not endpoint.scrape_due()  # the snapshot built now is superseded before 30.5 s
    now[0] = 30.0
    assert endpoint.scrape_due()  # the snapshot built now is the one it reads
    now[0] = 200.0
    assert not endpoint.scrape_due()  # the scraper went away


def _snapshot(seq: int) -> Any:
    from xmon.model import DaemonStats, Snapshot

    return Snapshot(seq=seq, wall_time=float(seq), monotonic=float(seq), hostname="h",
                    daemon=DaemonStats(version="t", started_at=0.0))  # fmt: skip


def test_a_scrape_of_a_stale_snapshot_waits_for_the_next_fresh_one() -> None:
    from xmon.exporters.prometheus import MetricsEndpoint

    endpoint = MetricsEndpoint()
    endpoint.update(_snapshot(1))
    endpoint.update(_snapshot(2), fresh=False)  # its collectors re-served older readings
    assert not endpoint.scrape_due()
    served: list[bytes] = []
    scrape = threading.Thread(target=lambda: served.append(endpoint.body()))
    scrape.start()
    for _ in range(500):
        if endpoint.scrape_due():
            break
        threading.Event().wait(0.01)
    assert endpoint.scrape_due(), "a waiting scrape must make the next tick read its collectors"
    assert not served, "a stale snapshot must not be served"
    endpoint.update(_snapshot(3), fresh=False)
    threading.Event().wait(0.05)
    assert not served
    endpoint.update(_snapshot(4))
    scrape.join(5)
    assert served and b"xmon_snapshot_timestamp_seconds 4.0" in served[0]
    assert not endpoint.scrape_due()


def test_a_scrape_serves_the_stale_snapshot_when_no_fresh_one_comes() -> None:
    from xmon.exporters.prometheus import MetricsEndpoint

    now = [0.0]
    endpoint = MetricsEndpoint(clock=lambda: now[0])
    endpoint.update(_snapshot(1))
    now[0] = 0.01  # a period of 10 ms: the scrape waits 2 periods + 1 s
    endpoint.update(_snapshot(2), fresh=False)
    began = time.monotonic()
    body = endpoint.body()  # the daemon is stuck: no tick comes
    assert 0.9 < time.monotonic() - began < 4.0
    assert b"xmon_snapshot_timestamp_seconds 2.0" in body

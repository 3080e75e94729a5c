"""Floods against a real daemon: its memory, CPU and /metrics latency while each one lasts.

One flood at a time, each against a fresh `xmon daemon` (real unix socket, real /metrics port,
TensorBoard exporter on), with the attacks of docs/reliability.md (tests/support/flood_attacks.py).
Throughout each flood a client scrapes /metrics every 0.25 s and a sampler reads the daemon's
RSS every 50 ms; CPU is the daemon's user+system time over the flood's wall time.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
from xmon.wire.protocol import RECEIVE_LIMIT_BYTES

from common import machine, summary, table, today, write_section
from support.flood_attacks import (
    GoodAgent,
    RawStream,
    StalledView,
    UnfinishedMessages,
    close_all,
    config_daemon,
    distinct_ids_space,
    execution_sample,
    hello,
    idle_connections,
    in_part_frames,
    recompile_report,
    refused,
    report,
    samples_every,
    scrape_seconds,
    slow_metrics_clients,
    stepping_space,
)
from support.procs import Daemon, wait_for

MiB = 2**20
# The daemon's budgets (docs/benchmarks.md, "Daemon cost"): RSS < 50 MB idle, CPU < 10 % of a
# core under its heaviest sized load (64 agents x 10 Hz). A flood may add at most what the
# jobs' state is allowed to hold (max_state_bytes, 128 MiB) and must leave nothing behind.
RSS_BUDGET = 50e6
STATE_BYTES = 128 * MiB
LEFT_BEHIND = 8 * MiB
REPEATS = 3  # runs of a flood that leaves more than LEFT_BEHIND: does it keep adding?
CPU_BUDGET = 10.0
SCRAPE_BUDGET = 1.0
# A scrape every 0.25 s throughout: four times the shortest interval Prometheus is usually
# given, often enough to see a slow answer. (Scraping back to back made the watcher itself the
# daemon's largest load: ~50 renders a second of what a flood puts on /metrics.)
SCRAPE_EVERY = 0.25
LOADS: list[float] = []  # the host's 1-minute load average at the end of each flood


@dataclass
class Sizes:
    """How big each flood is: the reliability doc's figures, or small ones for --quick."""

    quick: bool
    hold: float = field(init=False)
    settle: float = field(init=False)

    def __post_init__(self) -> None:
        # settle: the daemon gives freed memory back every 10 s (malloc_trim)
        self.hold, self.settle = (2.0, 1.0) if self.quick else (20.0, 11.0)

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


@dataclass
class Watch:
    """Scrapes /metrics every ``SCRAPE_EVERY`` and samples the daemon's RSS until stopped."""

    daemon: Daemon
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    peak_rss: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Watch:
        self.process = psutil.Process(self.daemon.popen.pid)
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._scrape, self._rss)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _scrape(self) -> None:
        while not self._stop.is_set():
            try:
                self.latencies.append(scrape_seconds(self.daemon.metrics_url, timeout=10))
            except OSError:
                self.failures += 1
            self._stop.wait(SCRAPE_EVERY)

    def _rss(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            self._stop.wait(0.05)


Attack = Callable[[Daemon, Sizes], Iterator[str]]  # sets up, yields once while held, tears down


@dataclass(frozen=True)
class Flood:
    name: str
    config: str
    attack: Attack
    hold: float = 1.0  # times the usual hold (views are cut off only once gRPC's window fills)


def _attached(daemon: Daemon, pids: range, timeout: float = 60) -> None:
    wait_for(lambda: all(f'pid="{p}"' in daemon.scrape() for p in pids), timeout, f"jobs {pids}")


def no_flood(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    yield "no attack: the daemon's own ticks and the watcher's scrapes, for comparison"


def padded_streams(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(16, 2)
    streams, attached = [], []
    for pid in range(100, 100 + count):  # even: the hello padded, odd: the report, in parts
        if pid % 2 == 0:
            streams.append(RawStream(daemon.socket_path, [hello(pid, padding=15 * MiB)]))
            continue
        frames = [hello(pid), *in_part_frames(report(padding=15 * MiB))]
        streams.append(RawStream(daemon.socket_path, frames))
        attached.append(pid)
    _attached(daemon, range(attached[0], attached[-1] + 1, 2))
    yield (f"{count} streams × 15 MiB of unknown fields: {count - len(attached)} hellos (over the "
           f"receive limit), {len(attached)} reports in 1 MiB parts")  # fmt: skip
    close_all(streams)


def unfinished_messages(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(2000, 200)
    flood = UnfinishedMessages(daemon.socket_path, count, MiB)
    at_limit = UnfinishedMessages(daemon.socket_path, count, RECEIVE_LIMIT_BYTES - 16)
    attached = UnfinishedMessages(
        daemon.socket_path, count // 2, MiB, first=lambda i: hello(5000 + i)
    )
    agent = GoodAgent(daemon.socket_path, 900, keepalive=1.0)
    _attached(daemon, range(900, 901))
    yield (f"{count:,} streams 1 byte short of 1 MiB, {count:,} short of the receive limit, "
           f"{count // 2:,} attached agents short of 1 MiB; a good agent attaches")  # fmt: skip
    for thing in (flood, at_limit, attached, agent):
        thing.close()


def recompile_strings(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(24, 4)
    frames = in_part_frames(recompile_report(3 * MiB))
    streams = []
    for pid in range(6000, 6000 + count):  # one after another: joining holds 64 MiB at most
        streams.append(RawStream(daemon.socket_path, [hello(pid), *frames], keepalive=1.0))
        _attached(daemon, range(pid, pid + 1))
    yield f"{count} jobs whose reports pad the recompile and stall strings with 15 MiB"
    close_all(streams)


def many_devices(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(100_000, 20_000)
    stream = RawStream(
        daemon.socket_path, [hello(200), *in_part_frames(report(devices=count))], keepalive=1.0
    )
    _attached(daemon, range(200, 201))
    yield f"1 agent announcing {count:,} devices"
    stream.close()


def distinct_id_samples(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count, repeats = sizes.n(4, 2), sizes.n(4, 2)
    sample = in_part_frames(execution_sample(distinct_ids_space(15 * MiB)))
    frames = [[hello(pid), *sample * repeats] for pid in range(300, 300 + count)]
    streams = [RawStream(daemon.socket_path, f, keepalive=1.0) for f in frames]
    _attached(daemon, range(300, 300 + count))
    yield (f"{count} jobs × {repeats} execution samples of 15 MiB, every event its own program, "
           "run and device")  # fmt: skip
    close_all(streams)


def slow_samples(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(64, 8)
    sample = in_part_frames(execution_sample(stepping_space(10_000, period_ms=1)))
    streams = [RawStream(daemon.socket_path, samples_every(pid, sample, 2.0))
               for pid in range(450, 450 + count)]  # fmt: skip
    _attached(daemon, range(450, 450 + count))
    yield (f"{count} jobs each sending an execution sample of 10,000 ops (~0.1 s to read) "
           "every 2 s")  # fmt: skip
    close_all(streams)


def impossible_step_begins(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(64, 8)
    gaps = (1e308, 5e-324)
    samples = [execution_sample(stepping_space(), step_begins=[0.0, gap]) for gap in gaps]
    streams = [RawStream(daemon.socket_path, [hello(pid), *samples], keepalive=1.0)
               for pid in range(400, 400 + count)]  # fmt: skip
    _attached(daemon, range(400, 400 + count))
    yield f"{count} jobs each sending samples whose step begins are 1e308 s and 5e-324 s apart"
    close_all(streams)


def large_snapshot(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    jobs = sizes.n(8, 2)
    programs = in_part_frames(report(programs=4096))
    streams = [RawStream(daemon.socket_path, [hello(p), *programs], keepalive=1.0)
               for p in range(300, 300 + jobs)]  # fmt: skip
    _attached(daemon, range(300, 300 + jobs))
    channel = grpc.insecure_channel(
        f"unix://{daemon.socket_path}", options=[("grpc.max_receive_message_length", 64 * MiB)]
    )
    view = xmon_pb2_grpc.ControlStub(channel).Subscribe(
        xmon_pb2.SubscribeRequest(protocol_version=1)
    )
    received: list[int] = []

    def read() -> None:
        try:
            received.extend(message.ByteSize() for message in view)
        except grpc.RpcError:
            pass  # cancelled when the flood ends

    reader = threading.Thread(target=read, daemon=True)
    reader.start()  # a view that reads: the daemon encodes the snapshot only for views
    wait_for(lambda: received, 30, "the first snapshot at a view")
    largest = max(received) / MiB
    yield f"{jobs} jobs × 4,096 programs, 1 view reading (largest message {largest:.1f} MiB)"
    view.cancel()
    channel.close()
    close_all(streams)


def stalled_views(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count, jobs = sizes.n(80, 12), 4
    programs = in_part_frames(report(programs=4096))
    agents = [RawStream(daemon.socket_path, [hello(p), *programs], keepalive=1.0)
              for p in range(400, 400 + jobs)]  # fmt: skip
    _attached(daemon, range(400, 400 + jobs))
    views = [StalledView(daemon.socket_path) for _ in range(count)]
    yield f"{count} Subscribe streams that never read, beside {jobs} jobs of 4,096 programs"
    cut_off = daemon.log().count("a view took no snapshot for")
    yield f"{cut_off} cut off once their window filled and the stall time ran out"
    close_all(views)
    close_all(agents)


def idle_unix_connections(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(2000, 200)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 1024)), hard))
    process = psutil.Process(daemon.popen.pid)
    fds = process.num_fds()
    connections = idle_connections(daemon.socket_path, count)
    accepted = wait_for(lambda: process.num_fds() - fds > count // 2 and process.num_fds(), 10,
                        "the connections accepted")  # fmt: skip
    yield f"{count:,} unix connections that never speak (daemon's descriptors: {fds} → {accepted})"
    close_all(connections)


def slow_metrics(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count, scrapes = sizes.n(400, 50), sizes.n(200, 20)
    clients = slow_metrics_clients("127.0.0.1", daemon.metrics_port, count)
    with ThreadPoolExecutor(50) as pool:
        times = list(pool.map(lambda _: scrape_seconds(daemon.metrics_url), range(scrapes)))
    s = summary(times)
    yield (f"{count} clients holding half a request, then {scrapes} scrapes 50 at a time "
           f"(theirs: p99 {s['p99'] * 1e3:.0f} ms, max {s['max'] * 1e3:.0f} ms)")  # fmt: skip
    close_all(clients)


def tensorboard_devices(daemon: Daemon, sizes: Sizes) -> Iterator[str]:
    count = sizes.n(20_000, 2_000)
    stop = threading.Event()

    def frames() -> Iterator[bytes]:
        yield hello(500)
        yield from in_part_frames(report(devices=count))
        seq = 0
        while not stop.is_set():
            seq += 1
            yield from in_part_frames(report(memory_devices=count, seq=seq))  # as an agent
            stop.wait(1.0)

    stream = RawStream(daemon.socket_path, frames())
    _attached(daemon, range(500, 501))
    logdir = Path(daemon.extra_env["XMON_LOGDIR"])
    yield (f"1 job announcing {count:,} devices, memory readings of each every 1 s, "
           f"TensorBoard scalars every snapshot")  # fmt: skip
    stop.set()
    stream.close()
    written = sum(f.stat().st_size for f in logdir.rglob("*") if f.is_file())
    yield f"event files: {written / MiB:.1f} MiB"


FLOODS = (
    Flood("none", "", no_flood),
    Flood("padded streams", "", padded_streams),
    Flood("unfinished messages", "hello_timeout_seconds = 60.0\n", unfinished_messages),
    Flood("padded recompile strings", "", recompile_strings),
    Flood("100,000 devices", "", many_devices),
    Flood("snapshot > 16 MiB", "", large_snapshot),
    Flood("samples of distinct ids", "", distinct_id_samples),
    Flood("impossible step begins", "", impossible_step_begins),
    Flood("samples slow to read", "", slow_samples),
    Flood("views that never read", "", stalled_views, hold=3.0),
    Flood("idle unix connections", "", idle_unix_connections),
    Flood("slow /metrics clients", "", slow_metrics),
    Flood("TensorBoard, 20,000 devices", "[profiling]\ntensorboard_interval_seconds = 0.0\n",
          tensorboard_devices),
)  # fmt: skip


def run_flood(flood: Flood, sizes: Sizes, workdir: Path) -> list[object]:
    daemon = config_daemon(workdir, flood.config, period=1.0)
    try:
        process = psutil.Process(daemon.popen.pid)
        wait_for(lambda: "xmon_up 1.0" in daemon.scrape(), 30, "the first snapshot")
        time.sleep(1.0)
        before, refused_before = process.memory_info().rss, refused(daemon.scrape())
        with Watch(daemon) as watch:
            cpu, started = sum(process.cpu_times()[:2]), time.monotonic()
            described = _attack(flood, daemon, sizes)
            LOADS.append(os.getloadavg()[0])
            cpu_share = 100 * (sum(process.cpu_times()[:2]) - cpu) / (time.monotonic() - started)
        time.sleep(sizes.settle)
        after = [process.memory_info().rss]
        moved = {b: v - refused_before.get(b, 0.0) for b, v in refused(daemon.scrape()).items()}
        # RSS left over is the allocator's high-water mark, not objects of the flood (no
        # object is kept: tests/faults/test_flood_residue.py). The same flood again shows
        # whether it is bounded: it reuses that memory rather than adding as much again.
        while after[-1] - before >= LEFT_BEHIND and len(after) < REPEATS:
            _attack(flood, daemon, sizes)
            time.sleep(sizes.settle)
            after.append(process.memory_info().rss)
        assert daemon.alive(), daemon.log()[-2000:]
    finally:
        daemon.stop()
    return _row(flood.name, "; ".join(described), (before, after), watch, cpu_share, moved)


def _attack(flood: Flood, daemon: Daemon, sizes: Sizes) -> list[str]:
    """Set the flood up, hold it, tear it down; what it said of itself on the way."""
    attack = flood.attack(daemon, sizes)
    described = [next(attack)]
    time.sleep(sizes.hold * flood.hold)
    return described + list(attack)  # tears the flood down


def _row(
    name: str,
    what: str,
    rss: tuple[int, list[int]],
    watch: Watch,
    cpu: float,
    moved: dict[str, float],
) -> list[object]:
    """A flood's line of the results table, with whether it stayed within every budget."""
    before, after = rss
    s = summary(watch.latencies or [float("inf")])
    within = (
        watch.peak_rss < RSS_BUDGET + STATE_BYTES
        and cpu < CPU_BUDGET
        and s["max"] < SCRAPE_BUDGET
        and not watch.failures
    )
    failed = f" ({watch.failures} failed)" if watch.failures else ""
    return [
        name,
        what,
        f"{before / MiB:.0f} / {watch.peak_rss / MiB:.0f} / {after[0] / MiB:.0f}",
        f"{cpu:.1f} %",
        f"{len(watch.latencies)}{failed}",
        f"{s['median'] * 1e3:.0f} / {s['p99'] * 1e3:.0f} / {s['max'] * 1e3:.0f}",
        ", ".join(f"`{b}` +{v:,.0f}" for b, v in moved.items() if v > 0) or "none",
        "yes" if within else "**no**",
        _left_after(before, after),
    ]


def _left_after(before: int, after: list[int]) -> str:
    """Within the budget of what a flood leaves, or how RSS went as the flood was repeated."""
    if after[0] - before < LEFT_BEHIND:
        return "yes"
    runs = " → ".join(f"{rss / MiB:.0f}" for rss in after)
    if after[-1] - after[-2] < LEFT_BEHIND:
        return f"**no**; bounded: {runs} MiB after {len(after)} runs"
    return f"**no**; grows: {runs} MiB after {len(after)} runs"


def main(quick: bool = False, only: str = "") -> str:
    sizes = Sizes(quick)
    rows = []
    with tempfile.TemporaryDirectory(prefix="xmon-floods-") as tmp:
        for i, flood in enumerate(FLOODS):
            if only and only not in flood.name:
                continue
            print(f"flood: {flood.name}", flush=True)
            rows.append(run_flood(flood, sizes, Path(tmp) / str(i)))
            print("  " + " | ".join(str(c) for c in rows[-1]), flush=True)
    header = ["flood", "what", "RSS before / peak / after (MiB)", "CPU (of a core)", "scrapes",
              "scrape p50 / p99 / max (ms)", "refusals counted", "within budget while it runs",
              "RSS after within 8 MiB of before"]  # fmt: skip
    body = (
        f"## Floods\n\n{today()} — {machine()}\n\n"
        f"`benchmarks/floods.py`: one flood at a time against a fresh `xmon daemon` (1 s period, "
        f"TensorBoard exporter on), each held {sizes.hold:g} s and then torn down; RSS after is "
        f"read {sizes.settle:g} s later (the daemon hands freed memory back every 10 s). A client "
        f"scrapes `GET /metrics` every {SCRAPE_EVERY:g} s throughout; RSS is sampled every 50 ms; "
        f"CPU is the "
        f"daemon's user+system time over the flood. Refusals: how much each "
        f"`xmon_daemon_refused_total{{bound}}` moved.\n\n"
        f"Budgets (from Daemon cost): every scrape answered within {SCRAPE_BUDGET:g} s; CPU under "
        f"{CPU_BUDGET:g} % of a core, the budget of the heaviest load the daemon is sized for "
        f"(64 agents × 10 Hz); peak RSS under the 50 MB idle budget plus the 128 MiB the jobs' "
        f"state may hold (`max_state_bytes`). After the flood: RSS within "
        f"{LEFT_BEHIND / MiB:.0f} MiB of before; where it is not, the same flood is run again "
        f"on the same daemon (up to {REPEATS} runs) to see whether what stays is bounded. "
        f"No object of a flood stays: `tests/faults/test_flood_residue.py` counts the daemon's "
        f"objects after floods of programs and views; RSS that stays is CPython's small-object "
        f"arenas (docs/reliability.md).\n\n"
        + table(header, rows)
        + f"\n\nHost load average (1 min) at the end of the floods: "
        f"{min(LOADS, default=0):.1f}–{max(LOADS, default=0):.1f} on {os.cpu_count()} CPUs "
        f"(other work on the machine shares its cores with the daemon and the scrapers)."
    )
    write_section("floods", body)
    return body


if __name__ == "__main__":
    print(
        main(
            quick="--quick" in sys.argv,
            only=next((a for a in sys.argv[1:] if not a.startswith("--")), ""),
        )
    )

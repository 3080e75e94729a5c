"""The daemon: one snapshot per period from agents and collectors, handed to every exporter.

Never imports jax: it starts in well under a second and holds no accelerator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from xmon import __version__
from xmon.analysis.peaks import PeakTable
from xmon.collectors.base import CollectContext
from xmon.collectors.runner import CollectorRunner
from xmon.config import ConfigError, DaemonConfig
from xmon.daemon import lifecycle, memory
from xmon.daemon.bounds import (
    Limits,
    connection_cap,
    inflight_calls,
    inflight_streams,
    raise_descriptor_limit,
)
from xmon.daemon.hub import Hub
from xmon.daemon.intake.services import add_services
from xmon.daemon.job_builder import JobBuilder, agent_evidence
from xmon.daemon.jobs import JobState
from xmon.daemon.oom import OomSink
from xmon.daemon.peers import PidVerifier
from xmon.daemon.profiling import Profiling
from xmon.daemon.reload import Loader, ReloadPlan, plan_reload
from xmon.daemon.topology import resolve_slice_info
from xmon.exporters.prometheus import MetricsEndpoint
from xmon.findings.ended import EndedJobs
from xmon.findings.host import HostFindings
from xmon.findings.oom import OomEvent
from xmon.findings.tracker import FindingsTracker, worst_first
from xmon.model import DaemonStats, SliceInfo, Snapshot
from xmon.wire import paths
from xmon.wire.protocol import RECEIVE_LIMIT_BYTES

log = logging.getLogger("xmon.daemon")

SOCKET_MODE = 0o660


@dataclass
class ReloadCounters:
    total: int = 0
    failures: int = 0
    last_ok: bool = True

    def succeeded(self) -> None:
        self.total += 1
        self.last_ok = True

    def failed(self) -> None:
        self.failures += 1
        self.last_ok = False


class DaemonError(RuntimeError):
    """A reason the daemon cannot start, worded for the person who started it."""


def prepare_socket(path: Path) -> None:
    """Create the socket's directory, refuse one another user could change, remove a stale
    socket; refuse to steal a live one or to replace anything that is not a socket."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise DaemonError(f"cannot create socket directory {path.parent}: {exc.strerror}") from exc
    problem = paths.directory_problem(path.parent, {os.geteuid(), 0})
    if problem is not None:
        raise DaemonError(f"refusing socket directory {path.parent}: {problem}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise DaemonError(f"{path} exists and is not a socket; not replacing it (use --socket)")
    if not paths.someone_listens(path):
        path.unlink()  # left over from a daemon that died
        return
    raise DaemonError(f"another xmon daemon is already listening on {path} (use --socket)")


class Daemon:
    def __init__(
        self, config: DaemonConfig, collectors: list[str], reload_config: Loader | None = None
    ) -> None:
        self.config = config
        self.collectors = collectors
        self._reload_config = reload_config  # re-reads file, env and flags (SIGHUP)
        self._reload_requested = False
        self.reloads = ReloadCounters()
        self.hub = Hub(period_seconds=config.period_seconds, max_agents=config.max_agents)
        self.descriptors = 1024  # RLIMIT_NOFILE, raised when the socket is opened
        _bound_hub(self.hub, config, self.descriptors)
        # gRPC's calls at once are fixed when its server is made: max_inflight_bytes is read once
        self.calls = inflight_calls(config.max_inflight_bytes, RECEIVE_LIMIT_BYTES)
        self.hub.max_inflight_streams = inflight_streams(self.calls)
        self.runner = CollectorRunner(
            collectors, timeout=max(0.5, config.period_seconds), config=config
        )
        self.builder = JobBuilder(PeakTable(config.peaks), restarts=self.hub.restarts)
        self.endpoint = MetricsEndpoint(
            program_limit=config.program_series_limit,
            max_connections=config.metrics_max_connections,
        )
        self.profiling = Profiling(self.hub, config)  # captures, triggers, TensorBoard
        # diagnoses (xmon doctor), kept across reloads
        self.findings = FindingsTracker(goodput_floor=config.goodput_floor)
        self.host_findings = HostFindings()  # the host's: runtime metrics, NVML, preallocation
        self.ended_jobs = EndedJobs()  # an hour of findings of jobs that died of them
        self.hub.oom_sink = OomSink(lambda: self.config.logdir, self._note_oom).take
        self.hostname = socket.gethostname()
        self.started_at = time.time()
        self._seq = 0
        self._stop: asyncio.Event | None = None
        self.metrics_port: int | None = None
        self.slice_info: SliceInfo | None = None
        self._socket = lifecycle.SocketGuard(config.socket_path)
        # accepted connections carry the name the socket was bound to: the private one
        self.hub.pid_claims.verifier = PidVerifier(
            lambda: str(self._socket.private_path().absolute())
        )
        self._servers: list[grpc.aio.Server] = []  # one more each time the socket is re-made
        self._reload_task: asyncio.Task[PreparedReload] | None = None

    def request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def request_reload(self) -> None:
        self._reload_requested = True  # applied at the next tick, between snapshots

    def reload(self) -> bool:
        """Re-read the configuration; keep the running one if the new one is invalid."""
        return self._finish_reload(self._prepare_reload())

    def _prepare_reload(self) -> PreparedReload:
        """The slow half of a reload (reading files, building collectors), off the loop."""
        if self._reload_config is None:
            return PreparedReload()
        try:
            new, collectors = self._reload_config()
            plan = plan_reload(self.config, new, self.collectors, collectors)
            runner = _new_runner(collectors, plan.config) if plan.rebuild_collectors else None
        except (ConfigError, ValueError) as exc:
            return PreparedReload(error=str(exc))
        return PreparedReload(plan, collectors, runner)

    def _finish_reload(self, prepared: PreparedReload) -> bool:
        """Apply a prepared reload (between two snapshots)."""
        plan = prepared.plan
        if plan is None:
            if prepared.error is not None:
                self.reloads.failed()
                log.error(
                    "configuration reload failed, keeping the running configuration: %s",
                    prepared.error,
                )
            return False
        if plan.needs_restart:
            log.warning("reload: %s changed; this takes a restart", ", ".join(plan.needs_restart))
        self._apply(plan, prepared.collectors, prepared.runner)
        self.reloads.succeeded()
        log.info("configuration reloaded: %s", ", ".join(plan.changed) or "no changes")
        return True

    def _apply(
        self, plan: ReloadPlan, collectors: list[str], runner: CollectorRunner | None = None
    ) -> None:
        config = self.config = plan.config
        logging.getLogger().setLevel(config.log_level.upper())
        self.hub.period_seconds = config.period_seconds
        self.hub.max_agents = config.max_agents
        _bound_hub(self.hub, config, self.descriptors)
        self.builder = JobBuilder(PeakTable(config.peaks), restarts=self.hub.restarts)
        self.endpoint.program_limit = config.program_series_limit
        self.findings.goodput_floor = config.goodput_floor
        if plan.rebuild_collectors:
            old, self.collectors = self.runner, collectors
            self.runner = runner or _new_runner(collectors, config)
            # close() waits for a hung collector up to its timeout: never on the loop
            threading.Thread(target=old.close, name="xmon-reload", daemon=True).start()

    async def run(self) -> None:
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        if lifecycle.take_hangup():  # one arrived while starting
            self.request_reload()
        # /metrics first: a busy port fails before the agents' socket exists, so nothing (xmon
        # demo, an agent) takes a daemon that is about to exit for a running one.
        self.endpoint.start(self.config.listen_host, self.config.listen_port)
        try:
            await self._start_grpc()
        except BaseException:
            self.endpoint.stop()  # nothing else started: a refusal is the one line said
            raise
        try:
            self.metrics_port = self.endpoint.port
            log.info(
                "xmon daemon %s: agents on %s, metrics on http://%s:%d/metrics",
                __version__, self.config.socket_path, self.config.listen_host, self.metrics_port,
            )  # fmt: skip
            # once, off the loop: on a TPU VM this may ask the GCE metadata server (1 s timeout)
            self.slice_info = await asyncio.to_thread(
                resolve_slice_info, self.config.host, dict(os.environ)
            )
            await self._tick_forever()
        finally:
            # flushes the TensorBoard event files, with the last snapshot's points in them
            await self.profiling.close(self.hub.snapshot)
            self.hub.end_streams()  # agents see a clean end, not a cancelled call
            await asyncio.gather(*(server.stop(grace=1.0) for server in self._servers))
            self.endpoint.stop()
            self.runner.close()
            self._socket.unlink_own()
            log.info("xmon daemon stopped")

    async def _start_grpc(self) -> grpc.aio.Server:
        prepare_socket(self.config.socket_path)
        limit = self.config.max_message_bytes
        self.descriptors = raise_descriptor_limit()
        _bound_hub(self.hub, self.config, self.descriptors)
        server = grpc.aio.server(
            # Each call may hold a message of up to the receive limit in gRPC before the daemon
            # sees it: past this many at once gRPC refuses a call before reading it.
            maximum_concurrent_rpcs=self.calls,
            options=[
                # Larger agent messages come in parts (xmon.wire.protocol): gRPC holds a stream's
                # whole message before the daemon reads it, so this bounds what each can.
                ("grpc.max_receive_message_length", RECEIVE_LIMIT_BYTES),
                ("grpc.max_send_message_length", limit),
                # Reports are small and the socket is local: bandwidth-delay probing (a ping
                # after each burst of data) would only wake gRPC's threads.
                ("grpc.http2.bdp_probe", 0),
                *_connection_options(self.hub.max_connections),
            ],
        )
        add_services(server, self.hub, self.profiling.profiler)
        private = self._socket.private_path()
        try:
            if server.add_insecure_port(f"unix://{private.absolute()}") == 0:
                raise RuntimeError("bind failed")
        except RuntimeError as exc:
            raise DaemonError(f"cannot listen on {self.config.socket_path}: {exc}") from exc
        await server.start()
        os.chmod(private, SOCKET_MODE)
        try:
            self._socket.publish()
        except OSError as exc:
            await server.stop(None)
            raise DaemonError(f"cannot listen on {self.config.socket_path}: {exc}") from exc
        self._servers.append(server)
        return server

    async def _tick_forever(self) -> None:
        assert self._stop is not None
        next_tick = next_trim = time.monotonic()
        closed = 0  # streams closed as of the last trim
        while not self._stop.is_set():
            await self._between_snapshots()
            await self.tick()
            if time.monotonic() >= next_trim:  # tens of microseconds (ms after streams closed)
                memory.release(collect=self.hub.streams_closed != closed)
                closed = self.hub.streams_closed
                next_trim = time.monotonic() + memory.TRIM_EVERY_SECONDS
            next_tick += self.config.period_seconds
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): do not burst to catch up
                next_tick, delay = time.monotonic(), 0.0
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
            except TimeoutError:
                pass

    async def _between_snapshots(self) -> None:
        """Work that must not delay a snapshot: a reload is read in a thread and applied here
        once ready; the socket is checked (and re-made if someone deleted it)."""
        if self._reload_requested and self._reload_task is None:
            self._reload_requested = False
            self._reload_task = asyncio.create_task(asyncio.to_thread(self._prepare_reload))
        if self._reload_task is not None and self._reload_task.done():
            task, self._reload_task = self._reload_task, None
            self._finish_reload(task.result())
        state = self._socket.state()
        if state is lifecycle.SocketState.REPLACED:
            self._socket.warn_replaced()
        elif state is lifecycle.SocketState.MISSING:
            await self._listen_again()

    async def _listen_again(self) -> None:
        """The socket was deleted: listen on a new one. Streams already connected go on over
        the old server until the daemon stops."""
        path = self.config.socket_path
        try:
            await self._start_grpc()
        except (DaemonError, OSError) as exc:
            log.error("socket %s was deleted and cannot be made again: %s", path, exc)
            return
        log.warning("socket %s was deleted; listening on a new one", path)

    async def tick(self) -> Snapshot:
        collect = self.hub.begin_collect()
        full = self._read_in_full()
        live = full or self._exported()
        snapshot = await self.build_snapshot(live, full)
        self.endpoint.update(snapshot, fresh=full)
        self.profiling.on_snapshot(snapshot)
        self.hub.publish(snapshot, collect)
        return snapshot

    def _refused(self) -> dict[str, int]:
        refused = dict(self.hub.budget.refused)
        for bound, count in self.endpoint.refused.items():
            refused[bound] = refused.get(bound, 0) + count
        tensorboard = self.profiling.tensorboard
        if tensorboard is not None and tensorboard.rotations_total:
            refused["tensorboard_bytes"] = tensorboard.rotations_total
        return refused

    def _note_oom(self, pid: int, event: OomEvent) -> None:
        self.findings.note_oom(pid, event)
        self.ended_jobs.note_oom(pid, event)

    def _live_jobs(self, now: float) -> dict[int, JobState]:
        return {
            stream_id: state
            for stream_id, state in self.hub.jobs.items()
            if state.report is None
            or now - state.last_report_monotonic < self.config.agent_timeout_seconds
        }

    def _read_in_full(self) -> bool:
        """Will a reader that shows every metric read the next snapshot? (See CollectContext.)"""
        return (
            self._seq == 0  # the first snapshot: every view and scrape starts from real readings
            or bool(self.hub.subscribers)
            or bool(self.hub.fresh_waiters)
            or self.endpoint.scrape_due()
        )

    def _exported(self) -> bool:
        """Will the TensorBoard export write the next snapshot?"""
        has_jobs = bool(self._live_jobs(time.monotonic()))
        return self.profiling.export_due(has_jobs, self.config.period_seconds)

    async def build_snapshot(self, live: bool = True, full: bool = True) -> Snapshot:
        """The next snapshot; ``live`` and ``full`` say who reads it (see CollectContext)."""
        now = time.monotonic()
        jobs_live = self._live_jobs(now)
        pids = tuple(sorted({state.pid for state in jobs_live.values()}))
        output, health = await self.runner.run_async(
            CollectContext(pids=pids, monotonic=now, live=live, full=full)
        )
        # Streams may have closed while the collectors ran: the snapshot shows only the jobs
        # still connected, so that its job list and agents_connected agree.
        connected = self.hub.jobs
        still_live = [state for stream_id, state in jobs_live.items() if stream_id in connected]
        jobs = tuple(
            self.builder.build(state, output.processes.get(state.pid))
            for state in sorted(still_live, key=lambda s: (s.job_name, s.pid))
        )
        self.builder.forget(connected.values())
        jobs = self.profiling.annotate(jobs)
        evidence = {state.pid: agent_evidence(state.report) for state in still_live}
        jobs = self.findings.annotate(jobs, evidence, output.host)
        self._seq += 1
        counters = self.hub.counters
        snapshot = Snapshot(
            seq=self._seq,
            wall_time=time.time(),
            monotonic=now,
            hostname=self.hostname,
            daemon=DaemonStats(
                version=__version__,
                started_at=self.started_at,
                agents_connected=len(connected),
                reports_received_total=counters.reports_received,
                reports_rejected_total=counters.reports_rejected,
                agents_disconnected_total=counters.disconnects,
                config_reloads_total=self.reloads.total,
                config_reload_failures_total=self.reloads.failures,
                config_last_reload_successful=self.reloads.last_ok,
                refused_total=self._refused(),
                goodput_floor=self.config.goodput_floor,
            ),
            host=output.host,
            devices=output.devices,
            jobs=jobs,
            collectors=health,
            exporters=self.profiling.health(),
            slice_info=self.slice_info,
            runtime_services=output.runtime_services,
        )
        self.ended_jobs.observe(jobs)
        host = self.host_findings.judge(snapshot) + self.ended_jobs.findings()
        return dataclasses.replace(snapshot, findings=worst_first(host))


def _bound_hub(hub: Hub, config: DaemonConfig, descriptors: int) -> None:
    """Hand the configured bounds to the services (at start and on reload)."""
    hub.budget.limits = Limits(
        devices_per_job=config.max_devices_per_job,
        programs_per_job=config.max_programs_per_job,
        job_bytes=config.max_job_bytes,
        state_bytes=config.max_state_bytes,
    )
    hub.max_connections = connection_cap(config.max_connections, descriptors)
    hub.arrivals.limit = config.max_pending_hellos
    hub.max_subscribers = config.max_subscribers
    hub.pid_claims.policy = config.verify_pids
    hub.hello_timeout_seconds = config.hello_timeout_seconds
    hub.subscriber_stall_seconds = config.subscriber_stall_seconds
    hub.max_message_bytes = config.max_message_bytes


def _connection_options(max_connections: int) -> list[tuple[str, int]]:
    """gRPC's own bounds on connections: a connection that sends no HTTP/2 preface in time, or
    holds no call for a minute, is closed; past ``max_connections`` new ones are refused."""
    return [
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.server_handshake_timeout_ms", 5_000),
        ("grpc.max_connection_idle_ms", 60_000),
        ("grpc.max_concurrent_streams", 100),  # per connection, told to clients in SETTINGS
    ]


@dataclass(frozen=True)
class PreparedReload:
    """A configuration read and checked off the loop, ready to apply (or why not)."""

    plan: ReloadPlan | None = None
    collectors: list[str] = field(default_factory=list)
    runner: CollectorRunner | None = None  # built off the loop when the collectors change
    error: str | None = None


def _new_runner(collectors: list[str], config: DaemonConfig) -> CollectorRunner:
    return CollectorRunner(collectors, timeout=max(0.5, config.period_seconds), config=config)

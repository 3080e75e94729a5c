"""The views' gRPC service on the daemon's socket: snapshots (streamed or one fresh one),
captures and a program's HLO.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from xmon import __version__
from xmon.daemon.capture import CaptureError, CaptureSpec, Profiler
from xmon.daemon.hub import SUPPORTED_PROTOCOLS, Frame, Hub, refuse_connection
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

log = logging.getLogger("xmon.daemon")

FRESH_TIMEOUT_FACTOR = 3  # periods a GetSnapshot(fresh=True) waits, plus 5 s of collectors
SUBSCRIBER_BUFFER = 2


class ControlService(xmon_pb2_grpc.ControlServicer):
    def __init__(self, hub: Hub, profiler: Profiler | None = None) -> None:
        self._hub = hub
        self._profiler = profiler

    async def Subscribe(  # noqa: N802
        self, request: xmon_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> None:
        hub = self._hub
        if not hub.open_stream():
            await refuse_connection(context, hub)
            return
        try:
            if len(hub.subscribers) >= hub.max_subscribers:
                hub.budget.refuse("subscribers")
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"this daemon already streams to {hub.max_subscribers} views (max_subscribers)",
                )
                return
            await self._stream_snapshots(context, request.changes_only)
        finally:
            hub.close_stream()

    async def _stream_snapshots(
        self, context: grpc.aio.ServicerContext, changes_only: bool = False
    ) -> None:
        """Write each snapshot to the view; a view that takes none for
        ``subscriber_stall_seconds`` is cut off, so that the messages gRPC holds for views that
        never read stay bounded. ``changes_only``: a job's programs unchanged since the frame
        written before are named, not sent again (``Frame.for_view``)."""
        hub = self._hub
        queue: asyncio.Queue[Frame] = asyncio.Queue(SUBSCRIBER_BUFFER)
        latest = hub.latest_frame()
        if latest is not None:
            queue.put_nowait(latest)
        hub.subscribers.add(queue)
        written: int | None = None  # the number of the frame written last
        try:
            while True:
                frame = await queue.get()
                message = frame.for_view(written) if changes_only else frame.whole
                written = frame.number
                try:
                    await asyncio.wait_for(context.write(message), hub.subscriber_stall_seconds)
                except TimeoutError:
                    hub.budget.refuse("subscribers")
                    log.info(
                        "a view took no snapshot for %g s: cut off", hub.subscriber_stall_seconds
                    )
                    return
        finally:
            hub.subscribers.discard(queue)

    async def GetSnapshot(  # noqa: N802
        self, request: xmon_pb2.GetSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.SnapshotMessage:
        if request.fresh:
            return await self._fresh_snapshot(context)
        latest = self._hub.latest()
        if latest is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "daemon is starting: no snapshot yet")
            raise AssertionError("not reached: abort raises")
        return latest

    async def _fresh_snapshot(self, context: grpc.aio.ServicerContext) -> xmon_pb2.SnapshotMessage:
        hub = self._hub
        future: asyncio.Future[xmon_pb2.SnapshotMessage] = (
            asyncio.get_running_loop().create_future()
        )
        entry = (hub.collects_started, future)
        hub.fresh_waiters.append(entry)
        try:
            return await asyncio.wait_for(future, FRESH_TIMEOUT_FACTOR * hub.period_seconds + 5.0)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no fresh snapshot in time")
            raise
        finally:
            if entry in hub.fresh_waiters:
                hub.fresh_waiters.remove(entry)

    async def Capture(  # noqa: N802
        self, request: xmon_pb2.CaptureRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.CaptureReply:
        profiler = await self._require_profiler(request.protocol_version, context)
        spec = CaptureSpec(
            job_name=request.job_name or None,
            pid=request.pid or None,
            duration_seconds=request.duration_ms / 1000.0,
            log_dir=request.log_dir,
            memory=request.memory_profile,
        )
        try:
            outcome = await profiler.capture(spec)
        except CaptureError as exc:
            await context.abort(exc.code, exc.message)
            raise  # not reached: abort raises
        return xmon_pb2.CaptureReply(
            job_name=outcome.job_name,
            pid=outcome.pid,
            kind=outcome.kind,
            log_dir=str(outcome.log_dir),
            run_dir=str(outcome.run_dir),
            paths=list(outcome.paths),
            message=outcome.message,
            seconds=outcome.seconds,
        )

    async def GetHlo(  # noqa: N802
        self, request: xmon_pb2.GetHloRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.GetHloReply:
        profiler = await self._require_profiler(request.protocol_version, context)
        try:
            outcome = await profiler.get_hlo(
                request.job_name or None, request.pid or None, request.fingerprint
            )
        except CaptureError as exc:
            await context.abort(exc.code, exc.message)
            raise
        return xmon_pb2.GetHloReply(
            job_name=outcome.job_name,
            pid=outcome.pid,
            fingerprint=outcome.fingerprint,
            program_name=outcome.program_name,
            hlo_gzip=outcome.hlo_gzip,
        )

    async def _require_profiler(self, version: int, context: grpc.aio.ServicerContext) -> Profiler:
        if version not in SUPPORTED_PROTOCOLS:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version {version} not supported by daemon {__version__}",
            )
        if self._profiler is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this daemon runs no profiler")
        assert self._profiler is not None
        return self._profiler

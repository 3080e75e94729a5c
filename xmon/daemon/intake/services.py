"""The daemon's two gRPC services on one server: the agents' intake and the views' control."""

from __future__ import annotations

import grpc

from xmon.daemon.capture import Profiler
from xmon.daemon.hub import Hub
from xmon.daemon.intake.control import ControlService
from xmon.daemon.intake.ingest import IngestService
from xmon.wire.proto import xmon_pb2_grpc


def add_services(server: grpc.aio.Server, hub: Hub, profiler: Profiler | None) -> None:
    xmon_pb2_grpc.add_IngestServicer_to_server(IngestService(hub), server)
    xmon_pb2_grpc.add_ControlServicer_to_server(ControlService(hub, profiler), server)

"""The protos xmon checks in generated code for, and the command that regenerates each (the
unit tests name it in their failures, the e2e tests run it and compare)."""

from __future__ import annotations

PROTO = "xmon/wire/proto/xmon.proto"
XPLANE_PROTO = "xmon/wire/proto/xplane.proto"
HLO_PROTO = "xmon/wire/proto/hlo.proto"
REGENERATE = (
    "python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. " + PROTO
)
REGENERATE_XPLANE = "python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. " + XPLANE_PROTO
REGENERATE_HLO = "python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. " + HLO_PROTO

"""The checked-in generated code matches xmon.proto, xplane.proto and hlo.proto, and the
protocol is versioned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xmon.wire.proto import hlo_pb2, xmon_pb2, xmon_pb2_grpc, xplane_pb2

from support.proto_generation import REGENERATE, REGENERATE_HLO, REGENERATE_XPLANE


@pytest.mark.parametrize(
    ("module", "regenerate"),
    [(xmon_pb2, REGENERATE), (xplane_pb2, REGENERATE_XPLANE), (hlo_pb2, REGENERATE_HLO)],
)
def test_checked_in_type_stubs_declare_every_message_and_field(
    module: Any, regenerate: str
) -> None:
    """The .pyi files type-checkers read (their layout varies between protoc releases, so they
    are compared by what they declare, not byte for byte)."""
    stub = Path(module.__file__).with_suffix(".pyi").read_text()

    def check(message: Any, indent: str) -> None:
        assert f"{indent}class {message.name}(_message.Message):" in stub, regenerate
        for field in message.fields:
            assert f"{indent}    {field.name}: " in stub, f"{message.full_name}.{field.name}"
        for nested in message.nested_types:
            check(nested, indent + "    ")

    for message in module.DESCRIPTOR.message_types_by_name.values():
        check(message, "")


def test_services_and_version() -> None:
    assert xmon_pb2.PROTOCOL_VERSION == 1
    assert hasattr(xmon_pb2_grpc, "IngestStub") and hasattr(xmon_pb2_grpc, "ControlStub")
    methods = {m.name for m in xmon_pb2.DESCRIPTOR.services_by_name["Ingest"].methods}
    assert methods == {"Connect"}

"""The checked-in generated code matches xmon.proto, xplane.proto and hlo.proto, and the
protocol is versioned."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc_tools
import pytest
from google.protobuf import descriptor_pb2

from xmon.wire.proto import hlo_pb2, xmon_pb2, xplane_pb2

from support.proto_generation import (
    HLO_PROTO,
    PROTO,
    REGENERATE,
    REGENERATE_HLO,
    REGENERATE_XPLANE,
    XPLANE_PROTO,
)

REPO = Path(__file__).resolve().parents[2]
VERSION_LINE = re.compile(r"^GRPC_GENERATED_VERSION = .*$", re.MULTILINE)


def _protoc(tmp_path: Path, *outputs: str, proto: str = PROTO) -> None:
    include = Path(grpc_tools.__file__).parent / "_proto"
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{REPO}",
        f"-I{include}",
        *outputs,
        proto,
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("proto", "module", "regenerate"),
    [
        (PROTO, xmon_pb2, REGENERATE),
        (XPLANE_PROTO, xplane_pb2, REGENERATE_XPLANE),
        (HLO_PROTO, hlo_pb2, REGENERATE_HLO),
    ],
)
def test_checked_in_descriptor_matches_the_proto(
    tmp_path: Path, proto: str, module: Any, regenerate: str
) -> None:
    _protoc(tmp_path, f"--descriptor_set_out={tmp_path / 'set.pb'}", proto=proto)
    fresh = descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "set.pb").read_bytes()).file[0]
    checked_in = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    _drop_json_names(fresh)  # protoc adds them to descriptor sets, not to generated code
    assert fresh == checked_in, f"regenerate: {regenerate}"


def _drop_json_names(file: descriptor_pb2.FileDescriptorProto) -> None:
    def visit(message: descriptor_pb2.DescriptorProto) -> None:
        for field in message.field:
            field.ClearField("json_name")
        for nested in message.nested_type:
            visit(nested)

    for message in file.message_type:
        visit(message)


def test_checked_in_grpc_stubs_match_the_proto(tmp_path: Path) -> None:
    _protoc(tmp_path, f"--grpc_python_out={tmp_path}")
    fresh = (tmp_path / "xmon/wire/proto/xmon_pb2_grpc.py").read_text()
    checked_in = (REPO / "xmon/wire/proto/xmon_pb2_grpc.py").read_text()
    # Only the generator's own version stamp may differ between grpcio-tools releases.
    assert VERSION_LINE.sub("", fresh) == VERSION_LINE.sub("", checked_in)


@pytest.mark.parametrize(
    "module",
    [
        "xmon.daemon.service",
        "xmon.exporters.prometheus",
        "xmon.cli.main",
        "xmon.wire.client",
        "xmon.collectors",
        "xmon",
    ],
)
def test_daemon_side_never_imports_jax(module: str) -> None:
    code = (
        f"import sys, {module}; from xmon.cli.main import build_parser; build_parser(); "
        "print('jax' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"

"""Slice and worker identity of a host (xmon.daemon.topology), its config keys and its info
metric."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.daemon.topology import (
    metadata_fetcher,
    resolve_slice_info,
)

from support.loopback_http import QuietHandler, serving
from support.tpu_env import TPU_ENV


class _Metadata(QuietHandler):
    """Answers like the GCE metadata server: only with the Metadata-Flavor header."""

    def do_GET(self) -> None:  # noqa: N802
        attributes = {"tpu-env": TPU_ENV, "worker-network-endpoints": "a:1:x,b:2:y,c:3:z"}
        key = self.path.removeprefix("/computeMetadata/v1/instance/attributes/")
        if self.headers.get("Metadata-Flavor") != "Google" or key not in attributes:
            self.send_error(403 if key in attributes else 404)
            return
        self.reply(attributes[key].encode())


@pytest.fixture
def metadata_server() -> Iterator[str]:
    with serving(_Metadata) as address:
        yield address


def test_metadata_over_http(metadata_server: str, tmp_path: Path) -> None:
    fetch = metadata_fetcher({"GCE_METADATA_IP": metadata_server})
    assert fetch("no-such-attribute") is None
    info = resolve_slice_info({"metadata": True}, {"GCE_METADATA_IP": metadata_server}, tmp_path)
    assert info is not None
    assert (info.slice, info.worker, info.num_workers) == ("train-v4-16", 1, 3)


def test_unreachable_metadata_server_is_quick_and_quiet(tmp_path: Path) -> None:
    fetch = metadata_fetcher({"GCE_METADATA_IP": "127.0.0.1:9"}, timeout=0.5)
    assert fetch("tpu-env") is None
    assert resolve_slice_info({"metadata": True}, {}, tmp_path, fetch) is None

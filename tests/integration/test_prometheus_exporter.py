"""The Prometheus exporter against real prometheus_client, a real HTTP server and promtool."""

from __future__ import annotations

import gzip
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from xmon.exporters.prometheus import (
    CONTENT_TYPE,
    MetricsEndpoint,
    MetricsServerError,
)
from xmon.model import HostSample

from support.sample_snapshots import snapshot

# --- HTTP ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[MetricsEndpoint, str]]:
    endpoint = MetricsEndpoint()
    host, port = endpoint.start("127.0.0.1", 0)
    assert port != 0 and endpoint.port == port
    yield endpoint, f"http://{host}:{port}"
    endpoint.stop()


def fetch(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_http_metrics(server: tuple[MetricsEndpoint, str]) -> None:
    endpoint, url = server
    endpoint.update(snapshot())
    status, headers, body = fetch(url + "/metrics")
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE
    assert "Content-Encoding" not in headers
    assert body == endpoint.body()
    parsed = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"xmon_job_device_memory_in_use_bytes", "xmon_job_step_duration_seconds"} <= parsed


def test_http_metrics_gzip(server: tuple[MetricsEndpoint, str]) -> None:
    endpoint, url = server
    endpoint.update(snapshot())
    status, headers, body = fetch(url + "/metrics", **{"Accept-Encoding": "gzip, deflate"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert int(headers["Content-Length"]) == len(body)
    assert gzip.decompress(body) == endpoint.body()
    _, headers, _ = fetch(url + "/metrics", **{"Accept-Encoding": "gzip;q=0, identity"})
    assert "Content-Encoding" not in headers


def test_http_head(server: tuple[MetricsEndpoint, str]) -> None:
    endpoint, url = server
    status, headers, body = fetch(url + "/metrics", method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["Content-Length"]) == len(endpoint.body())


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [("/", 200, b'href="/metrics"'), ("/-/healthy", 200, b"OK"), ("/nope", 404, b"not found"),
     ("/metrics/x", 404, b"not found")],
)  # fmt: skip
def test_http_other_paths(
    server: tuple[MetricsEndpoint, str], path: str, status: int, needle: bytes
) -> None:
    got, _, body = fetch(server[1] + path)
    assert got == status and needle in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"])
def test_http_is_read_only(server: tuple[MetricsEndpoint, str], method: str) -> None:
    status, headers, _ = fetch(server[1] + "/metrics", method=method)
    assert status == 405
    assert headers["Allow"] == "GET, HEAD"


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsServerError, match=f"127.0.0.1:{port}: address already in use"):
            MetricsEndpoint().start("127.0.0.1", port)


def test_start_and_stop_twice() -> None:
    endpoint = MetricsEndpoint()
    endpoint.start("127.0.0.1", 0)
    with pytest.raises(MetricsServerError, match="already running"):
        endpoint.start("127.0.0.1", 0)
    endpoint.stop()
    endpoint.stop()
    with pytest.raises(MetricsServerError, match="not running"):
        _ = endpoint.port


# --- golden file and timing ------------------------------------------------------------------


def test_http_before_the_first_snapshot() -> None:
    endpoint = MetricsEndpoint()
    _, port = endpoint.start("127.0.0.1", 0)
    try:
        status, _, body = fetch(f"http://127.0.0.1:{port}/metrics")
    finally:
        endpoint.stop()
    assert status == 200 and b"xmon_up 0.0" in body and b"xmon_build_info{" in body


def test_http_render_failure_is_a_500_and_recovers(server: tuple[MetricsEndpoint, str]) -> None:
    endpoint, url = server
    broken = HostSample("node0", 16, 0.25, "many", 0, 0)  # type: ignore[arg-type]
    endpoint.update(replace(snapshot(), host=broken))
    # A scrape racing the background render of the broken snapshot may still get the previous
    # one; once that render has failed, every scrape must see the failure.
    assert _eventually_status(url + "/metrics", 500)
    endpoint.update(snapshot())
    assert _eventually_status(url + "/metrics", 200)


def _eventually_status(url: str, status: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fetch(url)[0] == status:
            return True
        time.sleep(0.02)
    return False

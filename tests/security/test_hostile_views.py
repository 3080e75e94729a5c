"""What the views (`xmon top`, `xmon doctor`) make of hostile text in a finding: rich markup,
terminal escapes, a megabyte. Each is shown as text, cut to what a terminal shows, and the
view keeps running."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.cli import doctor
from xmon.model import Finding, Snapshot
from xmon.top.app import XmonTop

from support.loopback_http import QuietHandler, serving
from support.procs import REPO, base_env, start_daemon
from support.top_app import screen_text, sees, top, until
from support.views import job, snapshot

MARKUP = "[/bold] [link=https://evil.example]x[/link] [red]"  # an unmatched closing tag
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
MEGABYTE = "A" * (1 << 20)


def _hostile(seq: int = 1) -> Snapshot:
    finding = Finding(
        "stall", "warning", f"summary {MARKUP} {ESCAPES}", 1_700_000_000.0,
        evidence=((f"name {MARKUP}", f"value {MARKUP} {ESCAPES}"), ("big", MEGABYTE)),
        fix=f"fix {MARKUP}", value=1.0, detail=f"line {MARKUP}\n{MEGABYTE}",
    )  # fmt: skip
    jobs = (dataclasses.replace(job("alpha", 101, devices=1), findings=(finding,)),)
    return dataclasses.replace(snapshot(seq, jobs=jobs), findings=(finding,))


def test_top_shows_markup_and_escapes_in_a_finding_as_text() -> None:
    """The findings view of the real TUI (textual's pilot): rich read an evidence value as
    markup and raised MarkupError, which ended ``xmon top``."""

    async def scenario() -> None:
        async with top(_hostile(), size=(120, 40)) as (app, pilot, _):
            await pilot.press("f")
            await until(pilot, lambda: app.view == "findings")
            await sees(pilot, app, "value [/bold] [link=https://evil.example]x[/link]")
            text = screen_text(app)
            assert "\x1b" not in text and "\\x1b]0;pwned" in text
            assert app.is_running and isinstance(app, XmonTop)

    asyncio.run(scenario())


def test_doctor_cuts_a_megabyte_finding_to_a_screenful() -> None:
    text = doctor.render(list(_hostile().jobs), show_info=True)
    assert len(text) < 20_000, len(text)
    assert "more characters)" in text and MARKUP in text


class _Prometheus(QuietHandler):
    """A Prometheus on loopback that answers slowly (``slow``) or names one process of a job
    that says it has 2,147,483,647."""

    slow = False

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.slow:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            with contextlib.suppress(OSError):  # the client hangs up
                for _ in range(600):  # a byte every half second: each read is within a timeout
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
            return
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        result = []
        if query.startswith("xmon_job_fleet_info"):
            labels = {"instance": "h0:10049", "job_name": "train", "pid": "7", "job_key": "k",
                      "process_index": "0", "process_count": "2147483647"}  # fmt: skip
            result = [{"metric": labels, "value": [0, "1"]}]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        self.reply(json.dumps(body).encode())


@contextlib.contextmanager
def _prometheus(slow: bool) -> Iterator[str]:
    with serving(type("Handler", (_Prometheus,), {"slow": slow})) as address:
        yield f"http://{address}"


# The limit is set by the command's own interpreter before xmon starts: a ``preexec_fn`` runs
# Python in the forked child of this process, whose gRPC threads (other tests' clients) then
# printed an epoll error into the command's stderr.
LIMITED = (
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29)); "
    "sys.argv[0] = 'xmon'; runpy.run_module('xmon', run_name='__main__')"
)


def _xmon(*args: str) -> subprocess.CompletedProcess[str]:
    """An ``xmon`` command in a process of its own, with 1.5 GiB of address space at most."""
    return subprocess.run([sys.executable, "-c", LIMITED, *args], capture_output=True, text=True,
                          timeout=90, env=base_env(), cwd=REPO)  # fmt: skip


def _fleet(url: str) -> subprocess.CompletedProcess[str]:
    return _xmon("fleet", "--prometheus", url)


@pytest.mark.e2e
def test_fleet_gives_up_on_a_prometheus_that_answers_a_byte_at_a_time() -> None:
    """Each read came within the socket's timeout, so the query never ended."""
    with _prometheus(slow=True) as url:
        started = time.monotonic()
        result = _fleet(url)
        took = time.monotonic() - started
    assert result.returncode == 2 and "Traceback" not in result.stderr, result
    assert result.stderr.strip() == f"xmon fleet: Prometheus at {url} did not answer within 10 s"
    assert took < 40, took


@pytest.mark.e2e
def test_fleet_names_a_few_missing_processes_of_a_job_claiming_two_billion() -> None:
    """``process_count=2147483647`` from one agent made a set of every index (2.3 GB)."""
    with _prometheus(slow=False) as url:
        result = _fleet(url)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "1 of 2147483647 processes reporting" in result.stdout
    assert "missing: process 1, 2, 3" in result.stdout and "and 2147483582 more" in result.stdout
    assert len(result.stdout) < 50_000


# A daemon's Control service whose GetHlo answers with 2 GiB of zeros in 2 MiB of gzip,
# served on a unix socket (argv[1]) until stdin closes.
BOMB_SERVER = """
import sys, zlib, grpc
from concurrent import futures
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
packer = zlib.compressobj(9, zlib.DEFLATED, 31)
zeros = bytes(1 << 20)
bomb = b"".join(packer.compress(zeros) for _ in range(2048)) + packer.flush()
class Control(xmon_pb2_grpc.ControlServicer):
    def GetHlo(self, request, context):
        return xmon_pb2.GetHloReply(job_name="j", pid=7, fingerprint="f", hlo_gzip=bomb)
server = grpc.server(futures.ThreadPoolExecutor(2))
xmon_pb2_grpc.add_ControlServicer_to_server(Control(), server)
server.add_insecure_port("unix://" + sys.argv[1])
server.start()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.e2e
def test_programs_refuses_hlo_text_that_unpacks_past_its_bound(tmp_path: Path) -> None:
    """2 MiB of gzip from the daemon unpacked to 2 GiB: MemoryError and a traceback."""
    socket_path = tmp_path / "xmon.sock"
    server = subprocess.Popen([sys.executable, "-c", BOMB_SERVER, str(socket_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=base_env(), cwd=REPO)  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        result = _xmon("programs", "--hlo", "f", "--socket", str(socket_path))
    finally:
        server.communicate(timeout=30)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip() == (
        "xmon programs: the daemon's HLO text for f: unpacks to over 256 MiB"
    )
    assert result.stdout == ""


BEACON = "https://evil.example/b.png"


def test_tensorboard_renders_no_remote_content_from_a_finding() -> None:
    """A job's ``![x](URL)`` or ``<img src=URL>`` in a finding was an image TensorBoard's
    Text dashboard fetched whenever someone opened the board. Rendered here by TensorBoard's
    own markdown-to-safe-HTML, as the dashboard does."""
    from tensorboard import plugin_util

    from xmon.exporters import tb_findings

    hostile = f'![x]({BEACON}) <img src="{BEACON}"> [link]({BEACON}) **bold**'
    finding = Finding("recompile", "warning", f"summary {hostile}", 1_700_000_000.0,
                      evidence=((f"name {hostile}", f"value {hostile}"),),
                      fix=f"fix {hostile}", subject=f"jit_{hostile}",
                      detail=f"```\n{hostile}")  # fmt: skip
    for text in (tb_findings.markdown(finding), tb_findings.resolved("recompile", hostile)):
        html = plugin_util.markdown_to_safe_html(text)
        assert "<img" not in html and "<a " not in html and "<strong>bold" not in html, html
        assert "![x](https://evil.example/b.png)" in html  # shown as the job wrote it


def _ask(port: int, request: bytes) -> bytes:
    """The status line the daemon's /metrics server answers ``request`` with."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.e2e
def test_metrics_server_answers_only_well_formed_requests(tmp_path: Path) -> None:
    """The hand parser split the request line on any whitespace, upper-cased the method
    and took any number of headers that fit 16 KiB: ``get``, ``GET`` over ``HTTP/9.9`` and
    3,000 headers were served as GET, ``GET\\x00`` was an unknown method."""
    daemon = start_daemon(tmp_path / "d")
    try:
        port = daemon.metrics_port
        assert _ask(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == b"HTTP/1.1 200 OK"
        bad = b"HTTP/1.1 400 Bad Request"
        assert _ask(port, b"GET\x00 /metrics HTTP/1.1\r\n\r\n") == bad
        assert _ask(port, b"GET /metrics HTTP/9.9\r\n\r\n") == bad
        assert _ask(port, b"GET /met rics HTTP/1.1\r\n\r\n") == bad
        assert _ask(port, b"GET /metrics HTTP/1.1\r\n" + b"a:b\r\n" * 3000 + b"\r\n") == bad
        assert _ask(port, b"get /metrics HTTP/1.1\r\n\r\n") == b"HTTP/1.1 405 Method Not Allowed"
        assert _ask(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == b"HTTP/1.1 200 OK"
    finally:
        daemon.stop()
    assert "Traceback" not in daemon.log()


def test_a_snapshot_that_unpacks_past_its_bound_is_one_error() -> None:
    """Every view decodes the daemon's snapshots (top, doctor, ls, programs): 1 GiB of zeros
    in 1 MiB of gzip was unpacked whole, and JSON that is no snapshot raised a traceback."""
    from xmon.wire.client import RequestFailed, decode
    from xmon.wire.proto import xmon_pb2

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(bytes(1 << 20)) for _ in range(1024)) + packer.flush()
    for payload, says in ((bomb, "unpacks to over 512 MiB"), (b"[1]", "unusable")):
        try:
            decode(xmon_pb2.SnapshotMessage(json=payload))
        except RequestFailed as exc:
            assert says in str(exc) and exc.code == "DATA_LOSS"
        else:
            raise AssertionError("decoded")

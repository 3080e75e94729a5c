"""The processes of multi-process jobs, read from Prometheus's HTTP API.

Each host's daemon knows only its own processes; Prometheus scrapes them all. One instant query
per series (``/api/v1/query``) gives every process's readings, keyed by the daemon that
reports it (``instance``) and the process (``job_name``, ``pid``), and joined here with
``xmon_job_fleet_info`` for the job key and process index.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from xmon.fleet.judge import ProcessReading

TIMEOUT_SECONDS = 10.0  # a whole query: connecting, the answer's head and its body
MAX_ANSWER_BYTES = 64 * 1024 * 1024
Key = tuple[str, str, str]  # instance, job_name, pid

# ProcessReading field -> the series it is read from
_SERIES: Mapping[str, str] = {
    "steps_total": "xmon_job_steps_total",
    "steps_begun": "xmon_job_steps_begun_total",
    "steps_per_second": "xmon_job_steps_per_second",
    "seconds_since_last_step": "xmon_job_seconds_since_last_step",
    "host_seconds": "xmon_job_step_host_seconds",
    "compute_seconds": "xmon_job_step_device_compute_seconds",
    "collective_seconds": "xmon_job_step_device_collective_seconds",
    "goodput_ratio": 'xmon_job_goodput_ratio{window="5m"}',
}


class PrometheusUnavailable(Exception):
    """Prometheus cannot be asked, or did not answer as Prometheus does."""


class PrometheusSource:
    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusUnavailable(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self._timeout = timeout

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        path = f"/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        status, raw = _get(self.url, path, self._timeout)
        if status != 200:
            raise PrometheusUnavailable(f"{self.url} answered HTTP {status} to {expr!r}")
        try:
            body = json.loads(raw)
        except ValueError:
            raise PrometheusUnavailable(f"{self.url} is not a Prometheus API (not JSON)") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusUnavailable(f"{self.url}: query {expr!r} failed: {error or body!r}")
        data = body.get("data", {})
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusUnavailable(f"{self.url}: {expr!r} is not an instant vector")
        return list(data.get("result", []))

    def readings(self, matchers: str = "") -> list[ProcessReading]:
        """Every process a daemon reports, with what the fleet judges it by. ``matchers`` are
        extra label matchers for every series (e.g. ``job="xmon"``)."""
        selector = "{" + matchers + "}" if matchers else ""
        processes: dict[Key, ProcessReading] = {}
        for sample in self.query(f"xmon_job_fleet_info{selector}"):
            labels = sample.get("metric", {})
            key = _key(labels)
            processes[key] = ProcessReading(
                job_key=labels.get("job_key", ""),
                process_index=_int(labels.get("process_index")),
                process_count=max(1, _int(labels.get("process_count"), 1)),
                instance=key[0],
                worker=labels.get("worker", ""),
                job_name=key[1],
                pid=_int(key[2]),
            )
        for field, series in _SERIES.items():
            for sample in self.query(_selecting(series, matchers)):
                key = _key(sample.get("metric", {}))
                if key in processes:
                    values: dict[str, Any] = {field: _value(sample)}
                    processes[key] = replace(processes[key], **values)
        for sample in self.query(f"xmon_job_stalled{selector}"):
            labels = sample.get("metric", {})
            key = _key(labels)
            if key in processes:
                processes[key] = replace(
                    processes[key], stalled_waits_in=labels.get("waits_in", "unknown")
                )
        return list(processes.values())


def _selecting(series: str, matchers: str) -> str:
    """``series`` (a name, or a name with its own label matchers) with ``matchers`` added."""
    if not matchers:
        return series
    if series.endswith("}"):
        return f"{series[:-1]}, {matchers}}}"
    return f"{series}{{{matchers}}}"


def _key(labels: Mapping[str, str]) -> Key:
    return labels.get("instance", ""), labels.get("job_name", ""), labels.get("pid", "")


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _value(sample: Mapping[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def _get(url: str, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``path`` of ``url`` within ``timeout`` seconds in all. A socket timeout bounds
    each read, not the whole: a server that answers a byte every few seconds kept ``xmon
    fleet`` waiting forever. So the request runs in a thread, and past the deadline its socket
    is shut down, which ends the thread's read at once."""
    parsed = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    try:
        conn = kind(parsed.netloc, timeout=timeout)
    except http.client.InvalidURL as exc:
        raise PrometheusUnavailable(f"not a usable URL: {url!r} ({exc})") from None
    result: list[tuple[int, bytes] | BaseException] = []
    worker = threading.Thread(
        target=_fetch, args=(conn, parsed.path.rstrip("/") + path, result), daemon=True
    )
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        _shut(conn)
        worker.join(1.0)
        raise PrometheusUnavailable(f"Prometheus at {url} did not answer within {timeout:g} s")
    conn.close()
    answer = result[0] if result else OSError("no answer")
    if isinstance(answer, BaseException):
        reason = (answer.strerror if isinstance(answer, OSError) else None) or answer
        raise PrometheusUnavailable(f"cannot reach Prometheus at {url}: {reason}")
    return answer


def _fetch(
    conn: http.client.HTTPConnection, path: str, result: list[tuple[int, bytes] | BaseException]
) -> None:
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        body = response.read(MAX_ANSWER_BYTES + 1)
        if len(body) > MAX_ANSWER_BYTES:
            raise OSError(f"answer over {MAX_ANSWER_BYTES >> 20} MiB")
        result.append((response.status, body))
    except (OSError, http.client.HTTPException) as exc:
        result.append(exc)


def _shut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    conn.close()

"""The daemon's own process metrics, as node_exporter and dcgm-exporter export theirs.

``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
``process_virtual_memory_bytes``, ``process_open_fds``, ``process_max_fds`` and
``process_start_time_seconds`` come from prometheus_client's ``ProcessCollector``, which reads
``/proc/<pid>/stat``, ``/proc/<pid>/fd`` and ``/proc/<pid>/limits``; where there is no /proc
(macOS) it yields nothing rather than zeros. They are rendered on the same scrape as the
snapshot's series, read at render time, in a registry of their own (no ``python_*`` or GC
families: what the daemon costs is its CPU, memory and file descriptors).
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest


class SelfMetrics:
    """``process_*`` of one process (default: this one), read from ``proc``."""

    def __init__(self, pid: str = "self", proc: Path = Path("/proc")) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(namespace="", pid=lambda: pid, proc=str(proc), registry=self.registry)

    def render(self) -> bytes:
        """Text exposition (0.0.4) of the process families, to append to a scrape's body."""
        return generate_latest(self.registry)

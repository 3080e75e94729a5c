"""Findings about the host rather than one job: why the hardware's own numbers are missing, and
memory a card shows full that the job on it does not use.

The detectors are pure functions of a snapshot (without its findings) and of a few facts about
the host the snapshot does not carry (:class:`HostFacts`: the NVIDIA device nodes, whether the
NVML library and nvidia-ml-py are there). :class:`HostFindings` gathers those facts, dates each
finding and hands the daemon ``Snapshot.findings``, worst first.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xmon.findings.tracker import worst_first
from xmon.model import Device, Finding, Job, JobDevice, Snapshot

GPU_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})  # as jax.Device.platform names GPUs
_NVIDIA_NODE = re.compile(r"nvidia\d+\Z")  # /dev/nvidia0..N: one per GPU (not nvidiactl)
# JAX's GPU client reserves XLA_PYTHON_CLIENT_MEM_FRACTION (0.75) of the card at start: a card
# this full...
FULL_RATIO = 0.7
# ...of which the jobs on it use (peak bytes in use, PJRT) at most this share is preallocated.
USED_RATIO = 0.5
FACTS_EVERY_SECONDS = 60.0  # /dev and the NVML library are looked at again this often
MIB = 2**20


@dataclass(frozen=True)
class HostFacts:
    """What the detectors need that no collector puts in the snapshot."""

    nvidia_nodes: tuple[str, ...] = ()  # /dev/nvidia<N> present on this host
    nvml_library: bool | None = None  # libnvidia-ml.so.1 loads here (None: not looked at)
    pynvml_installed: bool | None = None  # nvidia-ml-py importable by the daemon


def detect_host(snapshot: Snapshot, facts: HostFacts, since: float = 0.0) -> list[Finding]:
    found = [tpu_metrics_unreachable(snapshot, since), nvml_missing(snapshot, facts, since)]
    return [f for f in found if f is not None] + gpu_preallocated(snapshot, since)


# --- libtpu runtime metrics ------------------------------------------------------------------


def tpu_metrics_unreachable(snapshot: Snapshot, since: float) -> Finding | None:
    """TPU chips are in use (a process holds one, or a job runs on TPU) and no libtpu metrics
    service answers: duty cycle, HBM use and bandwidth are missing for them."""
    chips = [d for d in snapshot.devices if d.platform == "tpu"]
    holders = sorted({pid for d in chips for pid in d.pids})
    tpu_jobs = [j for j in snapshot.jobs if _platform(j) == "tpu"]
    if not holders and not tpu_jobs:
        return None  # no TPU here, or no process has libtpu up: nothing would serve metrics
    services = [s for s in snapshot.runtime_services if s.source == "tpu"]
    if any(s.up for s in services):
        return None
    collector = _collector_state(snapshot, "tpu")
    evidence = [
        ("TPU chips", str(len(chips)) if chips else "none seen in sysfs"),
        ("processes holding chips", _pids(holders)),
        ("jobs on TPU", _jobs(tpu_jobs)),
        ("tpu collector", collector),
    ]
    evidence += [(f"service {s.address}", s.error or "not answering") for s in services[:4]]
    if not services:
        evidence.append(("services polled", "none"))
    enable = " Enable the collector (--collector.tpu)." if collector == "off" else ""
    return Finding(
        kind="tpu_metrics_unreachable",
        severity="warning",
        summary="TPUs are in use but no libtpu runtime metrics service answers: no duty cycle, "
        "HBM use or HBM bandwidth",
        since=since,
        evidence=tuple(evidence),
        fix="Start the job with TPU_RUNTIME_METRICS_PORTS=8431 (one port per process on the "
        "host, e.g. 8431,8432,8433,8434): libtpu serves its metrics there (older versions "
        "only with it set). In a container the daemon must reach that port (the same network "
        "namespace, or containerPort 8431). A service on another address: "
        "--tpu-metrics-address HOST:PORT or XMON_TPU_METRICS_ADDRESSES." + enable,
        subject="tpu",
    )


# --- NVML ------------------------------------------------------------------------------------


def nvml_missing(snapshot: Snapshot, facts: HostFacts, since: float) -> Finding | None:
    """An NVIDIA GPU is here (its /dev node, or a job on a GPU) and NVML gives no device."""
    gpu_jobs = [j for j in snapshot.jobs if _platform(j) in GPU_PLATFORMS]
    if not facts.nvidia_nodes and not gpu_jobs:
        return None
    if any(d.source == "nvml" for d in snapshot.devices):
        return None
    collector = _collector_state(snapshot, "nvml")
    failing = collector.startswith("failing")
    evidence = (
        ("NVIDIA device nodes", ", ".join(facts.nvidia_nodes[:8]) or "none"),
        ("jobs on GPU", _jobs(gpu_jobs)),
        ("nvml collector", collector),
        ("libnvidia-ml.so.1", _yes_no(facts.nvml_library, "loads", "does not load")),
        ("nvidia-ml-py", _yes_no(facts.pynvml_installed, "installed", "not installed")),
    )
    steps = []
    if collector == "off":
        steps.append("enable the collector (--collector.nvml)")
    if facts.pynvml_installed is False:
        steps.append("install nvidia-ml-py into the daemon's environment (pip install 'xmon[gpu]')")
    if facts.nvml_library is False:
        steps.append(
            "make the driver's libnvidia-ml.so.1 loadable by the daemon (in a container: "
            "NVIDIA_DRIVER_CAPABILITIES must include utility, or run it with --gpus)"
        )
    if failing or not steps:
        steps.append("check that the daemon's user may open /dev/nvidia* and that nvidia-smi works")
    return Finding(
        kind="nvml_unavailable",
        severity="warning",
        summary="an NVIDIA GPU is here but NVML "
        + ("fails" if failing else "gives no device")
        + ": no GPU utilisation, power, temperature or card memory",
        since=since,
        evidence=evidence,
        fix="; ".join(steps).capitalize() + ".",
        subject="nvml",
    )


# --- GPU preallocation -----------------------------------------------------------------------


def gpu_preallocated(snapshot: Snapshot, since: float) -> list[Finding]:
    """One finding per card NVML shows nearly full while the jobs on it use little of it."""
    found = []
    for device in snapshot.devices:
        finding = _preallocated(device, snapshot.jobs, since)
        if finding is not None:
            found.append(finding)
    return found


def _preallocated(device: Device, jobs: Sequence[Job], since: float) -> Finding | None:
    hw = device.hardware
    used, total = hw.memory_used_bytes, hw.memory_total_bytes
    if device.platform not in GPU_PLATFORMS or not used or not total or used < FULL_RATIO * total:
        return None
    users = [(job, jd) for job in jobs for jd in job.devices if _on_card(device, job, jd)]
    real = [max(jd.memory.in_use_bytes or 0, jd.memory.peak_bytes_in_use or 0) for _, jd in users]
    if not users or any(jd.memory.in_use_bytes is None for _, jd in users):
        return None  # no job's allocator on it: nothing to compare with
    in_use = sum(real)
    if in_use > USED_RATIO * used:
        return None
    pids = {job.pid for job, _ in users}
    others = sorted(
        {p.pid for p in device.processes if p.pid not in pids} | set(device.pids) - pids
    )
    pools = [jd.memory.pool_bytes or jd.memory.bytes_limit for _, jd in users]
    label = f"{device.platform} {device.index}"
    evidence = [
        ("card memory used (NVML)", f"{_mib(used)} of {_mib(total)} ({used / total:.0%})"),
        ("jobs on it", ", ".join(f"{j.job_name} (pid {j.pid})" for j, _ in users)),
        ("PJRT bytes in use, peak", _mib(in_use)),
        ("allocator pool (PJRT)", _mib(sum(p for p in pools if p)) if all(pools) else "unknown"),
        ("other processes on the card", _pids(others)),
    ]
    return Finding(
        kind="gpu_preallocated",
        severity="warning" if others else "info",
        summary=f"{label} looks {used / total:.0%} full, but the jobs on it use "
        f"{_mib(in_use)}: JAX preallocated the rest",
        since=since,
        evidence=tuple(evidence),
        fix="Not a leak: JAX's GPU client reserves XLA_PYTHON_CLIENT_MEM_FRACTION (75 %) of "
        "the card at start, so nvidia-smi shows it full. To share the card or see real use, "
        "start the job with XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand; may "
        "fragment) or XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 (a smaller reservation). xmon's "
        "memory numbers (bytes in use) are the real use either way.",
        subject=label,
        value=float(used - in_use),
    )


def _on_card(device: Device, job: Job, jd: JobDevice) -> bool:
    info = jd.info
    if info.platform not in GPU_PLATFORMS or info.local_hardware_id != device.index:
        return False
    holders = set(device.pids) | {p.pid for p in device.processes}
    return not holders or job.pid in holders


# --- small helpers ---------------------------------------------------------------------------


def _platform(job: Job) -> str:
    platforms = {d.info.platform for d in job.devices}
    return next(iter(platforms)) if len(platforms) == 1 else job.platform


def _collector_state(snapshot: Snapshot, name: str) -> str:
    health = next((c for c in snapshot.collectors if c.name == name), None)
    if health is None:
        return "off"
    if not health.up:
        return f"failing: {health.last_error or 'error'}"
    return "running" if health.present else "finds nothing on this host"


def _jobs(jobs: Sequence[Job]) -> str:
    names = [f"{j.job_name} (pid {j.pid})" for j in jobs[:4]]
    more = f" and {len(jobs) - 4} more" if len(jobs) > 4 else ""
    return ", ".join(names) + more if names else "none"


def _pids(pids: Sequence[int]) -> str:
    return ", ".join(map(str, pids[:8])) + (" ..." if len(pids) > 8 else "") if pids else "none"


def _yes_no(value: bool | None, yes: str, no: str) -> str:
    return "not looked at" if value is None else yes if value else no


def _mib(value: float) -> str:
    return f"{value / MIB:,.0f} MiB"


# --- the daemon's side -----------------------------------------------------------------------


def nvidia_nodes(dev_root: Path) -> tuple[str, ...]:
    try:
        names = sorted(p.name for p in dev_root.iterdir() if _NVIDIA_NODE.match(p.name))
    except OSError:
        return ()
    return tuple(str(dev_root / name) for name in names)


def _pynvml_installed() -> bool:
    return importlib.util.find_spec("pynvml") is not None


def _nvml_library_loads() -> bool:
    from xmon.collectors.nvml import nvml_library_loads

    return nvml_library_loads()


class HostFindings:
    """The daemon's host findings: facts refreshed every ``FACTS_EVERY_SECONDS``, each
    finding dated from when its (kind, subject) was first seen, continuously."""

    def __init__(
        self,
        dev_root: Path = Path("/dev"),
        clock: Callable[[], float] = time.monotonic,
        library_loads: Callable[[], bool] = _nvml_library_loads,
        pynvml_installed: Callable[[], bool] = _pynvml_installed,
    ) -> None:
        self._dev_root, self._clock = dev_root, clock
        self._library_loads, self._pynvml_installed = library_loads, pynvml_installed
        self._facts: HostFacts | None = None
        self._facts_at = 0.0
        self._since: dict[tuple[str, str | None], float] = {}

    def judge(self, snapshot: Snapshot) -> tuple[Finding, ...]:
        found = detect_host(snapshot, self._host_facts(snapshot), 0.0)
        since = {(f.kind, f.subject): self._since.get((f.kind, f.subject), snapshot.wall_time)
                 for f in found}  # fmt: skip
        self._since = since
        return worst_first(dataclasses.replace(f, since=since[(f.kind, f.subject)]) for f in found)

    def _host_facts(self, snapshot: Snapshot) -> HostFacts:
        now = self._clock()
        gpu_jobs = any(_platform(j) in GPU_PLATFORMS for j in snapshot.jobs)
        facts = self._facts
        fresh = facts is not None and now - self._facts_at < FACTS_EVERY_SECONDS
        if facts is not None and fresh and not (gpu_jobs and facts.nvml_library is None):
            return facts
        nodes = nvidia_nodes(self._dev_root)
        # Loading the driver's library costs; only worth it where a GPU is there to explain.
        looked = bool(nodes) or gpu_jobs
        self._facts = HostFacts(
            nvidia_nodes=nodes,
            nvml_library=self._library_loads() if looked else None,
            pynvml_installed=self._pynvml_installed() if looked else None,
        )
        self._facts_at = now
        return self._facts

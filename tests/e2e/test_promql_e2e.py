"""Every dashboard query and every alert rule, run against a real Prometheus that scrapes a real
xmon daemon with a real JAX job attached (4 CPU devices).

Two kinds of expression need more than a CPU host. Those on PJRT allocator stats (peak, limit,
largest free block, fragmentation, allocations; absent on CPU) are checked against a second job
on the same daemon: ``fakes.pjrt_job`` speaks the agent's protocol over the real socket and
reports what a GPU or TPU PJRT client's ``memory_stats()`` returns, so they must return data.
Those on hardware series (``xmon_device_*``: a TPU or GPU collector) are checked when the fake
libtpu server and the TPU collector are in the tree: the daemon then polls the fake, and every
one whose device series the daemon exports must return data. The rest (NVML's) are reported as
owed to a GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from xmon.model import DeviceMemory

from support.fakes.pjrt_job import ALLOCATOR_KEYS, FakePjrtJob, allocator_stats
from support.procs import (
    Daemon,
    Proc,
    Prometheus,
    start_daemon,
    start_job,
    start_prometheus,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dashboards.alerts import ALERTS, RECORDS  # noqa: E402
from dashboards.grafana import metric_names, needs  # noqa: E402
from dashboards.lint import expressions  # noqa: E402

RULES = REPO / "dashboards" / "alerts" / "xmon.rules.yml"
JOB_NAME = "opsjob"
ALLOCATOR_JOB = "pjrtjob"  # the fake GPU/TPU job, for the allocator expressions
SUBSTITUTE = {"$__rate_interval": "10s", "$__range": "1m", "$__interval": "2s"}
LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)$")

# Steps on every device without collectives, a new input shape every third step (a recompile
# each: the compile storm the alert is for), and the persistent compilation cache in use. It
# declares its model FLOPs (6 x parameters per token), so the MFU and tokens/s panels have data.
JOB = r"""
import os, pathlib, time
import jax, jax.numpy as jnp
import xmon

jax.config.update("jax_compilation_cache_dir", os.environ["JOB_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
stop = pathlib.Path(os.environ["JOB_STOP"])

@jax.jit
def train_step(w, x):
    return w - 0.01 * x.T @ jnp.tanh(x @ w)

@jax.jit
def probe(v):
    return (v * 2.0).sum()

devices = jax.local_devices()
xmon.declare_model_flops(per_token=6 * 128 * 128, tokens_per_step=64 * len(devices))
ws = [jax.device_put(jnp.ones((128, 128)) / 128, d) for d in devices]
xs = [jax.device_put(jnp.ones((64, 128)), d) for d in devices]
step = 0
while not stop.exists():
    with xmon.step():
        ws = [train_step(w, x) for w, x in zip(ws, xs)]
        if step % 3 == 0:
            probe(jnp.ones((step // 3 + 1,)))
        ws[0].block_until_ready()
    step += 1
    time.sleep(0.02)
print("steps", step, flush=True)
"""


@dataclass
class Stack:
    daemon: Daemon
    job: Proc
    allocator: FakePjrtJob
    prometheus: Prometheus
    tpu: bool  # the daemon also polls the fake libtpu server
    exported: set[str] = field(default_factory=set)  # metric names on the daemon's /metrics

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.prometheus.query(substitute(expr))


def substitute(expr: str) -> str:
    """Grafana's variables as a dashboard with "All" selected sends them."""
    for name, value in SUBSTITUTE.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{?(instance|job_name|device)\}?", ".*", expr)


def _fake_tpu(workdir: Path) -> tuple[dict[str, str], Any] | None:
    """Env pointing the daemon at a fake TPU host and libtpu server, if both are in the tree."""
    if importlib.util.find_spec("xmon.collectors.tpu") is None:
        return None
    try:
        from support.fakes.libtpu_server import FakeLibtpu, scenario
        from support.fakes.tpu_host import HOSTS, write_host
    except ImportError:
        return None
    root = write_host(workdir / "tpu-host", HOSTS["v5e-4"])
    server = FakeLibtpu(scenario("v5e", chips=4)).start()
    env = {"XMON_PATH_SYSFS": str(root / "sys"), "XMON_TPU_METRICS_ADDRESSES": server.address}
    return env, server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (apt-get install -y prometheus)")
    work = tmp_path_factory.mktemp("promql")
    fake = _fake_tpu(work)
    identity = {"TPU_WORKER_ID": "0", "MEGASCALE_SLICE_ID": "0", "MEGASCALE_NUM_SLICES": "1",
                "TPU_ACCELERATOR_TYPE": "v5litepod-4", "XMON_SLICE": "ci-slice"}  # fmt: skip
    daemon = start_daemon(work / "daemon", env={**identity, **(fake[0] if fake else {})})
    prometheus = start_prometheus(work / "prom", [f"127.0.0.1:{daemon.metrics_port}"], [RULES])
    job = start_job(work, daemon.socket_path, JOB, JOB_NAME,
                    JOB_STOP=str(work / "stop"), JOB_CACHE=str(work / "cache"))  # fmt: skip
    allocator = FakePjrtJob(daemon.socket_path, ALLOCATOR_JOB).start()
    try:
        yield Stack(daemon, job, allocator, prometheus, fake is not None)
    finally:
        (work / "stop").touch()
        allocator.stop()
        for proc in (job, prometheus, daemon):
            proc.stop(signal.SIGTERM)
        if fake:
            fake[1].stop()


def _dashboard_exprs() -> list[tuple[str, str]]:
    """(where, expr) for every panel target and every variable query of every dashboard."""
    out = []
    for path in sorted((REPO / "dashboards").glob("xmon-*.json")):
        data = json.loads(path.read_text())
        out += [(f"{path.stem}: {title}", expr) for title, expr in expressions(data)]
        for var in data["templating"]["list"]:
            match = LABEL_VALUES.match(var.get("definition", ""))
            if match:
                out.append((f"{path.stem}: variable {var['name']}", match.group(1)))
    return out


def _alert_parts() -> list[tuple[str, str]]:
    return [(f"{a.name} part", part) for a in ALERTS for part in a.parts]


def _expected(stack: Stack, expr: str) -> bool:
    """Whether the expression must return data from this stack."""
    if "xmon:" in expr or 'process_count!="1"' in expr:
        # Rules over the processes of a multi-process job: a one-process stack has none;
        # tests/fleet/test_fleet_e2e.py runs them against four processes and four daemons.
        return False
    if "xmon_job_finding" in expr or "xmon_host_finding" in expr:
        # A finding's series exists only while the finding holds (none in this healthy
        # stack); tests/diagnosis checks that findings reach /metrics.
        return False
    kind = needs(expr)
    if kind in (None, "allocator"):  # the fake PJRT job provides the allocator stats
        return True
    if not stack.tpu:
        return False
    devices = {n for n in metric_names(expr) if n.startswith("xmon_device_")}
    return devices <= stack.exported


def _wait_for_data(stack: Stack, exprs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Poll until every expected expression returns data; return those that never did."""
    pending = [(where, e) for where, e in exprs if _expected(stack, e)]
    deadline = time.monotonic() + 240
    while pending and time.monotonic() < deadline:
        assert stack.job.alive(), stack.job.log()
        pending = [(where, e) for where, e in pending if not stack.query(e)]
        if pending:
            time.sleep(1)
    return pending


@pytest.fixture(scope="module")
def ready(stack: Stack) -> Stack:
    def job_scraped() -> bool:
        assert stack.job.alive(), stack.job.log()
        return bool(stack.query(f'xmon_job_steps_total{{job_name="{JOB_NAME}"}} > 5'))

    wait_for(job_scraped, 240, "the job's steps in Prometheus", interval=1)
    scraped = stack.daemon.scrape()
    stack.exported = {line.split("{")[0].split(" ")[0] for line in scraped.splitlines()
                      if line.startswith("xmon_")}  # fmt: skip
    return stack


def test_every_dashboard_query_returns_data(ready: Stack) -> None:
    missing = _wait_for_data(ready, _dashboard_exprs())
    assert missing == [], "\n".join(f"{where}: {expr}" for where, expr in missing)


def test_every_alert_signal_returns_data(ready: Stack) -> None:
    missing = _wait_for_data(ready, _alert_parts())
    assert missing == [], "\n".join(f"{where}: {expr}" for where, expr in missing)


def test_the_real_job_trips_the_alerts_it_should(ready: Stack) -> None:
    """A CPU job far below its peak FLOP/s, recompiling every third step."""
    by_name = {a.name: a for a in ALERTS}
    for name in ("XmonJobLowFlopsUtilization", "XmonCompileStorm"):
        expr = by_name[name].expr
        found = wait_for(lambda e=expr: ready.query(e), 120, f"{name} to be true", interval=1)
        assert {s["metric"]["job_name"] for s in found} == {JOB_NAME}
    quiet = ("XmonDaemonDown", "XmonDaemonNotReady", "XmonCollectorDown", "XmonAgentSilent",
             "XmonJobStalled", "XmonSnapshotStale")  # fmt: skip
    for name in quiet:
        assert ready.query(by_name[name].expr) == [], name


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(json.load(response))


def test_prometheus_loads_and_evaluates_every_rule(ready: Stack) -> None:
    def evaluated() -> list[dict[str, Any]] | None:
        groups = _get(f"{ready.prometheus.url}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if all(r.get("lastEvaluation", "").startswith("2") for r in rules) else None

    rules = wait_for(evaluated, 60, "every rule to be evaluated", interval=1)
    assert {r["name"] for r in rules} == {a.name for a in ALERTS} | {r.name for r in RECORDS}
    assert [r for r in rules if r["health"] != "ok"] == []
    active = wait_for(
        lambda: {a["labels"]["alertname"] for a in
                 _get(f"{ready.prometheus.url}/api/v1/alerts")["data"]["alerts"]}
        >= {"XmonJobLowFlopsUtilization", "XmonCompileStorm"} or None,
        60, "the job's alerts to be pending",
    )  # fmt: skip
    assert active


def test_the_fake_allocator_sends_every_stat_the_model_knows() -> None:
    """So that no allocator series is left without data by the fake."""
    derived = {"live_array_bytes", "live_array_read_at", "fragmentation_ratio", "extra"}
    known = set(DeviceMemory.__dataclass_fields__) - derived
    assert set(allocator_stats(0, 0)) == set(ALLOCATOR_KEYS) == known


def test_allocator_stats_come_through(ready: Stack) -> None:
    """The fake GPU/TPU job near its limit and allocating; the CPU job, without a limit, not."""
    by_name = {a.name: a for a in ALERTS}
    near = wait_for(lambda: ready.query(by_name["XmonJobDeviceMemoryNearLimit"].expr), 60,
                    "the near-limit expression to be true", interval=1)  # fmt: skip
    assert {(s["metric"]["job_name"], s["metric"]["device"]) for s in near} == {
        (ALLOCATOR_JOB, str(d.id)) for d in ready.allocator.devices
    }
    selector = f'{{job_name="{ALLOCATOR_JOB}"}}'

    def allocating() -> dict[str, float] | None:
        # A 5 s window that a busy host scraped once holds one value, whose rate is 0 until the
        # next scrape: the test waits for every device's rate to show
        found = ready.prometheus.values(f"rate(xmon_job_device_allocations_total{selector}[5s])")
        every = len(found) == len(ready.allocator.devices) and min(found.values(), default=0) > 0
        return found if every else None

    rates = wait_for(allocating, 60, "every device's allocation rate above 0", interval=1)
    assert len(rates) == len(ready.allocator.devices), rates
    fragmentation = ready.prometheus.values(f"xmon_job_device_memory_fragmentation_ratio{selector}")
    assert fragmentation and all(0 < v < 1 for v in fragmentation.values()), fragmentation


def test_hardware_only_expressions(ready: Stack) -> None:
    """What this machine cannot show: listed, so a GPU (or TPU) run knows what to check."""
    hardware = [(w, e) for w, e in _dashboard_exprs() + _alert_parts() if needs(e) == "hardware"]
    checked = [(w, e) for w, e in hardware if _expected(ready, e) or ready.query(e)]
    owed = sorted({w for w, e in hardware if (w, e) not in checked})
    if ready.tpu:
        assert checked, "the fake TPU should make some hardware expressions checkable"
    if owed:
        fake = f"{len(checked)} returned data from the fake TPU" if ready.tpu else "no fake TPU"
        pytest.skip(f"{len(owed)} hardware-only queries need a GPU's NVML collector"
                    f"{'' if ready.tpu else ' or a TPU'} ({fake}): " + "; ".join(owed))  # fmt: skip

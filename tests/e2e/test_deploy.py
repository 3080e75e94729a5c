"""Fleet deployment: the Kubernetes DaemonSet and PodMonitor, the Prometheus scrape configs
(promtool, and their relabelling run by a real Prometheus against a real daemon), the image."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.procs import Daemon, Prometheus, free_port, prometheus_binary, spawn, wait_for

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_CONFIGS = sorted((DEPLOY / "prometheus").glob("*.yml"))
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool")


def _without_kubernetes(config: dict[str, Any], targets: list[dict[str, Any]]) -> dict[str, Any]:
    """Debian's Prometheus is built without Kubernetes service discovery: give the scrape job
    static targets carrying the labels Kubernetes SD would attach, keep everything else."""
    out = copy.deepcopy(config)
    for job in out["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = targets
    return out


K8S_TARGETS = [{"targets": ["127.0.0.1:1"], "labels": {
    "__meta_kubernetes_pod_label_app_kubernetes_io_name": "xmon",
    "__meta_kubernetes_pod_container_port_name": "metrics",
    "__meta_kubernetes_pod_node_name": "gke-tpu-node-1",
    "__meta_kubernetes_node_label_cloud_google_com_gke_nodepool": "tpu-v5e-pool",
    "__meta_kubernetes_node_label_cloud_google_com_gke_tpu_topology": "4x4"}}]  # fmt: skip


@needs_promtool
@pytest.mark.parametrize("path", PROMETHEUS_CONFIGS, ids=lambda p: p.stem)
def test_promtool_check_config(tmp_path: Path, path: Path) -> None:
    config = yaml.safe_load(path.read_text())
    if "kubernetes" in path.stem:
        assert config["scrape_configs"][0]["kubernetes_sd_configs"][0]["role"] == "pod"
        config = _without_kubernetes(config, K8S_TARGETS)
    checked = tmp_path / path.name
    checked.write_text(yaml.safe_dump(config))
    result = subprocess.run(["promtool", "check", "config", str(checked)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _start(workdir: Path, config: dict[str, Any]) -> Prometheus:
    binary = prometheus_binary()
    assert binary
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    cmd = [binary, f"--config.file={workdir / 'prometheus.yml'}",
           f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
           "--log.level=warn"]  # fmt: skip
    proc = spawn(cmd, workdir / "prometheus.log", {})
    return Prometheus(proc.popen, proc.log_path, f"http://127.0.0.1:{port}")


def test_scrape_configs_relabel_a_real_daemon(tmp_path: Path, daemon: Daemon) -> None:
    """The Kubernetes job keeps only xmon's metrics port and names the instance after the
    node; the static job names it after the host, without the port."""
    if prometheus_binary() is None:
        pytest.skip("prometheus not installed (apt-get install -y prometheus)")
    address = f"127.0.0.1:{daemon.metrics_port}"
    with urllib.request.urlopen(f"http://{address}/", timeout=5) as response:
        assert response.status == 200  # the DaemonSet's probe path
    good = copy.deepcopy(K8S_TARGETS[0]) | {"targets": [address]}
    decoy = copy.deepcopy(good)
    decoy["labels"]["__meta_kubernetes_pod_container_port_name"] = "debug"
    k8s = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-kubernetes.yml").read_text())
    static = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-static.yml").read_text())
    job = static["scrape_configs"][0] | {"job_name": "xmon-static", "file_sd_configs": []}
    job["static_configs"] = [{"targets": [address]}]
    job.pop("scrape_timeout")  # 10 s does not fit the test's 1 s interval
    config = _without_kubernetes(k8s, [good, decoy])
    config.pop("remote_write")
    config |= {"rule_files": [], "global": {"scrape_interval": "1s"}}
    config["scrape_configs"].append(job)
    prom = _start(tmp_path / "prom", config)
    try:
        expected = {("xmon", "gke-tpu-node-1", "tpu-v5e-pool"), ("xmon-static", "127.0.0.1", "")}

        def scraped() -> bool:
            assert prom.alive(), prom.log()
            up = prom.query("up == 1")
            return {(s["metric"]["job"], s["metric"]["instance"],
                     s["metric"].get("nodepool", "")) for s in up} == expected  # fmt: skip

        wait_for(scraped, 60, "both scrape jobs to be up with relabelled targets", interval=0.5)
        with urllib.request.urlopen(f"{prom.url}/api/v1/targets", timeout=5) as response:
            targets = json.load(response)["data"]
        assert len(targets["activeTargets"]) == 2 and len(targets["droppedTargets"]) == 1
        assert prom.query('xmon_up{job="xmon", instance="gke-tpu-node-1", tpu_topology="4x4"}')
    finally:
        prom.stop()

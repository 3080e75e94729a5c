"""Fleet deployment: the Kubernetes DaemonSet and PodMonitor, the Prometheus scrape configs
(promtool, and their relabelling run by a real Prometheus against a real daemon), the image."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from xmon.cli.main import build_parser
from xmon.config import load_config
from xmon.wire import paths

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def manifests(name: str) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())
    return {doc["kind"]: doc for doc in docs if doc}


def daemonset() -> dict[str, Any]:
    return manifests("xmon-daemonset.yaml")["DaemonSet"]


def container() -> dict[str, Any]:
    (only,) = daemonset()["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_daemonset_runs_the_daemon_with_flags_it_knows() -> None:
    parser, _ = build_parser()
    args = parser.parse_args(container()["args"])
    assert args.command == "daemon"
    config = load_config(args, {})
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", paths.DEFAULT_METRICS_PORT)
    assert config.socket_path == paths.SYSTEM_SOCKET_PATH
    assert config.logdir == paths.SYSTEM_LOGDIR
    mounts = {m["mountPath"] for m in container()["volumeMounts"]}
    assert {str(paths.SYSTEM_SOCKET_PATH.parent), str(paths.SYSTEM_LOGDIR.parent)} <= mounts


def test_daemonset_shape() -> None:
    ds = daemonset()
    pod = ds["spec"]["template"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    assert spec["hostPID"] and spec["hostNetwork"]  # job processes; libtpu on localhost
    (port,) = container()["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", paths.DEFAULT_METRICS_PORT)
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port["containerPort"])
    assert container()["readinessProbe"]["httpGet"] == {"path": "/", "port": "metrics"}
    security = container()["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"] and not security.get("privileged")
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"]
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"/run/xmon", "/var/lib/xmon"}
    tolerated = {t["key"] for t in spec["tolerations"]}
    assert {"google.com/tpu", "nvidia.com/gpu"} <= tolerated


def test_podmonitor_selects_the_daemonset() -> None:
    monitor = manifests("xmon-podmonitor.yaml")["PodMonitor"]
    labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == container()["ports"][0]["name"]


def test_image_builds_from_files_that_exist() -> None:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    for line in lines:
        if line.startswith("COPY "):
            for source in shlex.split(line)[1:-1]:
                assert (REPO / source).exists(), source
    assert f"EXPOSE {paths.DEFAULT_METRICS_PORT}" in lines
    assert 'ENTRYPOINT ["xmon"]' in lines

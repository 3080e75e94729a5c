"""Where this host sits in a multi-host TPU slice: the daemon's ``xmon_slice_info`` labels.

Layers, lowest first (a later layer wins per field):

1. GCE metadata of a TPU VM: the ``tpu-env`` instance attribute (``KEY: 'value'`` lines with
   ``NODE_ID`` (the TPU's name), ``WORKER_ID``, ``ACCELERATOR_TYPE``, ``MEGASCALE_*``) and
   ``worker-network-endpoints`` (one entry per host of the slice). Read only on a host with a
   TPU PCI function (vendor 0x1ae0, a TPU device id) whose worker is not known otherwise, or
   when ``[host] metadata = true``.
2. The TPU runtime's environment, as GKE, JobSet and multislice launchers set it:
   ``MEGASCALE_SLICE_ID``, ``MEGASCALE_NUM_SLICES``, ``TPU_WORKER_ID`` (else
   ``CLOUD_TPU_TASK_ID``), ``TPU_WORKER_HOSTNAMES``, ``TPU_ACCELERATOR_TYPE``.
3. The ``[host]`` table of the config file, then ``XMON_SLICE`` / ``XMON_WORKER``
   (validated by xmon.config into ``DaemonConfig.host``).

Sources for the names: jax ``jax/_src/clusters/cloud_tpu_cluster.py`` (environment first, then
the ``tpu-env`` metadata attribute; ``MEGASCALE_SLICE_ID``, ``MEGASCALE_NUM_SLICES``,
``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``, ``agent-worker-number``,
``worker-network-endpoints``, ``GCE_METADATA_IP``) and pytorch/xla
``torch_xla/_internal/tpu.py`` (``tpu-env`` keys ``ACCELERATOR_TYPE`` and ``WORKER_ID``; the
environment fallbacks ``TPU_ACCELERATOR_TYPE``, ``TPU_WORKER_ID``, ``CLOUD_TPU_TASK_ID``; PCI
vendor ``0x1ae0``).
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xmon.model import SliceInfo

log = logging.getLogger(__name__)

GOOGLE_PCI_VENDOR = "0x1ae0"
# TPU PCI device ids (v2/v3, v4, v5p, v5e, v6e, 7x): torch_xla's list plus tpu-info's. Other
# Google functions (gVNIC, NVMe) on every GCE VM share the vendor id.
TPU_PCI_DEVICES = frozenset({"0x0027", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"})
METADATA_TIMEOUT_SECONDS = 1.0
FIELDS = ("slice", "slice_index", "worker", "num_slices", "num_workers", "accelerator_type")
_INT_FIELDS = frozenset({"slice_index", "worker", "num_slices", "num_workers"})

Fetch = Callable[[str], str | None]  # metadata attribute name -> text, None when absent


def _clean(field: str, raw: object, where: str) -> Any:
    """A field's value, or None (logged) when the runtime handed us something unusable."""
    text = str(raw).strip().strip("'\"")
    if not text:
        return None
    if field not in _INT_FIELDS:
        return text
    if text.isdigit():
        return int(text)
    log.warning("ignoring %s: %s is not a non-negative integer", where, text)
    return None


def from_runtime_env(env: Mapping[str, str]) -> dict[str, Any]:
    """Fields from the environment the TPU runtime and its launchers set."""
    names = {
        "slice_index": ("MEGASCALE_SLICE_ID",),
        "num_slices": ("MEGASCALE_NUM_SLICES",),
        "worker": ("TPU_WORKER_ID", "CLOUD_TPU_TASK_ID"),
        "accelerator_type": ("TPU_ACCELERATOR_TYPE",),
    }
    out: dict[str, Any] = {}
    for field, variables in names.items():
        for var in variables:
            value = _clean(field, env.get(var, ""), f"environment {var}")
            if value is not None:
                out[field] = value
                break
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if hosts:
        out["num_workers"] = len(hosts)
    return out


def parse_tpu_env(text: str) -> dict[str, Any]:
    """Fields from the ``tpu-env`` metadata attribute (``KEY: 'value'`` per line)."""
    keys = {
        "NODE_ID": "slice",
        "WORKER_ID": "worker",
        "ACCELERATOR_TYPE": "accelerator_type",
        "MEGASCALE_SLICE_ID": "slice_index",
        "MEGASCALE_NUM_SLICES": "num_slices",
    }
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition(":")
        field = keys.get(key.strip())
        if sep and field:
            value = _clean(field, raw, f"tpu-env {key.strip()}")
            if value is not None:
                out[field] = value
    return out


def from_metadata(fetch: Fetch) -> dict[str, Any]:
    """Fields from a TPU VM's GCE metadata; empty when the server is not there."""
    text = fetch("tpu-env")
    if text is None:
        return {}
    out = parse_tpu_env(text)
    endpoints = fetch("worker-network-endpoints")
    if endpoints and endpoints.strip():
        out["num_workers"] = len([e for e in endpoints.split(",") if e.strip()])
    return out


def metadata_fetcher(env: Mapping[str, str], timeout: float = METADATA_TIMEOUT_SECONDS) -> Fetch:
    """Read instance attributes from the GCE metadata server (``GCE_METADATA_IP`` overrides
    the host, as in jax's cloud_tpu_cluster)."""
    host = env.get("GCE_METADATA_IP") or "metadata.google.internal"
    base = f"http://{host}/computeMetadata/v1/instance/attributes/"

    def fetch(key: str) -> str | None:
        request = urllib.request.Request(base + key, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return str(response.read().decode("utf-8", errors="replace"))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            log.debug("no GCE metadata %s: %s", key, exc)
            return None

    return fetch


def _read(path: Path) -> str:
    try:
        return path.read_text().strip().lower()
    except OSError:
        return ""


def has_tpu(sysfs_root: Path) -> bool:
    """True when a TPU chip (a Google PCI function with a TPU device id) is on this host."""
    try:
        functions = list((sysfs_root / "bus" / "pci" / "devices").iterdir())
    except OSError:
        return False
    return any(
        _read(f / "vendor") == GOOGLE_PCI_VENDOR and _read(f / "device") in TPU_PCI_DEVICES
        for f in functions
    )


def _wants_metadata(setting: object, known: Mapping[str, Any], sysfs_root: Path) -> bool:
    if isinstance(setting, bool):
        return setting
    return "worker" not in known and has_tpu(sysfs_root)  # "auto"


def resolve_slice_info(
    host: Mapping[str, Any],
    env: Mapping[str, str],
    sysfs_root: Path = Path("/sys"),
    fetch: Fetch | None = None,
) -> SliceInfo | None:
    """This host's SliceInfo, or None when nothing is known (not a TPU slice, no config).

    ``host`` is the validated ``DaemonConfig.host`` table (config file plus XMON_SLICE and
    XMON_WORKER); ``fetch`` replaces the metadata server (tests).
    """
    layers: list[tuple[str, dict[str, Any]]] = [("env", from_runtime_env(env))]
    configured = {k: host[k] for k in FIELDS if host.get(k) is not None}
    known = {**layers[0][1], **configured}
    if _wants_metadata(host.get("metadata", "auto"), known, sysfs_root):
        layers.insert(0, ("metadata", from_metadata(fetch or metadata_fetcher(env))))
    layers.append(("config", configured))
    merged: dict[str, Any] = {}
    sources: list[str] = []
    for name, values in layers:
        if values:
            merged.update(values)
            sources.append(name)
    if not merged:
        return None
    return SliceInfo(**merged, source=",".join(sources))

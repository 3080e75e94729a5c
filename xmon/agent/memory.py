"""Per-device facts and PJRT allocator stats, read from the agent's own thread.

``Device.memory_stats()`` is a cheap host-side call into the PJRT client: it reads allocator
counters and never synchronises the device. Where it returns None (the CPU backend), the bytes
of live device buffers stand in for "bytes in use" (``xmon.agent.live_memory``).
"""

from __future__ import annotations

from typing import Any

from xmon.agent import internals
from xmon.model import DeviceInfo


def backends_ready() -> bool:
    """True once the user's code has initialised a JAX backend.

    The agent never initialises one itself: doing so at attach time would lock TPU chips early
    and break ``jax.distributed.initialize()``, which must run before any backend exists.
    """
    try:
        return internals.backends_initialized()
    except Exception:  # noqa: BLE001 - a jax without it: assume ready once something compiled
        return True


def local_devices() -> list[Any]:
    import jax

    return list(jax.local_devices())


def _optional_int(device: Any, attribute: str) -> int | None:
    try:
        value = getattr(device, attribute)
    except Exception:  # noqa: BLE001 - attribute raises on backends without it
        return None
    return int(value) if isinstance(value, int) else None


def device_info(device: Any) -> DeviceInfo:
    try:
        coords = tuple(int(c) for c in device.coords)
    except Exception:  # noqa: BLE001 - CPU devices have no coords
        coords = None
    return DeviceInfo(
        id=int(device.id),
        platform=str(device.platform),
        device_kind=str(device.device_kind),
        process_index=int(getattr(device, "process_index", 0)),
        local_hardware_id=_optional_int(device, "local_hardware_id"),
        coords=coords,
        core_on_chip=_optional_int(device, "core_on_chip"),
        slice_index=_optional_int(device, "slice_index"),
    )


def memory_stats(device: Any) -> dict[str, int] | None:
    """All integer keys PJRT reports; None where the backend has no allocator stats."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001
        return None
    if not stats:
        return None
    # Some PJRT plugins report -1 for fields they do not fill: that is "unknown", not a value.
    return {str(k): int(v) for k, v in stats.items() if isinstance(v, int | float) and v >= 0}

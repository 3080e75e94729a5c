"""NVML calls that fail one field, not the pass: an unsupported counter
(``NVMLError_NotSupported``) or a device that fails half-way through a read gives ``None`` for
that field and never takes the other fields, the other devices or the collector down.
"""

from __future__ import annotations

from typing import Any

# Errors that only say "this field does not exist here"; anything else is worth a log line.
_QUIET = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound",
          "NVMLError_NotFound", "NVMLError_NoData")  # fmt: skip


class NvmlPass:
    """Calls NVML for one device in one tick, collecting the unexpected errors it meets."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.errors: list[str] = []
        quiet = (getattr(nv, name, None) for name in _QUIET)
        self._quiet: tuple[type[BaseException], ...] = tuple(c for c in quiet if c is not None)

    def get(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """``nv.<function>(*args)``, or None when the call fails (a missing function too)."""
        try:
            return getattr(self.nv, function)(*args, **kwargs)
        except Exception as exc:  # an NVML error, or an old pynvml without the function
            if not isinstance(exc, (*self._quiet, AttributeError)):
                self.errors.append(f"{function}: {exc or type(exc).__name__}")
            return None

"""What this agent can do on this jax and Python, and why not where it cannot.

Probed once at attach (:func:`xmon.agent.internals.probe`); a capability whose access fails
later (a session that cannot start, a hook that raises) is turned unavailable with that
reason, logged once at WARNING. Reported with every report, so the daemon, /metrics,
``xmon doctor`` and ``xmon top`` say it instead of showing numbers that silently stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from xmon.agent.internals import CAPABILITIES

log = logging.getLogger("xmon.agent")

MAX_REASON_CHARS = 200


class Capabilities:
    def __init__(self, reasons: Mapping[str, str]) -> None:
        self._reasons = {name: reasons.get(name, "") for name in CAPABILITIES}
        self._guard = threading.Lock()
        for name, reason in self._reasons.items():
            if reason:
                log.warning("xmon: %s unavailable: %s", name, reason)

    def available(self, name: str) -> bool:
        return not self._reasons.get(name, "")

    def lost(self, name: str, reason: str) -> None:
        """``name`` stopped working; the first reason stands."""
        with self._guard:
            if self._reasons.get(name, "x"):
                return  # already unavailable, or not a capability
            self._reasons[name] = reason[:MAX_REASON_CHARS] or "failed"
        log.warning("xmon: %s unavailable: %s", name, reason)

    def states(self) -> list[tuple[str, str]]:
        """(capability, reason) in a fixed order; reason "" where available."""
        with self._guard:
            return list(self._reasons.items())

"""Time a job lost to a restart: from the last step of the process that ended to the first step
of the one that took its place (the same job key and process index).

Only a job key that outlives a process can match: one the job declares (``XMON_JOB_KEY``,
``attach(job_key=...)``) or a jax.distributed coordinator's address; an undeclared key names the
process itself. The memory is bounded (``MAX_KEYS``, the least recently ended go first) and
forgets after ``MAX_AGE_SECONDS``.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_KEYS = 4096
MAX_AGE_SECONDS = 7 * 86400.0

RestartKey = tuple[str, int]  # (job key, process index)


class RestartMemory:
    def __init__(self) -> None:
        self._ended: OrderedDict[RestartKey, float] = OrderedDict()  # key -> last step (wall)

    def ended(self, key: RestartKey, last_step_at: float) -> None:
        """A process of ``key`` ended; its last step ended at ``last_step_at``."""
        if last_step_at <= 0:
            return
        self._ended.pop(key, None)
        self._ended[key] = last_step_at
        while len(self._ended) > MAX_KEYS:
            self._ended.popitem(last=False)

    def lost(self, key: RestartKey, first_step_at: float) -> float | None:
        """Seconds from the ended process's last step to this one's first, or None: no process
        of ``key`` ended before this one stepped (or too long ago to be its restart)."""
        previous = self._ended.get(key)
        if previous is None or first_step_at <= 0 or first_step_at < previous:
            return None
        lost = first_step_at - previous
        return lost if lost <= MAX_AGE_SECONDS else None

    def __len__(self) -> int:
        return len(self._ended)

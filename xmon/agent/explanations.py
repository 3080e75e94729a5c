"""jax's own explanation of a recompile, when the job turned ``jax_explain_cache_misses`` on.

With that option jax logs, at WARNING and on the tracing thread, why a jitted function missed
its tracing cache ("TRACING CACHE MISS at train.py:12 ... for train_step defined at train.py:8
... different input types: * at x, now f32[9] and before f32[8]"). In jax 0.10 the logger is
``jax._src.interpreters.partial_eval`` (its ``explain`` function). A filter on that logger only
(one that passes every record) keeps the latest text per function until the compile that
follows takes it (xmon.agent.compiles), so it lands in the recompile finding's evidence beside
xmon's own diff. A filter rather than a handler: a handler would be one the job did not have,
and Python's last-resort printing of warnings to stderr stops once any handler exists, so the
job's own output would change. With the option off jax logs nothing and this costs nothing.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict

from xmon.agent import internals

LOGGER = internals.EXPLAIN_LOGGER
MARK = "TRACING CACHE MISS"
MAX_TEXT = 1024
MAX_PENDING = 256  # functions with an explanation not yet taken by a compile
_FUNCTION = re.compile(r"^\s*(?:for (\S+) |never seen function:\s*\n\s*(\S+) )", re.M)


def function_of(message: str) -> str | None:
    """The Python name jax's explanation is about (``train_step``)."""
    found = _FUNCTION.search(message)
    return (found[1] or found[2]) if found else None


def one_line(message: str) -> str:
    """The explanation on one line: its lines joined, indentation dropped."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return " ".join(lines)[:MAX_TEXT]


class CacheMissExplanations(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._pending: OrderedDict[str, str] = OrderedDict()
        self._guard = threading.Lock()
        self._logger: logging.Logger | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        """Note an explanation; every record goes on as it would without xmon."""
        try:
            self._note(record)
        except Exception:  # noqa: BLE001 - a log call must never fail the user's jit
            pass
        return True

    def _note(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            return
        message = record.getMessage()
        if not message.startswith(MARK):
            return
        name = function_of(message)
        if name is None:
            return
        with self._guard:
            self._pending.pop(name, None)
            self._pending[name] = one_line(message)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)

    def take(self, module_name: str) -> str:
        """The explanation logged for the function compiled as ``module_name`` (``jit_f``)
        since the last take, or ""."""
        name = module_name.removeprefix("jit_")
        with self._guard:
            return self._pending.pop(name, "")

    def install(self) -> None:
        self._logger = logging.getLogger(LOGGER)
        self._logger.addFilter(self)

    def uninstall(self) -> None:
        if self._logger is not None:
            self._logger.removeFilter(self)
            self._logger = None

"""Optimized HLO text of the job's compiled programs, kept compressed and bounded.

``jaxlib``'s ``LoadedExecutable`` cannot be weakly referenced, and holding executables would keep
programs alive that jax has dropped, so the text is taken once per program: the compile hook
hands the executable over without doing any work (O(1) on the user's compiling thread), and the
agent's own thread renders the text, gzips it and lets the executable go. The store keeps at most
``max_bytes`` of compressed text, evicting the oldest programs first; a program whose compressed
text alone exceeds ``max_program_bytes`` (it would not fit a gRPC message) is not kept.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict, deque
from typing import Any

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_PROGRAM_BYTES = 12 * 1024 * 1024  # under the 16 MiB gRPC message limit
DEFAULT_MAX_PENDING = 64


def hlo_text(executable: Any) -> str:
    """All HLO modules of an executable as text (one for SPMD programs, more for MPMD)."""
    return "\n".join(module.to_string() for module in executable.hlo_modules())


class HloStore:
    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_program_bytes: int = DEFAULT_MAX_PROGRAM_BYTES,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._lock = threading.Lock()
        self._pending: deque[tuple[str, Any]] = deque(maxlen=max_pending)
        self._texts: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._max_bytes = max_bytes
        self._max_program_bytes = max_program_bytes
        self.too_large: set[str] = set()
        self.dropped = 0  # executables that went past the pending queue unrendered

    def offer(self, fingerprint: str, executable: Any) -> None:
        """Called on the compiling thread: remember the executable until the agent renders it."""
        with self._lock:
            if fingerprint in self._texts:
                return
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append((fingerprint, executable))

    def drain(self, limit: int = 16) -> int:
        """Render up to ``limit`` pending programs (agent thread); returns how many."""
        done = 0
        while done < limit:
            with self._lock:
                if not self._pending:
                    break
                fingerprint, executable = self._pending.popleft()
            self._render(fingerprint, executable)
            done += 1
        return done

    def _render(self, fingerprint: str, executable: Any) -> None:
        try:
            data = gzip.compress(hlo_text(executable).encode(), compresslevel=6)
        except Exception:  # noqa: BLE001 - a backend without HLO modules: nothing to keep
            return
        with self._lock:
            if len(data) > self._max_program_bytes:
                self.too_large.add(fingerprint)
                return
            old = self._texts.pop(fingerprint, None)
            self._size -= len(old) if old is not None else 0
            self._texts[fingerprint] = data
            self._size += len(data)
            while self._size > self._max_bytes and len(self._texts) > 1:
                _, evicted = self._texts.popitem(last=False)
                self._size -= len(evicted)

    def get(self, fingerprint: str) -> bytes | None:
        """The gzip of the program's HLO text, rendering it now if it is still pending."""
        with self._lock:
            pending = [item for item in self._pending if item[0] == fingerprint]
            for item in pending:
                self._pending.remove(item)
        for item in pending:
            self._render(*item)
        with self._lock:
            return self._texts.get(fingerprint)

    @property
    def size_bytes(self) -> int:
        return self._size

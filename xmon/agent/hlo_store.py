"""Optimized HLO text of the job's compiled programs, kept compressed and bounded.

``jaxlib``'s ``LoadedExecutable`` cannot be weakly referenced, and holding executables would keep
programs alive that jax has dropped, so the text is taken once per program: the compile hook
hands the executable over without doing any work (O(1) on the user's compiling thread), and the
agent's own thread renders the text, gzips it and lets the executable go. The store keeps at most
``max_bytes`` of compressed text, evicting the oldest programs first; a program whose compressed
text alone exceeds ``max_program_bytes`` (it would not fit a gRPC message) is not kept.

The same pass reads each executable's HLO module ids (``HloModuleProto.id``), which the profiler
records as ``program_id`` on every op it traces: the daemon matches them to count executions in
captured traces. Every executable is read, also one whose fingerprint is already known, because a
recompiled program gets new module ids.

The serialized ``HloModuleProto`` s of each new fingerprint also go to ``cost_listener`` (the
compile recorder, which counts loop bodies once per trip from them), once, with the executable
whose client can cost parts of them; an executable dropped unread goes there with none, so its
record stops waiting.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from xmon.wire.proto import hlo_pb2

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_PROGRAM_BYTES = 12 * 1024 * 1024  # under the 16 MiB gRPC message limit
DEFAULT_MAX_PENDING = 64
MAX_COSTED = 8192  # fingerprints remembered as costed; past it, a recompile is costed again


def hlo_module_id(serialized: bytes) -> int:
    """``id`` of a serialized ``HloModuleProto`` (0 where absent: proto3 does not write a zero,
    and the process's first module has id 0)."""
    return int(hlo_pb2.HloModuleProto.FromString(serialized).id)


def serialized_modules(modules: list[Any]) -> list[bytes]:
    """The executable's HLO modules as serialized ``HloModuleProto`` s; a module that cannot be
    serialized (a backend or jaxlib without the proto) is left out."""
    serialized = []
    for module in modules:
        try:
            serialized.append(bytes(module.as_serialized_hlo_module_proto()))
        except Exception:  # noqa: BLE001
            continue
    return serialized


def module_ids(serialized: list[bytes]) -> tuple[int, ...]:
    """Ids of serialized HLO modules."""
    return tuple(hlo_module_id(module) for module in serialized)


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
        # Receives (fingerprint, module ids) of every rendered executable, e.g. the recorder.
        self.ids_listener: Callable[[str, tuple[int, ...]], None] | None = None
        # Receives (fingerprint, executable, serialized HLO modules or None) once per fingerprint.
        self.cost_listener: Callable[[str, Any, list[bytes] | None], None] | None = None
        self._costed: OrderedDict[str, None] = OrderedDict()

    def offer(self, fingerprint: str, executable: Any) -> None:
        """Called on the compiling thread: remember the executable until the agent renders it."""
        dropped = None
        with self._lock:
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
                dropped = self._pending.popleft()
            self._pending.append((fingerprint, executable))
            if dropped is not None and any(f == dropped[0] for f, _ in self._pending):
                dropped = None  # a later executable of the same program is still to be read
        if dropped is not None:
            self._cost(dropped[0], None, None)  # O(1): the recorder only stops waiting

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
            modules = list(executable.hlo_modules())
        except Exception:  # noqa: BLE001 - a backend without HLO modules: nothing to keep
            self._cost(fingerprint, None, None)
            return
        serialized = serialized_modules(modules)
        self._report_ids(fingerprint, serialized)
        with self._lock:
            known = fingerprint in self._texts or fingerprint in self.too_large
            wants_cost = self.cost_listener is not None and fingerprint not in self._costed
        if not known:
            try:
                self._keep(fingerprint, "\n".join(module.to_string() for module in modules))
            except Exception:  # noqa: BLE001 - the text is for people; the cost does not need it
                pass
        if wants_cost:
            readable = serialized if len(serialized) == len(modules) and serialized else None
            self._cost(fingerprint, executable if readable else None, readable)

    def _cost(self, fingerprint: str, executable: Any, modules: list[bytes] | None) -> None:
        listener = self.cost_listener
        if listener is None:
            return
        if modules is not None:
            with self._lock:
                self._costed[fingerprint] = None
                while len(self._costed) > MAX_COSTED:
                    self._costed.popitem(last=False)
        try:
            listener(fingerprint, executable, modules)
        except Exception:  # noqa: BLE001 - never let the agent thread (or a compile) die
            pass

    def _keep(self, fingerprint: str, text: str) -> None:
        try:
            data = gzip.compress(text.encode(), compresslevel=6)
        except Exception:  # noqa: BLE001
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

    def _report_ids(self, fingerprint: str, serialized: list[bytes]) -> None:
        listener = self.ids_listener
        if listener is None:
            return
        ids = module_ids(serialized)
        if ids:
            try:
                listener(fingerprint, ids)
            except Exception:  # noqa: BLE001 - never let the agent thread die
                pass

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

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
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.unknown_fields import UnknownFieldSet

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_PROGRAM_BYTES = 12 * 1024 * 1024  # under the 16 MiB gRPC message limit
DEFAULT_MAX_PENDING = 64
_HLO_MODULE_ID_FIELD = 5  # HloModuleProto.id (xla/service/hlo.proto), an int64
_VARINT = 0


def hlo_text(executable: Any) -> str:
    """All HLO modules of an executable as text (one for SPMD programs, more for MPMD)."""
    return "\n".join(module.to_string() for module in executable.hlo_modules())


def hlo_module_id(serialized: bytes) -> int:
    """``id`` of a serialized ``HloModuleProto``, read without XLA's .proto: parsed as an empty
    message, every field is unknown, and protobuf still decodes the top-level ones. Absent
    means 0 (proto3 does not write a zero; the process's first module has id 0)."""
    message = empty_pb2.Empty()
    message.ParseFromString(serialized)
    module_id = 0
    for item in UnknownFieldSet(message):
        if item.field_number == _HLO_MODULE_ID_FIELD and item.wire_type == _VARINT:
            value = int(item.data)  # the last one wins, as when protobuf parses the field
            module_id = value - (1 << 64) if value >= 1 << 63 else value  # int64 on the wire
    return module_id


def module_ids(modules: list[Any]) -> tuple[int, ...]:
    """Ids of the executable's HLO modules; a module that cannot be serialized is skipped."""
    ids = []
    for module in modules:
        try:
            ids.append(hlo_module_id(module.as_serialized_hlo_module_proto()))
        except Exception:  # noqa: BLE001 - a backend or jaxlib without the proto: no id
            continue
    return tuple(ids)


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

    def offer(self, fingerprint: str, executable: Any) -> None:
        """Called on the compiling thread: remember the executable until the agent renders it."""
        with self._lock:
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
            modules = list(executable.hlo_modules())
        except Exception:  # noqa: BLE001 - a backend without HLO modules: nothing to keep
            return
        self._report_ids(fingerprint, modules)
        with self._lock:
            if fingerprint in self._texts or fingerprint in self.too_large:
                return  # recompiled: its text is known already
        try:
            text = "\n".join(module.to_string() for module in modules)
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

    def _report_ids(self, fingerprint: str, modules: list[Any]) -> None:
        listener = self.ids_listener
        if listener is None:
            return
        ids = module_ids(modules)
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

"""Keeping the daemon's resident memory small where the C library is glibc.

glibc gives threads that allocate their own malloc arenas (up to eight per core). gRPC's and the
collectors' threads allocate little and rarely, yet each arena keeps its own pages, mostly
free: in an idle daemon with four agents, about 1.5 MiB of its ~50 MiB. One arena serves these
threads (the GIL serialises most of their work anyway; 64 agents at 10 Hz show no difference),
and ``malloc_trim`` hands pages freed since back to the system. With another C library both are
no-ops.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from collections.abc import MutableMapping
from typing import Any

log = logging.getLogger("xmon.daemon")

_M_ARENA_MAX = -8  # mallopt parameter, glibc's malloc.h
ARENAS = 1
TRIM_EVERY_SECONDS = 10.0
GRPC_POLLER = "poll"


def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(None)  # the C library this process already uses
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    return libc


_LIBC = _glibc()


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap malloc arenas; call before the daemon starts threads. True when applied."""
    if _LIBC is None:
        return False
    applied = bool(_LIBC.mallopt(_M_ARENA_MAX, arenas))
    if not applied:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return applied


def trim() -> bool:
    """Return free heap pages to the system. True when some were released."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))


def release(collect: bool) -> bool:
    """Hand memory back after a flood subsides. ``collect`` (streams have closed since the last
    call): objects of closed streams that sit in reference cycles (a cancelled call's exception
    holds its traceback and frames) wait for a full collection, which the interpreter starts
    only after many new allocations; one runs here first (milliseconds), so that their pages
    are free when ``malloc_trim`` runs."""
    if collect:
        gc.collect()
    return trim()


def choose_grpc_poller(environ: MutableMapping[str, str] = os.environ) -> None:
    """Serve connections with gRPC's ``poll`` poller unless ``GRPC_POLL_STRATEGY`` says
    otherwise; call before gRPC is imported.

    gRPC's default on Linux (``epoll1``) keeps each connection's descriptor state in a free list
    it never hands back, spread thinly over the heap: after 2,000 idle connections had come and
    gone, the daemon kept 16 MiB more than before, none of it in use. ``poll`` frees that
    state with the connection (2-3 MiB kept). A ``poll()`` call costs a little per open
    descriptor, which is negligible at the daemon's scale (benchmarks/daemon_cost.py)."""
    environ.setdefault("GRPC_POLL_STRATEGY", GRPC_POLLER)

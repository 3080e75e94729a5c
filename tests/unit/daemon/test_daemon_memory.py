"""The daemon's malloc settings: applied on glibc, harmless elsewhere."""

from __future__ import annotations

import pytest

from xmon.daemon import memory


def test_without_glibc_both_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_LIBC", None)
    assert memory.limit_arenas() is False
    assert memory.trim() is False


def test_the_daemon_uses_grpc_s_poll_poller_unless_the_user_chose_one() -> None:
    environ: dict[str, str] = {}
    memory.choose_grpc_poller(environ)
    assert environ == {"GRPC_POLL_STRATEGY": "poll"}
    chosen = {"GRPC_POLL_STRATEGY": "epoll1"}
    memory.choose_grpc_poller(chosen)
    assert chosen == {"GRPC_POLL_STRATEGY": "epoll1"}

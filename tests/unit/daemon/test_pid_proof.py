"""The pid proof's two sides (xmon.daemon.proof, xmon.agent.proof) on this machine's kernel:
a thread shows a token as its name, anyone reads it, and no other process can set it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from xmon.agent.proof import can_prove, show_token
from xmon.daemon.proof import TOKEN_CHARS, new_token, shows_token

pytestmark = pytest.mark.skipif(not can_prove(), reason="thread names are read on Linux")


def test_tokens_fit_a_thread_name_and_differ() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == TOKEN_CHARS and t.isascii() and t.isalnum() for t in tokens)


def test_a_thread_shows_the_token_until_its_name_is_given_back() -> None:
    token = new_token()
    before = Path("/proc/thread-self/comm").read_text()
    restore = show_token(token)
    assert restore is not None
    try:
        assert shows_token(os.getpid(), token) is True
        assert shows_token(os.getpid(), new_token()) is False
    finally:
        restore()
    assert Path("/proc/thread-self/comm").read_text() == before
    assert shows_token(os.getpid(), token) is False


def test_a_token_shown_by_any_thread_of_the_process_counts() -> None:
    token, shown, finish = new_token(), threading.Event(), threading.Event()

    def worker() -> None:
        restore = show_token(token)
        shown.set()
        finish.wait(10)
        if restore is not None:
            restore()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert shown.wait(10) and shows_token(os.getpid(), token) is True
    finally:
        finish.set()
        thread.join()


def test_a_process_that_is_not_there_cannot_be_read(tmp_path: Path) -> None:
    assert shows_token(4_194_304, new_token()) is None
    assert shows_token(1, new_token(), proc=tmp_path) is None

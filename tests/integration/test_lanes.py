"""tests/integration is marked integration by its directory, and may open sockets (not start
processes: those tests are in tests/e2e)."""

from __future__ import annotations

import socket

import pytest


def test_an_integration_test_can_open_a_socket(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is not None
    assert request.node.get_closest_marker("e2e") is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))

"""Unit tests are pure: any attempt to open a network connection fails the test."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


class NetworkUseError(RuntimeError):
    """A unit test tried to reach the network."""


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(self: socket.socket, address: object) -> None:
        raise NetworkUseError(f"unit tests must not open sockets (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield

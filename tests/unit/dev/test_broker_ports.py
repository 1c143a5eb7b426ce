"""A broker's listeners never share a port (kafkalake.dev.broker.free_port)."""

from __future__ import annotations

import socket

import pytest

from kafkalake.dev import broker


def test_a_port_to_avoid_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel handed back the port it had just given: the second pick must not take it.
    ports = iter([40001, 40001, 40002])

    class OneSocket:
        def __enter__(self) -> OneSocket:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(ports)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(socket, "socket", OneSocket)
    first = broker.free_port()
    assert (first, broker.free_port(avoid={first})) == (40001, 40002)

"""free_port: ports for servers the harness starts later, out of the way of outgoing
connections' local ports."""

from __future__ import annotations

import socket

import pytest

from loadwise_dev import controlplane
from loadwise_dev.controlplane import ephemeral_ports, free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low, _ = ephemeral_ports()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # nothing holds it


def test_a_port_something_listens_on_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = int(held.getsockname()[1])
        held.listen()
        monkeypatch.setattr(controlplane.random, "randint", lambda a, b: taken)
        monkeypatch.setattr(controlplane, "ephemeral_ports", lambda: (taken + 1, 60999))
        port = free_port()  # every pick below the range is the held one: the kernel's choice
    assert port != taken


def test_without_room_below_the_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controlplane, "ephemeral_ports", lambda: (2048, 65000))
    ports = {free_port() for _ in range(5)}
    assert len(ports) == 5 and all(p >= 2048 for p in ports)

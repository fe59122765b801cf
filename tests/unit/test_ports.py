"""tests/ports.py: the ports handed to the daemons the tests start never repeat and are
never one something already listens on (the kernel's port 0 gave two daemons one port)."""

from __future__ import annotations

import socket

from tests import ports


def test_ports_never_repeat_and_stay_below_the_ephemeral_range():
    got = [ports.free_port() for _ in range(300)]
    assert len(set(got)) == len(got)
    assert all(ports.LOW <= p < ports.HIGH for p in got)


def test_a_port_something_listens_on_is_passed_over(monkeypatch):
    busy = ports.free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", busy))
        taken.listen(1)
        monkeypatch.setattr(ports, "_given", set())  # as if another process had taken it
        monkeypatch.setattr(ports, "_next", busy)
        assert ports.free_port() != busy

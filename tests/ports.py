"""Free TCP ports on 127.0.0.1 for the daemons the tests and benchmarks start
(gpuq's server, etcd, the API server, controllers, kwok, Kueue, Slurm).

Asking the kernel for port 0 and closing the socket is racy twice over: the kernel may
hand the same port to the next call (``etcd, peer, api = free_port(), free_port(), ...``
once gave two daemons one port: "address already in use"), and it hands its ephemeral
ports (32768-60999, ``net.ipv4.ip_local_port_range``) to every outgoing connection too,
so a client socket of another test can take the port before the daemon binds it.

Here each process walks its own sequence below the ephemeral range, starting at an
offset drawn from its pid, and never hands a port out twice; a port is handed out only
if it can be bound (and listened on) at that moment. Two processes (two pytest-xdist
workers, a benchmark beside a test run) then meet only if their sequences cross, and
even then the bind check skips a port the other has taken by then.
"""

from __future__ import annotations

import os
import socket
import threading

#: below the kernel's ephemeral range (ip_local_port_range starts at 32768)
LOW, HIGH = 20000, 32000
_lock = threading.Lock()
_next = LOW + (os.getpid() * 997) % (HIGH - LOW)
_given: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before."""
    global _next
    with _lock:
        for _ in range(HIGH - LOW):
            port = _next
            _next = LOW + (_next + 1 - LOW) % (HIGH - LOW)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {LOW}-{HIGH}")

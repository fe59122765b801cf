"""A TCP proxy that can go silent: a path that accepts bytes and delivers nothing.

:meth:`Proxy.blackhole` stops forwarding in both directions without closing anything (no
FIN, no RST): the proxy's kernel still acknowledges what arrives, as a hung pgbouncer, a
cloud SQL proxy whose backend vanished, or a middlebox that lost its route does, so
neither side's TCP keepalives nor ``tcp_user_timeout`` notice. Used by the leader tests
and bench/failover.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.silent = threading.Event()
        self._socks: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self) -> None:
        """From now on nothing passes, and nothing is closed."""
        self.silent.set()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.silent.is_set():
                self._socks.append(client)  # accepted, never answered
                continue
            upstream = socket.create_connection(self.target)
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._closing:
            if self.silent.is_set():
                self.silent.wait(0.2)  # hold the bytes, keep the sockets open
                if self._closing:
                    return
                continue
            try:
                src.settimeout(0.2)
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data or self.silent.is_set():
                if not data:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                continue  # read just as it went silent: swallowed
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closing = True
        self.silent.set()
        for s in [self.listener, *self._socks]:
            with contextlib.suppress(OSError):
                s.close()


def leader_blackhole_round(database_url: str, options: dict[str, str], check_timeout_s: float,
                           timeout_s: float = 60.0) -> tuple[float | None, float | None]:
    """Two electors on one lock, the leader's session through a :class:`Proxy` that
    then goes silent while the leader keeps re-checking (as its passes do before every
    bind and stop). Returns the seconds from the blackhole until the old leader stopped
    acting (its check failed) and until the standby led; None where it never happened
    within ``timeout_s``."""
    import time
    import uuid

    from sqlalchemy.engine import make_url

    from app.dispatch.leader import LeaderElector
    from app.store.db import normalize_url

    url = make_url(normalize_url(database_url))
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    via = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    lock = f"gpuq-bh-{uuid.uuid4().hex[:8]}"
    old = LeaderElector(via, lock, options=options, check_timeout_s=check_timeout_s)
    new = LeaderElector(database_url, lock, options=options, check_timeout_s=check_timeout_s)
    stopped: list[float] = []
    try:
        assert old.ensure() and not new.ensure()
        t0 = time.monotonic()
        proxy.blackhole()

        def passes() -> None:
            while old.still_leader():
                time.sleep(0.05)
            stopped.append(time.monotonic() - t0)

        threading.Thread(target=passes, daemon=True).start()
        taken = None
        while time.monotonic() - t0 < timeout_s:
            if new.ensure():
                taken = time.monotonic() - t0
                break
            time.sleep(0.05)
        while not stopped and time.monotonic() - t0 < timeout_s:
            time.sleep(0.05)
        return (stopped[0] if stopped else None), taken
    finally:
        new.release()
        proxy.close()

"""Wake loops on Postgres NOTIFY (a job was submitted or cancelled).

Submitting stays one insert and a NOTIFY; this listener turns the NOTIFY
into an immediate dispatcher pass instead of waiting for the next tick.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from gpuq.dispatch.base import LoopService
from gpuq.store.jobs import NOTIFY_CHANNEL

log = logging.getLogger("gpuq.loops.notify")


class NotifyListener:
    def __init__(
        self, conninfo: str, loops: list[LoopService], channel: str = NOTIFY_CHANNEL
    ) -> None:
        self.conninfo = conninfo
        self.loops = loops
        self.channel = channel
        self._stop = threading.Event()
        self.received = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    while not self._stop.is_set():
                        for _n in conn.notifies(timeout=1.0):
                            self.received += 1
                            for loop in self.loops:
                                loop.wake()
            except Exception:
                log.exception("LISTEN %s failed; retrying in 2 s", self.channel)
                self._stop.wait(2.0)

    def start_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="gpuq-notify", daemon=True)
        t.start()
        return t

"""Wake loops on Postgres NOTIFY (a job was submitted or cancelled).

Submitting stays one insert and a NOTIFY; this listener turns the NOTIFY
into an immediate dispatcher pass instead of waiting for the next tick.

When the database is down or failing over, every replica's listener reconnects;
a constant delay would bring them all back in step against a server that is
recovering. The delays back off exponentially with jitter (app/domain/backoff.py,
client-go's shape: 0.8 s doubling to 30 s, plus up to as much again at random), and
start over once a LISTEN is in place. Missing a NOTIFY costs nothing but latency:
the loops still run on their own interval.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from app.dispatch.loops import LoopService
from app.domain.backoff import Backoff
from app.store.jobs import NOTIFY_CHANNEL

log = logging.getLogger("gpuq.loops.notify")


class NotifyListener:
    def __init__(
        self,
        conninfo: str,
        loops: list[LoopService],
        channel: str = NOTIFY_CHANNEL,
        backoff: Backoff | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.loops = loops
        self.channel = channel
        self.backoff = backoff or Backoff()
        self._stop = threading.Event()
        self.received = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.backoff.reset()  # listening again: the next failure starts over
                    while not self._stop.is_set():
                        for _n in conn.notifies(timeout=1.0):
                            self.received += 1
                            for loop in self.loops:
                                loop.wake()
            except Exception:
                delay = self.backoff.next()
                log.exception("LISTEN %s failed (%d in a row); retrying in %.1f s",
                              self.channel, self.backoff.failures, delay)
                self._stop.wait(delay)

    def start_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="gpuq-notify", daemon=True)
        t.start()
        return t

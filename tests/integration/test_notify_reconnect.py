"""The NOTIFY listener's reconnect backs off exponentially with jitter, and starts over
once it listens again (real PostgreSQL; the waits are recorded, not slept)."""

from __future__ import annotations

import random
import threading

import psycopg
from psycopg.conninfo import make_conninfo

from app.dispatch.loops import LoopService
from app.dispatch.notify import NotifyListener
from app.domain.backoff import Backoff
from app.store.db import psycopg_conninfo
from tests.fakekube.fixtures import wait_until

APP = "gpuq-notify-reconnect-test"
DEAD = "host=127.0.0.1 port=1 dbname=x user=x connect_timeout=1"  # refused at once


class Idle(LoopService):
    name = "idle"

    def __init__(self) -> None:
        super().__init__(interval=3600)

    def run_once(self) -> None:
        pass


class RecordedWaits(threading.Event):
    """The listener's stop event: records each wait between tries and returns at once;
    ``on_wait(n)`` runs after the n-th."""

    def __init__(self, on_wait) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.on_wait = on_wait

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and timeout >= 0.5:  # a retry delay, not the notify poll
            self.waits.append(timeout)
            self.on_wait(len(self.waits))
        return self.is_set()


def test_reconnects_back_off_with_jitter_and_start_over_after_a_listen(engine):
    """Four refused connections wait 0.8-1.6, 1.6-3.2, 3.2-6.4, 6.4-12.8 s (doubling, up to
    as much again at random: not the old constant 2 s, which brings every replica back in
    step); then the database answers, the listener listens, its session is killed, and
    the next wait is back at 0.8-1.6 s."""
    good = make_conninfo(psycopg_conninfo(engine.url.render_as_string(hide_password=False)),
                         application_name=APP)
    listener = NotifyListener(DEAD, [Idle()])
    listener.backoff = Backoff(rng=random.Random(7))

    def on_wait(n: int) -> None:
        if n == 4:
            listener.conninfo = good
        if n == 5:
            listener.stop()

    listener._stop = RecordedWaits(on_wait)
    t = threading.Thread(target=listener.run, daemon=True)
    t.start()
    try:
        admin = psycopg_conninfo(engine.url.render_as_string(hide_password=False))
        with psycopg.connect(admin, autocommit=True) as c:
            def listening() -> bool:
                return bool(c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND query LIKE 'LISTEN%%'", (APP,)).fetchone()[0])
            wait_until(listening, 20)
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s", (APP,))
        t.join(timeout=20)
        assert not t.is_alive()
    finally:
        listener.stop()
    waits = listener._stop.waits
    assert len(waits) == 5, waits
    for i, w in enumerate(waits[:4]):
        base = 0.8 * 2**i
        assert base <= w <= 2 * base, (i, waits)
    assert len({round(w / (0.8 * 2**i), 6) for i, w in enumerate(waits[:4])}) > 1, \
        "no jitter: every replica retries in step"
    assert 0.8 <= waits[4] <= 1.6, f"the backoff did not start over after a LISTEN: {waits}"

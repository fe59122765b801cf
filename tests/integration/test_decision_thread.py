"""One decision thread: the descheduler and the lease reaper decide in the dispatcher's.

The shape of the old race: the descheduler and the lease reaper ran in
threads of their own and called into the dispatcher; whichever lost the
advisory lock invalidated the picture while the dispatcher's thread was
inside ``refresh()`` (``ArgumentError ... None`` in the picture, failed
passes, and full reloads under load). Now they are steps of the
dispatcher's loop: other threads can only wake them. This test hammers
wake-ups from several threads while the loop runs and checks that the
picture is only ever touched by the dispatcher's thread, never by two
threads at once, and never dropped.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

from sqlalchemy.orm import Session

from app.dispatch.descheduler_step import Descheduler
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.lease_reaper import LeaseReaper
from app.dispatch.picture import QueuePicture
from app.domain.spec import JobSpec
from app.store.jobs import submit_jobs
from app.store.snapshot import SnapshotContext
from tests.integration.conftest import job_body


class WatchedPicture(QueuePicture):
    """Records which threads call into the picture, and any overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.callers: set[int] = set()
        self.overlaps = 0
        self.invalidations = 0
        self.refreshes = 0
        self._inside = 0
        self._guard = threading.Lock()

    def _enter(self) -> None:
        with self._guard:
            self._inside += 1
            self.callers.add(threading.get_ident())
            if self._inside > 1:
                self.overlaps += 1

    def _leave(self) -> None:
        with self._guard:
            self._inside -= 1

    def refresh(self, session: Session, now: datetime) -> SnapshotContext:
        self._enter()
        try:
            self.refreshes += 1
            time.sleep(0.005)  # widen the window a concurrent caller would hit
            return super().refresh(session, now)
        finally:
            self._leave()

    def invalidate(self) -> None:
        self._enter()
        try:
            self.invalidations += 1
            super().invalidate()
        finally:
            self._leave()


def test_steps_run_in_the_dispatchers_thread_and_cannot_race_the_picture(
    session_factory, cluster, clock
) -> None:
    with session_factory() as s:
        specs = [JobSpec.model_validate(job_body(name=f"j{i}")) for i in range(30)]
        submit_jobs(s, specs, now=clock())
        s.commit()
    picture = WatchedPicture()
    d = Dispatcher(session_factory, cluster, clock=clock, interval=0.02, picture=picture)
    desched = d.add_step(Descheduler(d, interval=0.01))
    reaper = d.add_step(LeaseReaper(d, interval=0.01))
    loop = threading.Thread(target=d.start, name="dispatcher")
    stop = threading.Event()

    def hammer() -> None:  # what NOTIFY, timers and API calls may do: wake, never run
        while not stop.is_set():
            desched.wake()
            reaper.wake()
            d.wake()
            time.sleep(0.001)

    others = [threading.Thread(target=hammer) for _ in range(3)]
    loop.start()
    for t in others:
        t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and min(desched.passes, reaper.passes, d.passes) < 15:
        time.sleep(0.05)
    stop.set()
    for t in others:
        t.join()
    d.stop()
    loop.join(timeout=30)
    assert not loop.is_alive()
    assert min(desched.passes, reaper.passes, d.passes) >= 15
    assert d.errors == desched.errors == reaper.errors == 0
    assert picture.callers == {loop.ident}  # the dispatcher's thread, nobody else
    assert picture.overlaps == 0
    assert picture.invalidations == 0  # no pass lost the lock to a step of its own
    # every step's pass went through the same picture: one full read, then changes only
    assert picture.refreshes >= 45
    assert not picture.last.full


def test_a_woken_step_runs_on_the_next_turn_not_in_the_waking_thread(
    session_factory, cluster, clock
) -> None:
    d = Dispatcher(session_factory, cluster, clock=clock, interval=60.0)
    ran_in: list[int] = []

    class Probe(Descheduler):
        def run_once(self) -> None:
            ran_in.append(threading.get_ident())

    probe = d.add_step(Probe(d, interval=3600.0))
    probe.next_due = time.monotonic() + 3600.0  # not due on its own
    probe.wake()
    assert ran_in == []  # waking runs nothing in the caller
    assert d.seconds_to_next_pass(0.0) == 0.0  # the loop turns at once
    d.run_pass()
    assert ran_in == [threading.get_ident()] and probe.passes == 1
    d.run_pass()
    assert len(ran_in) == 1  # not due again for an hour

"""A cycle never switches the garbage collector off: ``gc`` is process-wide, and in
``gpuq serve`` the API threads and the estimate thread run beside the cycles."""

from __future__ import annotations

import gc
import threading

from app.scheduling import engine
from app.scheduling.engine import schedule
from tests.unit.core_fixtures import job, node, snap


def test_the_collector_stays_on_during_a_cycle(monkeypatch) -> None:
    seen: list[bool] = []
    admit = engine.Cycle.admit

    def watching(self, j, sig=None):
        seen.append(gc.isenabled())
        return admit(self, j, sig)

    monkeypatch.setattr(engine.Cycle, "admit", watching)
    assert gc.isenabled()
    res = schedule(snap([node("a0", "a100-80g", 8)], [job("j1"), job("j2")]))
    assert len(res.admissions) == 2
    assert seen == [True, True]  # the code before switched it off here
    assert gc.isenabled() and not gc.get_freeze_count()


def test_concurrent_cycles_unfreeze_once_the_last_ends() -> None:
    inside = threading.Barrier(2)
    done = threading.Event()

    def other() -> None:
        with engine.frozen_heap():
            inside.wait()
            done.wait(5)

    t = threading.Thread(target=other)
    t.start()
    with engine.frozen_heap():
        inside.wait()
    assert gc.get_freeze_count() > 0  # the other cycle still runs
    done.set()
    t.join()
    assert gc.get_freeze_count() == 0

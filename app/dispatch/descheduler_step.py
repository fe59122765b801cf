"""The descheduler step (every 30 s): room for P0 and defragmentation.

The decisions are pure (app.scheduling.descheduler); this step of the
dispatcher's decision thread only runs them through its persistence path (leader lock, snapshot, one
transaction, stop victims then bind), so a move or an eviction is recorded
exactly like a preemption of the dispatcher: requeued with its original
submit time, preemption_count + 1, an event saying who and why.
"""

from __future__ import annotations

from app.dispatch.dispatcher import Dispatcher
from app.dispatch.loops import Step
from app.scheduling.descheduler import deschedule


class Descheduler(Step):
    name = "descheduler"

    def __init__(self, dispatcher: Dispatcher, interval: float = 30.0) -> None:
        super().__init__(interval)
        self.dispatcher = dispatcher

    def run_once(self) -> None:
        result = self.dispatcher.run_with(deschedule)
        if result is not None and (result.preemptions or result.admissions):
            self.log.info(
                "descheduler: %d evicted/moved, %d admitted",
                len(result.preemptions), len(result.admissions),
            )

"""The lease reaper (a step of the dispatcher's decision thread, every 5 s):
reclaims expired ``reclaim: always`` leases on time.

The dispatcher's cycle does this too (step 2), but a cycle may be skipped
or slow; the reaper keeps the lender's bound ("waits at most until the
lease expires") independent of queue traffic. It also closes any lease
left active on a job that no longer holds capacity (belt and braces: the
state-change rules already end leases when a job stops).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import CursorResult, select, update

from app.dispatch.dispatcher import Dispatcher
from app.dispatch.loops import Step
from app.domain.states import ACTIVE
from app.scheduling.pool_steps import reclaim_only
from app.store.orm import JobRow, LeaseRow


class LeaseReaper(Step):
    name = "lease-reaper"

    def __init__(self, dispatcher: Dispatcher, interval: float = 5.0) -> None:
        super().__init__(interval)
        self.dispatcher = dispatcher

    def run_once(self) -> None:
        self.close_orphans()
        result = self.dispatcher.run_with(reclaim_only)
        if result is not None and result.preemptions:
            self.log.info("reclaimed %d expired lease(s)", len(result.preemptions))

    def close_orphans(self) -> int:
        sf = self.dispatcher.session_factory
        with sf() as session:
            holders = select(JobRow.id).where(JobRow.status.in_(ACTIVE))
            # an UPDATE's result is a CursorResult (it has rowcount); Session.execute's
            # stubs type every statement's result as the general Result
            n = cast(CursorResult[Any], session.execute(
                update(LeaseRow)
                .where(LeaseRow.state == "active", LeaseRow.job_id.not_in(holders))
                .values(state="returned", ended_at=self.dispatcher.clock())
            )).rowcount
            session.commit()
        return int(n or 0)

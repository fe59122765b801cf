"""Lease rows changed by a cycle's decisions (beyond what a state change does).

A state change ends a job's leases itself (app/store/states.py); this is the
one change a lease sees while its job keeps running: the core moved the
charge onto the borrower pool's own guarantee (``LeaseReturn``), so the
lease ends ``returned`` and the job's history says why.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.scheduling.model import LeaseReturn
from app.store.orm import JobRow, LeaseRow
from app.store.states import next_revision, record_event


def return_lease(session: Session, job: JobRow, ret: LeaseReturn, now: datetime) -> bool:
    """End the lease ``returned`` if it is still active on ``job``; the job's
    revision moves on so incremental readers (the dispatcher's picture) drop
    the lease too. True if the lease was ended here. The caller commits."""
    if not ret.lease_id.isdigit():
        return False
    ended = session.execute(
        update(LeaseRow)
        .where(
            LeaseRow.id == int(ret.lease_id),
            LeaseRow.job_id == job.id,
            LeaseRow.state == "active",
        )
        .values(state="returned", ended_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount
    if not ended:
        return False
    job.revision = next_revision(session)
    record_event(
        session, job, "lease_returned", now=now, reason=ret.reason,
        data={"lease": ret.lease_id, "lender": ret.lender, "gpu_type": ret.gpu_type,
              "units": ret.units},
    )
    return True

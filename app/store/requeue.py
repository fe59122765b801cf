"""``unschedulable -> pending``: the cluster changed, or an admin asked.

A job is ``unschedulable`` only while no configuration of the cluster could
hold it. When the inventory changes (a node added, uncordoned, relabelled, its
MIG layout cut anew, a GPU type or pool edited) the dispatcher re-checks every
such job against the new full inventory (``app.scheduling.reasons.could_fit``)
and sends back to the queue those that could now fit, with a
``requeued: cluster changed`` event. ``POST /v1/jobs/{id}/requeue`` does the
same for one job on an admin's word (the next cycle judges it again).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.errors import Conflict
from app.scheduling.model import PoolInfo, PriorityInfo, Snapshot
from app.scheduling.reasons import could_fit
from app.store.convert import job_request
from app.store.orm import JobRow
from app.store.state_changes import Change, apply_changes, change_state

CLUSTER_CHANGED = "requeued: cluster changed"


def any_unschedulable(session: Session) -> bool:
    """One index probe (jobs by status): is any job waiting for the cluster to grow?"""
    return session.scalar(
        select(JobRow.id).where(JobRow.status == "unschedulable").limit(1)
    ) is not None


def requeue_if_fits(session: Session, snap: Snapshot, now: datetime) -> list[str]:
    """Re-check every ``unschedulable`` job on ``snap``'s full inventory; the
    ones that could now fit go back to ``pending`` (one set-based change,
    skipping any job that changed meanwhile). Returns their ids; the caller
    commits."""
    rows = list(session.scalars(select(JobRow).where(JobRow.status == "unschedulable")))
    if not rows:
        return []
    pools: dict[str, PoolInfo] = dict(snap.pools)
    priorities: dict[str, PriorityInfo] = dict(snap.priorities)
    reqs, revs = [], {}
    for r in rows:
        try:
            reqs.append(job_request(r, priorities, pools))
        except ValueError:
            continue  # a spec the current schema no longer reads: leave it
        revs[str(r.id)] = r.revision
    verdicts = could_fit(reqs, snap)
    changes = [
        Change(int(job_id), "pending", reason=CLUSTER_CHANGED, event_type="requeued",
               revision=revs[job_id])
        for job_id, why in verdicts.items()
        if why is None
    ]
    done = apply_changes(session.connection(), changes, now)
    return [str(i) for i in sorted(done)]


def requeue_job(session: Session, job: JobRow, *, now: datetime, by: str) -> None:
    """An admin sends an ``unschedulable`` job back to the queue (409 for any
    other status). The caller commits."""
    if job.status != "unschedulable":
        raise Conflict(
            f"job {job.id} is {job.status}: only an unschedulable job can be requeued", "status"
        )
    change_state(session, job, "pending", now=now, event_type="requeued",
                 reason=f"requeued by {by}")

"""Job states and the one function through which every state change goes.

Prefect-style: :func:`change_state` applies a short, ordered list of rules
(allowed transition, wait accounting, timestamps, releasing capacity,
preemption count, revision, event). Routes, the dispatcher and the cluster
event handler all call it, so a job's history, its ``wait_seconds`` and
its allocations can never disagree. It never commits: the caller owns the
unit of work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.domain.states import ACTIVE, ALLOWED, TERMINAL, InvalidTransition
from app.store.orm import (
    AllocationRow,
    JobEventRow,
    JobRow,
    LeaseRow,
    job_revision_seq,
    live_row,
)


@dataclass
class Transition:
    job: JobRow
    from_status: str
    to_status: str
    now: datetime
    reason: str | None = None
    event_type: str | None = None
    lease_state: str = "returned"
    data: dict[str, Any] = field(default_factory=dict)
    pods_gone: bool = False


Rule = Callable[[Session, Transition], None]


def _check_allowed(session: Session, t: Transition) -> None:
    if t.to_status not in ALLOWED.get(t.from_status, frozenset()):
        raise InvalidTransition(f"job {t.job.id}: cannot go from {t.from_status} to {t.to_status}")


def _wait_accounting(session: Session, t: Transition) -> None:
    """wait_seconds counts every second pending, across requeues."""
    job = t.job
    if t.from_status == "pending" and job.queued_at is not None:
        job.waited_s = (job.waited_s or 0.0) + max(0.0, (t.now - job.queued_at).total_seconds())
        job.queued_at = None
    if t.to_status == "pending":
        job.queued_at = t.now


def _timestamps(session: Session, t: Transition) -> None:
    job = t.job
    if t.to_status == "admitted":
        job.admitted_at = t.now
        job.started_at = None
    elif t.to_status == "running":
        job.started_at = t.now
    elif t.to_status in TERMINAL:
        job.finished_at = t.now
    elif t.to_status == "pending":
        job.admitted_at = None
        job.started_at = None


def _release_capacity(session: Session, t: Transition) -> None:
    """Leaving admitted/running ends the job's leases and releases its allocations.

    The rows are deleted only when the cluster already reported the Pods
    ended (``pods_gone``); otherwise they are marked releasing and keep
    counting as used until the cluster confirms the Pods are gone
    (app/store/releasing.py): evicted Pods hold their GPUs for the grace
    period.
    """
    if t.from_status not in ACTIVE or t.to_status in ACTIVE:
        return
    if t.pods_gone:  # this attempt's rows; an older attempt's may still be draining
        session.execute(
            delete(AllocationRow).where(
                AllocationRow.job_id == t.job.id, live_row()
            )
        )
    else:
        session.execute(
            update(AllocationRow)
            .where(AllocationRow.job_id == t.job.id, live_row())
            .values(releasing_since=t.now)
            .execution_options(synchronize_session=False)
        )
    session.execute(
        update(LeaseRow)
        .where(LeaseRow.job_id == t.job.id, LeaseRow.state == "active")
        .values(state=t.lease_state, ended_at=t.now)
    )
    session.expire(t.job, ["allocations"])


def _queue_fields(session: Session, t: Transition) -> None:
    if t.to_status != "pending":
        t.job.queue_position = None
    t.job.reason = t.reason


def _preemption_count(session: Session, t: Transition) -> None:
    if (
        t.to_status == "pending"
        and t.from_status in ACTIVE
        and t.event_type
        in (
            "preempted",
            "reclaimed",
        )
    ):
        t.job.preemption_count = (t.job.preemption_count or 0) + 1


REVISION_BLOCK = 100


def next_revision(session: Session) -> int:
    """The next value of ``job_revision_seq``, taken in blocks.

    A plain integer (not a SQL expression) lets the ORM send a cycle's job
    UPDATEs as one batch instead of one statement per row; unused values of
    a block are gaps, which a monotonic revision allows.
    """
    block: list[int] = session.info.setdefault("job_revisions", [])
    if not block:
        block.extend(
            session.connection()
            .execute(
                select(job_revision_seq.next_value()).select_from(
                    func.generate_series(1, REVISION_BLOCK)
                )
            )
            .scalars()
        )
    return block.pop(0)


def _revision(session: Session, t: Transition) -> None:
    t.job.status = t.to_status
    t.job.revision = next_revision(session)


def _event(session: Session, t: Transition) -> None:
    session.add(
        JobEventRow(
            job_id=t.job.id,
            at=t.now,
            type=t.event_type or t.to_status,
            from_status=t.from_status,
            to_status=t.to_status,
            reason=t.reason,
            data=t.data,
        )
    )


RULES: tuple[Rule, ...] = (
    _check_allowed,
    _wait_accounting,
    _timestamps,
    _release_capacity,
    _queue_fields,
    _preemption_count,
    _revision,
    _event,
)


def change_state(
    session: Session,
    job: JobRow,
    to_status: str,
    *,
    now: datetime,
    reason: str | None = None,
    event_type: str | None = None,
    lease_state: str = "returned",
    data: dict[str, Any] | None = None,
    pods_gone: bool = False,
) -> None:
    """Move ``job`` to ``to_status`` applying every rule; raise :class:`InvalidTransition`.

    ``event_type`` names the event when it is more specific than the new
    status (``preempted``, ``reclaimed``, ``bind_failed``, ``requeued``);
    ``lease_state`` is what the job's active leases become when it stops
    holding capacity (``reclaimed`` for a lease reclaim, else ``returned``);
    ``pods_gone`` says the cluster already reported the job's Pods ended, so
    its capacity is freed now rather than marked releasing.
    """
    t = Transition(
        job=job,
        from_status=job.status,
        to_status=to_status,
        now=now,
        reason=reason,
        event_type=event_type,
        lease_state=lease_state,
        data=data or {},
        pods_gone=pods_gone,
    )
    for rule in RULES:
        rule(session, t)


def record_event(
    session: Session,
    job: JobRow,
    event_type: str,
    *,
    now: datetime,
    reason: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """An event that is not a state change (e.g. ``submitted``, ``bound``)."""
    session.add(
        JobEventRow(
            job_id=job.id,
            at=now,
            type=event_type,
            from_status=None,
            to_status=job.status,
            reason=reason,
            data=data or {},
        )
    )


def wait_seconds(job: JobRow, now: datetime) -> float:
    """Closed pending periods plus the open one, if the job is pending now."""
    total = job.waited_s or 0.0
    if job.status == "pending" and job.queued_at is not None:
        total += max(0.0, (now - job.queued_at).total_seconds())
    return total

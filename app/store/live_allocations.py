"""The one definition of a *live allocation*, and the queries built on it.

An allocation row is **live** when it is the capacity of a job's current
attempt: the row is not releasing (``releasing_since`` is NULL:
:func:`app.store.orm.live_row`) and its job is ``admitted`` or ``running``
(:data:`app.domain.states.ACTIVE`). Rows of a stopped attempt whose Pods are
still terminating are **releasing**: they still occupy their node (nobody
else may be placed there) but belong to no job, pool or team any more, so
they are never in a usage, quota, lease or ledger figure (they have their
own gauge, ``gpuq_releasing_units``).

Every read of "what is in use" goes through this module -- pool and team
usage, the core's pool ledger for read endpoints, node views, the
dispatcher's picture, reports and metrics -- so the numbers agree with each
other and with the scheduler (a pool once showed ``used=10`` and
``idle=80`` in one answer because two reads filtered differently).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Select, func, or_, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.domain.states import ACTIVE
from app.store.orm import AllocationRow, JobRow, live_row, releasing_row


def is_live() -> ColumnElement[bool]:
    """The live-allocation predicate; needs ``jobs`` joined (see :func:`live_allocations`)."""
    return live_row() & JobRow.status.in_(ACTIVE)


def holds_capacity() -> ColumnElement[bool]:
    """Rows that occupy their node: live ones and releasing ones."""
    return or_(is_live(), releasing_row())


def live_allocations(*columns: Any) -> Select[Any]:
    """``SELECT columns`` (default: the rows) of live allocations, ``jobs`` joined
    so callers may filter or group by job columns (pool, team, priority)."""
    return (
        select(*(columns or (AllocationRow,)))
        .select_from(AllocationRow)
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(is_live())
    )


def held_allocations(*columns: Any) -> Select[Any]:
    """Like :func:`live_allocations`, releasing rows included (node occupancy)."""
    return (
        select(*(columns or (AllocationRow,)))
        .select_from(AllocationRow)
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(holds_capacity())
    )


def booked_among(session: Session, job_ids: set[str]) -> set[str]:
    """Those of ``job_ids`` whose capacity the books hold (live or releasing rows): a
    live cluster counts a Pod with gpuq's labels for any other job as another
    workload's (``Cluster.list_nodes``). An id that is not a job's number holds none."""
    ids = [int(i) for i in job_ids if i.isdigit() and len(i) < 19]
    if not ids:
        return set()
    rows = session.execute(
        held_allocations(AllocationRow.job_id).where(AllocationRow.job_id.in_(ids)).distinct())
    return {str(job_id) for (job_id,) in rows}


def live_units(
    session: Session, key: Any, where: Iterable[ColumnElement[bool]] = ()
) -> dict[Any, dict[str, float]]:
    """CU of live allocations per ``key`` (a job column such as ``JobRow.pool``
    or ``JobRow.team``) and GPU type; CPU-only rows hold no CU and are left out.

    One grouped query: ``live_units(s, JobRow.team)`` gives every team's usage
    at once (metrics), ``live_units(s, JobRow.pool, [JobRow.pool == "infer"])``
    one pool's (the usage endpoint)."""
    q = (
        live_allocations(key, AllocationRow.gpu_type, func.sum(AllocationRow.units))
        .where(AllocationRow.gpu_type.is_not(None), *where)
        .group_by(key, AllocationRow.gpu_type)
    )
    out: dict[Any, dict[str, float]] = defaultdict(dict)
    for k, gpu_type, units in session.execute(q):
        out[k][gpu_type] = float(units or 0.0)
    return dict(out)


#: ``pg_snapshot_xmin`` of a fresh snapshot: every transaction below it has ended, so
#: "job rows with ``xact >=`` this", asked later, include every row committed since
#: (the incremental reads of the dispatcher's picture and of the report windows)
XMIN = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")

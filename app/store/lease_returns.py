"""Lease rows changed by a cycle's decisions (beyond what a state change does).

A state change ends a job's leases itself (app/store/state_changes.py); this is the
one change a lease sees while its job keeps running: the core moved the
charge onto the borrower pool's own guarantee (``LeaseReturn``), so the
lease ends ``returned`` and the job's history says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, text

from app.scheduling.model import LeaseReturn
from app.store.state_changes import EVENTS, event_row, insert_rows

_RETURN = text(
    """
    WITH ended AS (
        UPDATE leases AS l SET state = 'returned', ended_at = CAST(:now AS timestamptz)
        FROM unnest(CAST(:lids AS bigint[]), CAST(:jids AS bigint[]), CAST(:revs AS bigint[]))
            AS v(lid, jid, rev)
        JOIN jobs AS o ON o.id = v.jid
        WHERE l.id = v.lid AND l.job_id = v.jid AND l.state = 'active'
            AND o.revision = v.rev AND o.status IN ('admitted', 'running')
        RETURNING l.id, l.job_id
    ), bumped AS (
        UPDATE jobs AS j SET revision = nextval('job_revision_seq')
        FROM (SELECT DISTINCT job_id FROM ended) AS e
        WHERE j.id = e.job_id
        RETURNING j.id, j.status
    )
    SELECT ended.id AS lease_id, bumped.id AS job_id, bumped.status
    FROM ended JOIN bumped ON bumped.id = ended.job_id
    """
)


_LOCK_JOBS = text(
    "SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR UPDATE"
)


def return_leases(
    conn: Connection, returns: Sequence[tuple[LeaseReturn, int]], now: datetime
) -> set[str]:
    """End each lease ``returned`` if it is still active and its job is still
    at the revision the snapshot saw (``(decision, revision)`` pairs), in one
    statement; the jobs' revisions move on so incremental readers (the
    dispatcher's picture) drop the leases too, and each job gets a
    ``lease_returned`` event. Returns the ids of the leases ended."""
    rs = [(r, rev) for r, rev in returns if r.lease_id.isdigit() and r.job_id.isdigit()]
    if not rs:
        return set()
    # the jobs first, in id order, then their leases: the order of every other writer
    # (a cancel locks its job, then ends its leases). Locking a lease first and then its
    # job deadlocked with a cancel of that job.
    conn.execute(_LOCK_JOBS, {"ids": sorted({int(r.job_id) for r, _ in rs})})
    done = {
        str(row.lease_id): row.status
        for row in conn.execute(
            _RETURN,
            {
                "now": now,
                "lids": [int(r.lease_id) for r, _ in rs],
                "jids": [int(r.job_id) for r, _ in rs],
                "revs": [rev for _, rev in rs],
            },
        )
    }
    insert_rows(
        conn,
        EVENTS,
        [
            event_row(
                int(r.job_id), now, "lease_returned", None, done[r.lease_id], r.reason,
                {"lease": r.lease_id, "lender": r.lender, "gpu_type": r.gpu_type,
                 "units": r.units},
            )
            for r, _ in rs
            if r.lease_id in done
        ],
    )
    return set(done)

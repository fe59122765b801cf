"""The dispatch order of the last cycle, kept as one array row (``queue_order``).

Renumbering ``jobs.queue_position`` of every pending job each cycle costs an
UPDATE per pending job whenever anything ahead of it is admitted; one array
costs one row. Readers ask for the positions of the jobs they show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

_WRITE = text(
    "INSERT INTO queue_order (id, job_ids, writer) VALUES (1, CAST(:ids AS bigint[]), :writer) "
    "ON CONFLICT (id) DO UPDATE SET job_ids = EXCLUDED.job_ids, writer = EXCLUDED.writer"
)
_WRITE_REASONS = text(
    """
    UPDATE jobs AS j SET reason = v.reason
    FROM unnest(CAST(:ids AS bigint[]), CAST(:revs AS bigint[]), CAST(:reasons AS text[]))
        AS v(id, rev, reason)
    WHERE j.id = v.id AND j.revision = v.rev AND j.status = 'pending'
    """
)
_WRITER = text("SELECT writer FROM queue_order WHERE id = 1")
_POSITIONS = text(
    """
    SELECT u.id, u.ord FROM queue_order AS q,
        unnest(q.job_ids) WITH ORDINALITY AS u(id, ord)
    WHERE q.id = 1 AND u.id = ANY(CAST(:ids AS bigint[]))
    """
)


def write_order(conn: Connection, job_ids: Sequence[int], writer: str | None = None) -> None:
    conn.execute(_WRITE, {"ids": list(job_ids), "writer": writer})


def write_reasons(conn: Connection, rows: Sequence[tuple[int, int, str | None]]) -> None:
    """(job id, revision seen, reason): one statement; a job that changed since
    (another revision, or no longer pending) keeps what it has."""
    if rows:
        conn.execute(
            _WRITE_REASONS,
            {
                "ids": [r[0] for r in rows],
                "revs": [r[1] for r in rows],
                "reasons": [r[2] for r in rows],
            },
        )


def last_writer(conn: Connection) -> str | None:
    return conn.scalar(_WRITER)


def order_ranks(session: Session, job_ids: Iterable[int]) -> dict[int, int]:
    """1-based rank of each job in the last cycle's order (absent: not ranked)."""
    ids = list(job_ids)
    if not ids:
        return {}
    return {r.id: int(r.ord) for r in session.execute(_POSITIONS, {"ids": ids})}


def fill_queue_positions(session: Session, jobs: Iterable[Any]) -> None:
    """Set ``queue_position`` of the pending ones among ``jobs`` (ORM rows) to
    their place among the jobs still pending, without marking them changed."""
    pending = [j for j in jobs if j.status == "pending"]
    if not pending:
        return
    ranks = order_ranks(session, (j.id for j in pending))
    if not ranks:
        for j in pending:
            set_committed_value(j, "queue_position", None)
        return
    # jobs ranked ahead that have left the queue since the cycle do not count
    ahead = session.execute(
        text(
            """
            SELECT u.ord FROM queue_order AS q,
                unnest(q.job_ids) WITH ORDINALITY AS u(id, ord)
            JOIN jobs ON jobs.id = u.id
            WHERE q.id = 1 AND jobs.status = 'pending' AND u.ord <= :top
            ORDER BY u.ord
            """
        ),
        {"top": max(ranks.values())},
    ).scalars()
    place = {int(o): i + 1 for i, o in enumerate(ahead)}
    for j in pending:
        r = ranks.get(j.id)
        set_committed_value(j, "queue_position", place.get(r) if r is not None else None)

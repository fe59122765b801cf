"""The dispatch order of the last cycle, kept as one array row (``queue_order``).

Renumbering ``jobs.queue_position`` of every pending job each cycle costs an
UPDATE per pending job whenever anything ahead of it is admitted; one array
costs one row. Readers ask for the positions of the jobs they show.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.domain.errors import InputError
from app.scheduling.verdicts import stored_code

_WRITE = text(
    "INSERT INTO queue_order (id, job_ids, writer) VALUES (1, CAST(:ids AS bigint[]), :writer) "
    "ON CONFLICT (id) DO UPDATE SET job_ids = EXCLUDED.job_ids, writer = EXCLUDED.writer"
)
_WRITE_REASONS = text(
    """
    UPDATE jobs AS j SET reason = v.reason, reason_code = v.reason_code,
        reason_start_at = v.start_at
    FROM (
        SELECT o.id, x.reason, x.reason_code, x.start_at
        FROM unnest(CAST(:ids AS bigint[]), CAST(:revs AS bigint[]),
                    CAST(:reasons AS text[]), CAST(:codes AS text[]),
                    CAST(:starts AS timestamptz[]))
            AS x(id, rev, reason, reason_code, start_at)
        JOIN jobs AS o ON o.id = x.id
        WHERE o.revision = x.rev AND o.status = 'pending'
        ORDER BY o.id  -- id order, as every writer of job rows (app/store/state_changes.py)
        FOR UPDATE OF o
    ) AS v
    WHERE j.id = v.id
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


ReasonRow = tuple[int, int, "str | None", "float | None"]


def write_reasons(conn: Connection, rows: Sequence[ReasonRow]) -> None:
    """(job id, revision seen, reason, start the reason names in epoch seconds or None):
    the reason with its code (``reason_code``), in one statement; a job that changed
    since (another revision, or no longer pending) keeps what it has."""
    if rows:
        conn.execute(
            _WRITE_REASONS,
            {
                "ids": [r[0] for r in rows],
                "revs": [r[1] for r in rows],
                "reasons": [r[2] for r in rows],
                "codes": [stored_code(r[2]) for r in rows],
                "starts": [None if r[3] is None else datetime.fromtimestamp(r[3], UTC)
                           for r in rows],
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


# -- reading the queue a page at a time -----------------------------------------------------

_QUEUE_COLUMNS = """
    j.id, j.name, j.team, j.pool, j.priority, j.status, j.reason, j.submitted_at,
    j.queued_at, j.waited_s, j.preemption_count, j.reason_start_at, j.reason_code
"""
_LENGTH = text("SELECT cardinality(job_ids) FROM queue_order WHERE id = 1")
# the ranked part: a slice of the order row, each id looked up by its primary key
_RANKED = f"""
    SELECT u.k + :start AS ord, {_QUEUE_COLUMNS}
    FROM queue_order AS q
    CROSS JOIN LATERAL unnest(q.job_ids[:start + 1 : :stop]) WITH ORDINALITY AS u(id, k)
    JOIN jobs AS j ON j.id = u.id
    WHERE q.id = 1 AND j.status = 'pending' {{filters}}
    ORDER BY u.k
    LIMIT :n
"""
# the rest: pending jobs the last cycle did not rank (submitted or requeued since),
# by submit time through ix_jobs_status_submitted_at
_UNRANKED = f"""
    SELECT NULL AS ord, {_QUEUE_COLUMNS}
    FROM jobs AS j
    WHERE j.status = 'pending' AND (j.submitted_at, j.id) > (:after_at, :after_id)
        AND NOT EXISTS (
            SELECT 1 FROM queue_order AS q, unnest(q.job_ids) AS r(id)
            WHERE q.id = 1 AND r.id = j.id
        ) {{filters}}
    ORDER BY j.submitted_at, j.id
    LIMIT :n
"""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class QueueCursor:
    """Where a page ended: the last position shown and the last job's key (its rank
    in the order row, or - past the ranked part - its submit time and id)."""

    position: int
    ord: int | None = None
    submitted_us: int = 0
    job_id: int = 0

    def encode(self) -> str:
        raw = f"q:{self.position}:{self.ord if self.ord is not None else ''}:"
        raw += f"{self.submitted_us}:{self.job_id}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: str) -> QueueCursor:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
            kind, pos, ord_, sub, jid = raw.split(":")
            if kind != "q":
                raise ValueError(kind)
            return cls(int(pos), int(ord_) if ord_ else None, int(sub), int(jid))
        except Exception:
            raise InputError(
                "malformed cursor (use the next cursor of a previous page)", "cursor"
            ) from None


def queue_page(
    conn: Connection,
    *,
    limit: int,
    cursor: str | None = None,
    pool: str | None = None,
    team: str | None = None,
) -> tuple[list[Any], int, str | None]:
    """One page of the pending queue in dispatch order: ``(rows, first position, next cursor)``.

    Keyset pagination over the order the last cycle wrote (``queue_order``,
    then jobs it has not ranked yet by submit time): a page reads a slice of
    the order row and looks its jobs up by primary key, so the first page
    costs the same with 200 or 20,000 jobs waiting. Jobs that left the queue
    since the cycle are skipped; positions count the jobs shown, filters
    applied, as the unpaged list did.
    """
    cur = QueueCursor.decode(cursor) if cursor else QueueCursor(position=0, ord=0)
    filters, params = "", {}
    if pool:
        filters += " AND j.pool = :pool"
        params["pool"] = pool
    if team:
        filters += " AND j.team = :team"
        params["team"] = team
    want = limit + 1  # one more tells whether there is a next page
    rows: list[Any] = []
    if cur.ord is not None:
        length = conn.scalar(_LENGTH) or 0
        start, chunk = cur.ord, max(4 * want, 256)
        ranked = text(_RANKED.format(filters=filters))
        while start < length and len(rows) < want:
            stop = min(length, start + chunk)
            rows += conn.execute(
                ranked, {**params, "start": start, "stop": stop, "n": want - len(rows)}
            ).all()
            start, chunk = stop, chunk * 4
    if len(rows) < want:
        after_at, after_id = _EPOCH, 0
        if cur.ord is None:
            after_at = _EPOCH + timedelta(microseconds=cur.submitted_us)
            after_id = cur.job_id
        rows += conn.execute(
            text(_UNRANKED.format(filters=filters)),
            {**params, "after_at": after_at, "after_id": after_id, "n": want - len(rows)},
        ).all()
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit and page:
        last = page[-1]
        nxt = QueueCursor(position=cur.position + len(page), ord=last.ord)
        if last.ord is None:
            delta = last.submitted_at - _EPOCH
            us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
            nxt = QueueCursor(cur.position + len(page), None, us, last.id)
        next_cursor = nxt.encode()
    return page, cur.position + 1, next_cursor

"""Other teams' job ids in what a team reads about its own jobs.

The core's reasons say who did it: "preempted by job 42 (P0 > P1)", "reclaimed for job
42 of pool training", "free capacity is held for job(s) 17, 23 (reservation ...)", the
descheduler's "so job 42 can have the whole node", and a stop event's ``data.by_job``.
Stored as written (the admin, the simulator and the core's thrash guard read them);
for a team token the ids of jobs that are not its team's become "another team's job",
as ``GET /v1/nodes`` and ``GET /v1/leases`` leave out which other team's job holds a
card or a lease.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store.orm import JobRow

# "job 42" and "job(s) 17, 23" (engine._held_reason lists at most three)
_LIST = re.compile(r"\bjob\(s\) (\d+(?:, \d+)*)")
_ONE = re.compile(r"\bjob (\d+)\b")
OTHER = "another team's job"


def _ids(text: str | None) -> set[str]:
    if not text:
        return set()
    out = set(_ONE.findall(text))
    for m in _LIST.findall(text):
        out.update(m.split(", "))
    return out


class JobRefs:
    """Redacts, for ``team`` (None: the admin or the public dashboard, nothing is
    redacted), the job ids in ``texts`` and ``by_jobs`` that are not the team's."""

    def __init__(self, session: Session, team: str | None,
                 texts: Iterable[str | None] = (), by_jobs: Iterable[Any] = ()) -> None:
        self.team = team
        self.foreign: set[str] = set()
        if team is None:
            return
        ids = set().union(*(_ids(t) for t in texts)) | {str(b) for b in by_jobs if b}
        nums = [int(i) for i in ids if i.isdigit() and len(i) <= 18]
        own = set()
        if nums:
            own = {str(i) for i in session.scalars(
                select(JobRow.id).where(JobRow.id.in_(nums), JobRow.team == team))}
        self.foreign = ids - own  # unknown ids too: nothing says they are the team's

    def text(self, text: str | None) -> str | None:
        if not text or not self.foreign:
            return text

        def many(m: re.Match[str]) -> str:
            ids = m.group(1).split(", ")
            own = [i for i in ids if i not in self.foreign]
            if len(own) == len(ids):
                return m.group(0)
            parts = [f"job(s) {', '.join(own)}"] if own else []
            return " and ".join([*parts, "another team's job(s)"])

        text = _LIST.sub(many, text)
        return _ONE.sub(lambda m: OTHER if m.group(1) in self.foreign else m.group(0), text)

    def data(self, data: dict[str, Any]) -> dict[str, Any]:
        by = data.get("by_job")
        if by is not None and str(by) in self.foreign:
            return {**data, "by_job": None}
        return data

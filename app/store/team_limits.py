"""A team's cap on pending jobs, checked at submit.

Why: the queue is the one thing every pass reads. One team sent 200,000 jobs in
45 s (40 batches of 5,000, all accepted); then passes took up to 100 s and
another team's one-GPU job waited 76 s to start. The cap keeps what one team
can put in front of the scheduler bounded: ``teams.max_pending`` or the
install's ``GPUQ_TEAM_MAX_PENDING``.

The count reads at most ``cap`` entries of a partial index (pending jobs by
team, migration 0009), so its cost does not grow with the flood. Submits that
run at the same moment do not see each other's rows, so the cap can be passed
by the jobs of the submits in flight at once (at most
``GPUQ_MAX_CONCURRENT_REQUESTS`` requests per API process); it never grows
further.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.domain.errors import TooManyRequests

# seconds a client is told to wait when its team is at its cap: jobs leave the
# queue as passes start them (every GPUQ_DISPATCH_INTERVAL) or as the team cancels
PENDING_RETRY_AFTER_S = 30

# Is there room for :adding more pending jobs of :team under :cap (NULL: no cap)? At
# most :cap index entries are read. One text, used alone and inside the one-statement
# submit (app/store/jobs.py), so both count the same way.
ROOM_SQL = """CASE WHEN CAST(:cap AS integer) IS NULL THEN TRUE ELSE
    (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE team = :team AND status = 'pending'
        LIMIT CAST(:cap AS integer)) AS p) + CAST(:adding AS integer) <= CAST(:cap AS integer)
    END"""
_ROOM = text(f"SELECT {ROOM_SQL}")


def effective_cap(team_cap: int | None, install_cap: int | None) -> int | None:
    """The cap that applies: the team's own, else the install's (None or 0: none)."""
    if team_cap is not None:
        return team_cap
    return install_cap or None


def over_cap(team: str, cap: int, adding: int = 1) -> TooManyRequests:
    what = "this job" if adding == 1 else f"these {adding:,} jobs"
    return TooManyRequests(
        f"team {team} may have at most {cap:,} jobs pending (max_pending) and {what} "
        "would pass it; submit more once some have started or been cancelled",
        PENDING_RETRY_AFTER_S, "team")


def check_pending_cap(conn: Connection, team: str, adding: int, cap: int | None) -> None:
    """Refuse (429) ``adding`` more jobs when ``team`` would have more than ``cap``
    pending; ``cap`` None: no cap."""
    if cap is None:
        return
    if adding > cap:
        raise TooManyRequests(
            f"{adding} jobs at once is more than team {team}'s cap of {cap:,} pending jobs",
            PENDING_RETRY_AFTER_S, "jobs")
    if not conn.execute(_ROOM, {"team": team, "cap": cap, "adding": adding}).scalar_one():
        raise over_cap(team, cap, adding)

"""The plain record every report is computed from: one job's timing.

The API builds these from job rows, the simulator from its result; both
mean the same thing by each field, so a report on a replay and a report
on the live service are comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

FINISHED = frozenset({"succeeded", "failed", "cancelled", "unschedulable"})


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as reports see it.

    ``wait_s`` is every second spent pending, across requeues; for a job
    still pending it is the wait so far, so a starving job shows in the
    report before it ever starts. ``gpu_type`` is the type it ran on (or,
    while pending, the type it waits for; ``any`` / ``cpu`` otherwise).
    """

    id: str
    team: str
    pool: str
    priority: str
    gpu_type: str
    status: str
    submitted_at: float
    wait_s: float | None = None
    admitted_at: float | None = None
    finished_at: float | None = None

    @property
    def jct_s(self) -> float | None:
        """Job completion time: submit to successful finish (None otherwise)."""
        if self.status != "succeeded" or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.submitted_at)

    def active_since(self, since: float) -> bool:
        """True when the job is still waiting, or anything happened to it at or after ``since``."""
        if self.status == "pending":
            return True
        last = max(
            t for t in (self.submitted_at, self.admitted_at, self.finished_at) if t is not None
        )
        return last >= since

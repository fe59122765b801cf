"""Ingest (step 2 of a pass): what the cluster reports becomes state changes.

The common events (a job started, a job finished) are applied as a few
set-based statements for the whole batch; the rest (a failed run to retry,
Pods lost) go through the state rules one job at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from app.cluster.interface import JobStatusEvent
from app.dispatch.loops import Part
from app.domain.spec import FailurePolicy
from app.domain.states import ACTIVE
from app.store.dispatch_rows import lock_jobs, past_time_limit, retry_count
from app.store.orm import JobRow
from app.store.state_changes import Change, apply_changes, change_state


@dataclass
class Ingest(Part):
    max_retries: int = 0  # a failed run is requeued this many times
    # Events polled but not yet recorded: dropped only once the transaction that
    # records them has committed (a failed pass keeps them for the next one).
    unrecorded: list[JobStatusEvent] = field(default_factory=list)

    def run(self) -> None:
        """Record what the cluster reported. When the recording transaction fails
        (connection killed, failover, serialization error) the events stay in
        ``unrecorded`` and are applied again next pass: applying one twice is
        harmless, every rule checks the job's current state."""
        self.unrecorded.extend(self.cluster.poll_events())
        if not self.unrecorded:
            self.cluster.acknowledge([])  # retries what an earlier acknowledge could not do
            return
        events = list(self.unrecorded)
        taken = len(events)
        with self.session_factory() as session:
            events = self._batch(session, events)
            if events:
                # one query locks every job the events name (no per-event round trips)
                jobs = lock_jobs(session, {ev.job_id for ev in events}, with_allocations=False)
                for ev in events:
                    self._apply(session, jobs.get(ev.job_id), ev)
            session.commit()
        acked = self.unrecorded[:taken]
        del self.unrecorded[:taken]  # acknowledged: they are in the database now
        self.cluster.acknowledge(acked)  # the cluster may let go of what it kept for them

    def forget(self) -> None:
        """Leadership lost: whoever leads next re-derives these from the cluster."""
        self.unrecorded.clear()

    def _batch(self, session: Session, events: list[JobStatusEvent]) -> list[JobStatusEvent]:
        """Started and finished jobs as a few set-based statements; returns the
        events that need the per-job rules (retries, lost pods)."""
        running: list[int] = []
        finished: dict[int, tuple[str, str | None]] = {}
        rest: list[JobStatusEvent] = []
        for ev in events:
            if not ev.job_id.isdigit():
                continue  # not one of ours
            jid = int(ev.job_id)
            if ev.phase == "running":
                running.append(jid)
            elif ev.phase == "succeeded":
                finished.setdefault(jid, (ev.phase, ev.message or None))
            else:
                rest.append(ev)
        now = self.clock()
        conn = session.connection()
        apply_changes(conn, [Change(i, "running") for i in running], now)
        apply_changes(
            conn,
            [Change(i, ph, reason=why, pods_gone=True) for i, (ph, why) in finished.items()],
            now,
        )
        return rest

    def retry_limit(self, job: JobRow) -> int:
        """The job's ``failure_policy`` (restart the whole gang N times, or fail), else the
        cluster-wide retry count. Failed runs are rare, so they all take this per-job path."""
        policy = (job.spec or {}).get("failure_policy")
        if policy is None:
            return self.max_retries
        return FailurePolicy.model_validate(policy).restarts_allowed()

    def _apply(self, session: Session, job: JobRow | None, ev: JobStatusEvent) -> None:
        if job is None or job.status not in ACTIVE:
            return  # cancelled or requeued meanwhile: nothing to do
        now = self.clock()
        if ev.phase == "running" and job.status == "admitted":
            change_state(session, job, "running", now=now, reason=None)
        elif ev.phase in ("failed", "gone") and past_time_limit(session, now, [job.id]):
            # the run reached its time limit while no dispatcher stopped it (the kubelet's
            # deadline, a margin past the limit, ended it): the end the limit gives
            change_state(
                session, job, "failed", now=now,
                reason=f"time limit: ran past {job.spec['time_limit_s']:g} s "
                f"(time_limit_s); {ev.message}".rstrip("; "),
                pods_gone=ev.pods_gone,
            )
        elif ev.phase == "failed" and retry_count(session, job.id) < self.retry_limit(job):
            n, limit = retry_count(session, job.id) + 1, self.retry_limit(job)
            change_state(
                session,
                job,
                "pending",
                now=now,
                event_type="retried",
                reason=f"run failed (retry {n}/{limit}): {ev.message}",
                pods_gone=ev.pods_gone,
            )
        elif ev.phase in ("succeeded", "failed"):
            change_state(
                session,
                job,
                ev.phase,
                now=now,
                reason=ev.message or None,
                pods_gone=ev.pods_gone,
            )
        elif ev.phase == "gone":
            change_state(
                session,
                job,
                "pending",
                now=now,
                event_type="requeued",
                reason=f"pods lost on the cluster: {ev.message}" if ev.message else "pods lost",
                pods_gone=ev.pods_gone,
            )

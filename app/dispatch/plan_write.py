"""Plan and write (steps 4 and 5 of a pass): snapshot -> pure core -> one transaction.

The snapshot comes from the dispatcher's :class:`~app.dispatch.picture.QueuePicture`;
the core (a policy, or a partial decision such as the descheduler's) returns
decisions as data; every decision is written in one transaction, skipping
jobs that changed since the snapshot (a cancel raced the cycle). The cluster
calls the decisions need are returned as a :class:`~app.dispatch.plan.Plan`
for the bind part.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from app.dispatch.picture import QueuePicture
from app.dispatch.plan import Plan, bind_request
from app.domain.states import ACTIVE
from app.scheduling.model import Admission, CycleResult, Node, Snapshot
from app.scheduling.policies import get_policy
from app.scheduling.releasing import hold_in_snapshot
from app.store import batch_states, queue_order
from app.store.batch_states import admit_one
from app.store.dispatch_rows import lock_jobs
from app.store.orm import JobRow
from app.store.snapshot import SnapshotContext
from app.store.states import change_state

Decide = Callable[[Snapshot], CycleResult]


class PlanAndWrite:
    def __init__(
        self,
        session_factory: sessionmaker[Session],
        picture: QueuePicture,
        clock: Callable[[], datetime],
        policy: str = "gpuq",
    ) -> None:
        self.session_factory = session_factory
        self.picture = picture
        self.clock = clock
        self.policy_name = policy
        self.reason_refresh_s = 5.0  # see _write_queue
        self.timings: dict[str, float] = {}  # snapshot / core / write seconds, last run

    def run(self, decide: Decide | None = None, live_nodes: list[Node] | None = None) -> Plan:
        """One planning transaction; ``decide`` defaults to the policy. On any
        error the picture is dropped (what it holds may be ahead of the database)."""
        try:
            return self._run(decide, live_nodes)
        except BaseException:
            self.picture.invalidate()
            raise

    def _run(self, decide: Decide | None, live_nodes: list[Node] | None) -> Plan:
        plan = Plan()
        timings = self.timings = {}
        with self.session_factory() as session:
            now = self.clock()
            t0 = time.perf_counter()
            ctx = self.picture.refresh(session, now)
            if live_nodes is not None:
                ctx.snapshot.nodes = list(live_nodes)
                hold_in_snapshot(ctx.snapshot, ctx.releasing)  # stopping Pods hold capacity
            t1 = time.perf_counter()
            result = (decide or get_policy(self.policy_name))(ctx.snapshot)
            t2 = time.perf_counter()
            timings["snapshot"], timings["core"] = t1 - t0, t2 - t1
            plan.grace_seconds = ctx.snapshot.config.preemption_grace_s
            plan.result = result
            decided = (
                {a.job_id for a in result.admissions}
                | {p.job_id for p in result.preemptions}
                | set(result.unschedulable)
            )
            victims = {p.job_id for p in result.preemptions}
            # admissions of jobs nobody preempts this cycle are written as one batch
            # (the revision check is in the statement); the rest row by row
            batch: list[tuple[Admission, int]] = []
            for a in result.admissions:
                rev = ctx.revisions.get(a.job_id)
                if a.job_id not in victims and rev is not None and a.job_id.isdigit():
                    batch.append((a, rev))
            batched = {a.job_id for a, _ in batch}
            jobs = lock_jobs(session, decided - batched)

            def fresh(job_id: str) -> JobRow | None:
                job = jobs.get(job_id)
                if job is None or job.revision != ctx.revisions.get(job_id):
                    return None  # changed since the snapshot: leave it to the next cycle
                return job

            requeued: set[str] = set()  # a moved job is preempted, then admitted anew
            for p in result.preemptions:
                job = fresh(p.job_id)
                if job is not None and job.status in ACTIVE:
                    by = f" by job {p.by_job}" if p.by_job else ""
                    reclaim = p.kind == "reclaim"
                    change_state(
                        session,
                        job,
                        "pending",
                        now=now,
                        event_type="reclaimed" if reclaim else "preempted",
                        lease_state="reclaimed" if reclaim else "returned",
                        reason=f"{'reclaimed' if reclaim else 'preempted'}{by}: {p.reason}",
                        data={"by_job": p.by_job, "kind": p.kind},
                    )
                    plan.stops.append((p.job_id, p.reason))
                    requeued.add(p.job_id)
            for a in result.admissions:
                if a.job_id in batched:
                    continue
                job = jobs.get(a.job_id) if a.job_id in requeued else fresh(a.job_id)
                if job is not None and job.status == "pending":
                    admit_one(session, job, a, now)
                    plan.binds.append(bind_request(job, list(a.placements)))
            for job_id, why in result.unschedulable.items():
                job = fresh(job_id)
                if job is not None and job.status == "pending":
                    change_state(session, job, "unschedulable", now=now, reason=why)
            if batch:
                session.flush()  # the row-by-row changes first, then the batch
                admitted = batch_states.admit_many(session.connection(), batch, now)
                for a, _ in batch:
                    row = admitted.get(int(a.job_id))
                    if row is not None:
                        plan.binds.append(bind_request(row, list(a.placements)))
            reasons: list[tuple[int, int, str | None]] = []
            order: list[int] | None = None
            if decide is None:  # partial decisions (descheduler, reaper) leave the queue be
                order, reasons = self._write_queue(session, ctx, result, decided)
            session.commit()
            self.picture.queue_written(reasons, order, ctx.snapshot.now)
            timings["write"] = time.perf_counter() - t2
        return plan

    def _write_queue(
        self, session: Session, ctx: SnapshotContext, result: CycleResult, decided: set[str]
    ) -> tuple[list[int], list[tuple[int, int, str | None]]]:
        """Reasons of jobs left pending, and the dispatch order.

        The order is one array row (``queue_order``); reasons are written only
        where they changed, in one statement, and only if the job is still
        pending at the revision the snapshot saw. Returns (order, reasons written).
        """
        order = [int(j) for j in result.order if j not in decided and j.isdigit()]
        conn = session.connection()
        if self.picture.written_order != order:
            queue_order.write_order(conn, order, self.picture.owner)
        # A reason whose text changed only in its numbers ("largest free block:
        # v100-16g 1" -> "0") is rewritten at most every reason_refresh_s per job:
        # with a large backlog such changes otherwise rewrite thousands of rows a pass.
        now = ctx.snapshot.now
        rows: list[tuple[int, int, str | None]] = []
        for job_id, (reason, _) in ctx.pending_meta.items():
            new_reason = result.reasons.get(job_id, reason)
            if job_id in decided or new_reason == reason:
                continue
            if (
                reason is not None
                and new_reason is not None
                and self.picture.reason_is_fresh(
                    job_id, reason, new_reason, now, self.reason_refresh_s
                )
            ):
                continue
            rows.append((int(job_id), ctx.revisions[job_id], new_reason))
        queue_order.write_reasons(conn, rows)
        return order, rows



"""The dispatcher: snapshot -> pure core -> one transaction -> cluster calls.

One pass (:meth:`Dispatcher.run_once`), as numbered steps:

1. Leadership: with a live cluster (Kubernetes) only the holder of the
   session advisory lock of :class:`~app.dispatch.leader.LeaderElector`
   dispatches; standbys keep their cluster cache warm and take over when the
   leader's session dies. On gaining leadership the cluster is reconciled
   (adopt Pods, remove orphans and half-bound gangs). Every pass also takes
   ``pg_try_advisory_lock`` for its critical section, so any number of
   replicas is safe.
2. Ingest what the cluster reports (running, succeeded, failed, gone).
3. Reconcile the database with the cluster: pods of jobs that no longer
   hold capacity are stopped; admitted jobs without pods are bound (this is
   how a crash between commit and bind is repaired); running jobs whose pods
   vanished are requeued.
4. Plan: build the snapshot and call the core.
5. Write every decision in one transaction (allocations, leases,
   preemptions, unschedulable, reasons, queue order), skipping jobs that
   changed since the snapshot (a cancel raced the cycle).
6. Perform on the cluster: stop victims first, then bind; a failed bind is
   undone (job back to pending, allocations freed) - every reserve has an
   unreserve.

The database is the truth: a crash at any point leaves allocations that
either match a bind that will happen (step 3) or were never written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, func, select, text, update
from sqlalchemy.orm import Session, selectinload, sessionmaker

from app.clock import from_epoch, utcnow
from app.cluster.base import BindError, BindRequest, Cluster, JobStatusEvent
from app.dispatch.base import LoopService
from app.dispatch.leader import LeaderElector
from app.dispatch.node_sync import fingerprint, gpu_type_configs, sync_node_rows
from app.dispatch.picture import QueuePicture
from app.dispatch.releasing import cluster_view, hold_releasing_in_context
from app.domain.spec import FailurePolicy
from app.domain.states import ACTIVE
from app.scheduling.model import (
    Admission,
    CycleResult,
    Preemption,
    ReplicaPlacement,
    Snapshot,
)
from app.scheduling.policies import get_policy
from app.scheduling.releasing import hold_in_snapshot
from app.store import batch_states, queue_order
from app.store.batch_states import AdmittedRow, admission_event_data
from app.store.convert import placement_of
from app.store.orm import AllocationRow, JobEventRow, JobRow, LeaseRow
from app.store.releasing import any_releasing, blocked_binds, finalise, moved_placements
from app.store.snapshot import SnapshotContext, build_snapshot
from app.store.states import change_state, record_event

ADVISORY_LOCK_KEY = 0x67707571  # "gpuq"

_WRITE_REASONS = text(
    """
    UPDATE jobs AS j SET reason = v.reason
    FROM unnest(CAST(:ids AS bigint[]), CAST(:revs AS bigint[]), CAST(:reasons AS text[]))
        AS v(id, rev, reason)
    WHERE j.id = v.id AND j.revision = v.rev AND j.status = 'pending'
    """
)
Decide = Callable[[Snapshot], CycleResult]


@dataclass
class Plan:
    """Cluster calls decided by a committed transaction."""

    stops: list[tuple[str, str]] = field(default_factory=list)  # (job id, reason)
    binds: list[BindRequest] = field(default_factory=list)
    result: CycleResult | None = None
    grace_seconds: float | None = None  # scheduler.preemption_grace_s, when set


def bind_request(
    job: JobRow | AdmittedRow, placements: list[ReplicaPlacement] | None = None
) -> BindRequest:
    """What the cluster needs to start ``job``: its stored allocations, or the
    placements just written for it (saves reloading them)."""

    if placements is None:
        assert isinstance(job, JobRow)
        placements = [placement_of(a) for a in job.allocations]
    spec = job.spec or {}
    return BindRequest(
        job_id=str(job.id),
        name=job.name,
        team=job.team,
        pool=job.pool,
        priority=job.priority,
        placements=placements,
        duration_s=spec.get("duration_estimate_s"),
        pod_template=dict(spec.get("pod_template") or {}),
        world_size=len(placements),
    )


class Dispatcher(LoopService):
    name = "dispatcher"

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        cluster: Cluster,
        *,
        clock: Callable[[], datetime] = utcnow,
        policy: str = "gpuq",
        interval: float = 1.0,
        grace_seconds: float = 30.0,
        elector: LeaderElector | None = None,
        max_retries: int = 0,
        incremental: bool = True,
    ) -> None:
        super().__init__(interval)
        # incremental: keep a QueuePicture between passes and write the hot
        # transitions as batches; False is the full-reload ORM path (a baseline)
        self.picture: QueuePicture | None = QueuePicture() if incremental else None
        self.timings: dict[str, float] = {}  # seconds per step of the last pass
        self._order_written: list[int] | None = None
        self.reason_refresh_s = 5.0  # see _write_queue
        self.elector = elector
        self.max_retries = max_retries  # a failed run is requeued this many times
        if elector is not None:
            elector.on_change = self._leadership_changed
        self._reconcile_cluster = True  # on the first pass as leader
        self._nodes_fingerprint: str | None = None
        self.live_nodes: list | None = None
        self.session_factory = session_factory
        self.cluster = cluster
        self.clock = clock
        self.policy_name = policy
        self.grace_seconds = grace_seconds
        self.last_result: CycleResult | None = None

    # 1. leadership --------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self.session_factory.kw["bind"]

    def _leadership_changed(self, leader: bool) -> None:
        if leader:
            self._reconcile_cluster = True
        if self.picture is not None:
            self.picture.invalidate()  # another leader wrote meanwhile: start afresh

    def start(self, loops: int | None = None) -> None:
        try:
            super().start(loops)
        finally:
            if self.elector is not None:
                self.elector.release()  # a standby takes over at once

    def run_once(self) -> None:
        self.run_with(None)

    def run_with(self, decide: Decide | None) -> CycleResult | None:
        """One leader-only pass that persists ``decide(snapshot)`` (default: the
        policy) -- the descheduler and the lease reaper write through here, so
        every decision takes the same path. None when another process leads."""
        if self.elector is not None and not self.elector.ensure():
            # Standby: do not act, but do not let the cluster's events pile up
            # either (a new leader reconciles from the Pods themselves).
            self.cluster.poll_events()
            return None
        with self.engine.connect() as conn:
            leader = conn.scalar(select(func.pg_try_advisory_lock(ADVISORY_LOCK_KEY)))
            conn.commit()
            if not leader:
                self.log.debug("another dispatcher holds the lock; skipping this pass")
                if self.picture is not None:
                    self.picture.invalidate()
                return None
            try:
                timings: dict[str, float] = {}
                t0 = time.perf_counter()
                self.sync_cluster()
                self.ingest_events()
                plan = self.reconcile()
                timings["ingest"] = time.perf_counter() - t0
                cycle = self.plan_and_commit(decide)
                timings.update(self.timings)
                plan.stops += cycle.stops
                plan.binds += cycle.binds
                plan.result = cycle.result
                plan.grace_seconds = cycle.grace_seconds
                t0 = time.perf_counter()
                self.perform(plan)
                self.ingest_events()  # pods that started during perform show as running now
                timings["perform"] = time.perf_counter() - t0
                self.timings = timings
                return cycle.result
            finally:
                conn.execute(select(func.pg_advisory_unlock(ADVISORY_LOCK_KEY)))
                conn.commit()

    def sync_cluster(self) -> None:
        """Live clusters: nodes from the cluster (mirrored into the nodes table
        for the API), GPU types to the cluster, and a full reconcile after
        gaining leadership."""
        if not getattr(self.cluster, "live_nodes", False):
            return

        with self.session_factory() as session:
            self.cluster.set_gpu_types(gpu_type_configs(session))  # type: ignore[attr-defined]
            nodes = self.cluster.list_nodes()
            fp = fingerprint(nodes)
            if fp != self._nodes_fingerprint:
                sync_node_rows(session, nodes)
                session.commit()
                self._nodes_fingerprint = fp
            self.live_nodes = nodes
            if self._reconcile_cluster and hasattr(self.cluster, "reconcile"):
                active = {
                    str(j)
                    for j in session.scalars(select(JobRow.id).where(JobRow.status.in_(ACTIVE)))
                }
                # a moved job's old Pods are not its current attempt
                report = self.cluster.reconcile(
                    active, moved_placements(session), self.grace_seconds
                )
                self.log.info(
                    "reconciled with the cluster: %d adopted, %d to rebind or requeue, "
                    "%d orphans removed",
                    len(report.adopted),
                    len(report.missing),
                    len(report.orphans),
                )
                self._reconcile_cluster = False

    # 2. ingest ------------------------------------------------------------

    def ingest_events(self) -> None:
        events = self.cluster.poll_events()
        if not events:
            return
        with self.session_factory() as session:
            if self.picture is not None:
                events = self._ingest_batch(session, events)
            if events:
                # one query locks every job the events name (no per-event round trips)
                jobs = _lock_jobs(session, {ev.job_id for ev in events}, with_allocations=False)
                for ev in events:
                    self._apply_event(session, jobs.get(ev.job_id), ev)
            session.commit()

    def _ingest_batch(self, session: Session, events: list[JobStatusEvent]) -> list[JobStatusEvent]:
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
        batch_states.mark_running(conn, running, now)
        batch_states.finish_many(conn, finished, now)
        return rest

    def _apply_event(self, session: Session, job: JobRow | None, ev: JobStatusEvent) -> None:
        if job is None or job.status not in ACTIVE:
            return  # cancelled or requeued meanwhile: nothing to do
        now = self.clock()
        if ev.phase == "running" and job.status == "admitted":
            change_state(session, job, "running", now=now, reason=None)
        elif ev.phase == "failed" and self._retries(session, job) < self._retry_limit(job):
            n, limit = self._retries(session, job) + 1, self._retry_limit(job)
            change_state(
                session,
                job,
                "pending",
                now=now,
                event_type="retried",
                reason=f"run failed (retry {n}/{limit}): {ev.message}",
                pods_gone=True,
            )
        elif ev.phase in ("succeeded", "failed"):
            change_state(
                session,
                job,
                ev.phase,
                now=now,
                reason=ev.message or None,
                pods_gone=True,
            )
        elif ev.phase == "gone":
            change_state(
                session,
                job,
                "pending",
                now=now,
                event_type="requeued",
                reason=f"pods lost on the cluster: {ev.message}" if ev.message else "pods lost",
                pods_gone=True,
            )

    def _retry_limit(self, job: JobRow) -> int:
        """The job's ``failure_policy`` (restart the whole gang N times, or fail), else the
        cluster-wide retry count."""
        policy = (job.spec or {}).get("failure_policy")
        if policy is None:
            return self.max_retries
        return FailurePolicy.model_validate(policy).restarts_allowed()

    @staticmethod
    def _retries(session: Session, job: JobRow) -> int:
        return int(
            session.scalar(
                select(func.count())
                .select_from(JobEventRow)
                .where(JobEventRow.job_id == job.id, JobEventRow.type == "retried")
            )
            or 0
        )

    # 3. reconcile ---------------------------------------------------------

    def reconcile(self) -> Plan:
        plan = Plan()
        view = cluster_view(self.cluster)
        on_cluster = view.running
        with self.session_factory() as session:
            if finalise(session, view):  # stopped Pods gone since the last pass
                session.commit()
            active: dict[str, Any]
            if self.picture is not None:
                # ids and states only; rows are loaded just for the few to repair
                active = {
                    str(i): st
                    for i, st in session.execute(
                        select(JobRow.id, JobRow.status).where(JobRow.status.in_(ACTIVE))
                    )
                }
                missing = [
                    int(i) for i, st in active.items() if st == "admitted" and i not in view.live
                ]
                if missing:
                    for j in session.scalars(
                        select(JobRow)
                        .where(JobRow.id.in_(missing))
                        .options(selectinload(JobRow.allocations))
                    ):
                        active[str(j.id)] = j
            else:
                active = {
                    str(j.id): j
                    for j in session.scalars(
                        select(JobRow)
                        .where(JobRow.status.in_(ACTIVE))
                        .options(selectinload(JobRow.allocations))
                    )
                }
            for job_id in sorted(on_cluster - set(active)):
                plan.stops.append((job_id, "job no longer holds capacity"))
            now = self.clock()
            changed = False
            for job_id, job in active.items():
                if job_id in view.live:  # its current attempt has Pods
                    continue
                if isinstance(job, JobRow) and job.status == "admitted":
                    plan.binds.append(bind_request(job))
                elif job == "admitted":
                    continue  # vanished between the two reads: nothing to bind
                else:
                    locked = _locked_job(session, job_id)
                    if locked is not None and locked.status == "running":
                        change_state(
                            session,
                            locked,
                            "pending",
                            now=now,
                            event_type="requeued",
                            reason="pods lost on the cluster (restart or node failure)",
                            pods_gone=True,
                        )
                        changed = True
            if changed:
                session.commit()
        return plan

    # 4 + 5. plan and write ------------------------------------------------

    def plan_and_commit(self, decide: Decide | None = None) -> Plan:
        try:
            return self._plan_and_commit(decide)
        except BaseException:
            if self.picture is not None:
                self.picture.invalidate()  # what it holds may be ahead of the database
            raise

    def _plan_and_commit(self, decide: Decide | None) -> Plan:
        plan = Plan()
        self._order_written = None
        timings = self.timings = {}
        with self.session_factory() as session:
            now = self.clock()
            t0 = time.perf_counter()
            if self.picture is not None:
                ctx = self.picture.refresh(session, now)
                hold_releasing_in_context(session, ctx)  # build_snapshot does it itself
            else:
                ctx = build_snapshot(session, now)
            if self.live_nodes is not None:
                ctx.snapshot.nodes = list(self.live_nodes)
                hold_in_snapshot(ctx.snapshot, ctx.releasing)  # stopping Pods hold capacity
            t1 = time.perf_counter()
            result = (decide or get_policy(self.policy_name))(ctx.snapshot)
            t2 = time.perf_counter()
            timings["snapshot"], timings["core"] = t1 - t0, t2 - t1
            plan.grace_seconds = ctx.snapshot.config.preemption_grace_s
            plan.result = result
            self.last_result = result
            decided = (
                {a.job_id for a in result.admissions}
                | {p.job_id for p in result.preemptions}
                | set(result.unschedulable)
            )
            victims = {p.job_id for p in result.preemptions}
            batch: list[tuple[Admission, int]] = []
            if self.picture is not None:
                # admissions of jobs nobody preempts this cycle are written as one batch
                # (the revision check is in the statement); the rest row by row
                for a in result.admissions:
                    rev = ctx.revisions.get(a.job_id)
                    if a.job_id not in victims and rev is not None and a.job_id.isdigit():
                        batch.append((a, rev))
            batched = {a.job_id for a, _ in batch}
            jobs = _lock_jobs(session, decided - batched)

            def fresh(job_id: str) -> JobRow | None:
                job = jobs.get(job_id)
                if job is None or job.revision != ctx.revisions.get(job_id):
                    return None  # changed since the snapshot: leave it to the next cycle
                return job

            requeued: set[str] = set()  # a moved job is preempted, then admitted anew
            for p in result.preemptions:
                job = fresh(p.job_id)
                if job is not None and job.status in ACTIVE:
                    self._preempt(session, job, p, now)
                    plan.stops.append((p.job_id, p.reason))
                    requeued.add(p.job_id)
            for a in result.admissions:
                if a.job_id in batched:
                    continue
                job = jobs.get(a.job_id) if a.job_id in requeued else fresh(a.job_id)
                if job is not None and job.status == "pending":
                    self._admit(session, job, a, now)
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
            queue_rows: list[dict[str, Any]] = []
            if decide is None:  # partial decisions (descheduler, reaper) leave the queue be
                queue_rows = self._write_queue(session, ctx, result, decided)
            session.commit()
            if self.picture is not None:
                self.picture.queue_written(queue_rows, self._order_written, ctx.snapshot.now)
            timings["write"] = time.perf_counter() - t2
        return plan

    def _write_queue(
        self, session: Session, ctx: SnapshotContext, result: CycleResult, decided: set[str]
    ) -> list[dict[str, Any]]:
        """Reasons of jobs left pending, and the dispatch order.

        The order is one array row (``queue_order``); reasons are written only
        where they changed, in one statement, and only if the job is still
        pending at the revision the snapshot saw. (The full-reload baseline
        also renumbers ``jobs.queue_position``, as it always did.)
        """
        still_pending = [j for j in result.order if j not in decided]
        order = [int(j) for j in still_pending if j.isdigit()]
        conn = session.connection()
        if self.picture is None:
            queue_order.write_order(conn, order)
        elif self.picture.written_order != order:
            queue_order.write_order(conn, order, self.picture.owner)
        if self.picture is not None:
            # A reason whose text changed only in its numbers ("largest free block:
            # v100-16g 1" -> "0") is rewritten at most every reason_refresh_s per job:
            # with a large backlog such changes otherwise rewrite thousands of rows a pass.
            now = ctx.snapshot.now
            rows = []
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
                rows.append(
                    {"b_id": int(job_id), "b_rev": ctx.revisions[job_id], "b_reason": new_reason}
                )
            if rows:
                conn.execute(
                    _WRITE_REASONS,
                    {
                        "ids": [r["b_id"] for r in rows],
                        "revs": [r["b_rev"] for r in rows],
                        "reasons": [r["b_reason"] for r in rows],
                    },
                )
            self._order_written = order
            return rows
        position = {job_id: i + 1 for i, job_id in enumerate(still_pending)}
        rows = []
        for job_id, (reason, old_pos) in ctx.pending_meta.items():
            if job_id in decided:
                continue
            new_reason = result.reasons.get(job_id, reason)
            new_pos = position.get(job_id)
            if new_reason != reason or new_pos != old_pos:
                rows.append(
                    {
                        "b_id": int(job_id),
                        "b_rev": ctx.revisions[job_id],
                        "b_reason": new_reason,
                        "b_pos": new_pos,
                    }
                )
        if not rows:
            return rows
        jobs = JobRow.__table__
        stmt = (
            update(jobs)
            .where(
                jobs.c.id == bindparam("b_id"),
                jobs.c.revision == bindparam("b_rev"),
                jobs.c.status == "pending",
            )
            .values(reason=bindparam("b_reason"), queue_position=bindparam("b_pos"))
        )
        session.connection().execute(stmt, rows)
        return rows

    def _admit(self, session: Session, job: JobRow, a: Admission, now: datetime) -> None:
        for p in a.placements:
            session.add(
                AllocationRow(
                    job_id=job.id,
                    replica=p.replica,
                    node=p.node,
                    gpu_type=p.gpu_type,
                    devices=list(p.devices),
                    mig=[list(m) for m in p.mig],
                    share=p.share,
                    share_memory_gb=p.share_memory_gb,
                    units=p.units,
                    cpu=p.cpu,
                    memory_gb=p.memory_gb,
                    pool=job.pool,
                )
            )
        for g in a.leases:
            session.add(
                LeaseRow(
                    borrower=g.borrower,
                    lender=g.lender,
                    gpu_type=g.gpu_type,
                    units=g.units,
                    job_id=job.id,
                    started_at=now,
                    expires_at=from_epoch(g.expires_at),
                    state="active",
                )
            )
        job.units = a.units
        for note in a.notes:  # e.g. "duration_estimate_s outlasts its lease"
            record_event(session, job, "lease_warning", now=now, reason=note)
        change_state(
            session,
            job,
            "admitted",
            now=now,
            data=admission_event_data(a),
        )

    def _preempt(self, session: Session, job: JobRow, p: Preemption, now: datetime) -> None:
        by = f" by job {p.by_job}" if p.by_job else ""
        change_state(
            session,
            job,
            "pending",
            now=now,
            event_type="reclaimed" if p.kind == "reclaim" else "preempted",
            lease_state="reclaimed" if p.kind == "reclaim" else "returned",
            reason=f"{'reclaimed' if p.kind == 'reclaim' else 'preempted'}{by}: {p.reason}",
            data={"by_job": p.by_job, "kind": p.kind},
        )

    # 6. perform -----------------------------------------------------------

    def perform(self, plan: Plan) -> None:
        grace = self.grace_seconds if plan.grace_seconds is None else plan.grace_seconds
        for job_id, reason in plan.stops:
            try:
                self.cluster.stop(job_id, reason, grace_seconds=grace)
            except Exception:
                self.log.exception("stopping job %s failed; will retry at reconcile", job_id)
        blocked = self._release_and_gate(plan.binds)
        for req in plan.binds:
            if req.job_id in blocked:
                self.log.info("job %s stays admitted: %s", req.job_id, blocked[req.job_id])
                continue  # bound by reconcile once the capacity is released
            try:
                self.cluster.bind(req)
            except BindError as e:
                self._undo_bind(req.job_id, str(e), permanent=e.permanent)

    def _release_and_gate(self, binds: list[BindRequest]) -> dict[str, str]:
        """After the stops: release what the cluster already let go (a synchronous
        stop frees capacity in the same pass), then name the binds that would
        land on capacity stopping Pods still hold (app/store/releasing.py)."""
        with self.session_factory() as session:
            if not any_releasing(session):
                return {}
            if finalise(session, cluster_view(self.cluster)):
                session.commit()
            return blocked_binds(session, binds)

    def _undo_bind(self, job_id: str, message: str, *, permanent: bool = False) -> None:
        with self.session_factory() as session:
            job = _locked_job(session, job_id)
            if job is not None and job.status == "admitted":
                change_state(
                    session,
                    job,
                    # a Pod the cluster rejects as invalid would fail every retry
                    "failed" if permanent else "pending",
                    now=self.clock(),
                    event_type="bind_failed",
                    reason=f"bind failed: {message}",
                )
                session.commit()
                # the cluster undid the bind: free at once what it no longer holds
                if finalise(session, cluster_view(self.cluster)):
                    session.commit()


def _locked_job(session: Session, job_id: str) -> JobRow | None:
    try:
        jid = int(job_id)
    except ValueError:
        return None
    return session.scalar(
        select(JobRow)
        .where(JobRow.id == jid)
        .options(selectinload(JobRow.allocations))
        .with_for_update()
    )


def _lock_jobs(
    session: Session, job_ids: set[str], *, with_allocations: bool = True
) -> dict[str, JobRow]:
    ids = [int(j) for j in job_ids if j.isdigit()]
    if not ids:
        return {}
    q = select(JobRow).where(JobRow.id.in_(ids)).order_by(JobRow.id).with_for_update()
    if with_allocations:
        q = q.options(selectinload(JobRow.allocations))
    rows = session.scalars(q)
    return {str(r.id): r for r in rows}

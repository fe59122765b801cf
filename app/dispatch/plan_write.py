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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from sqlalchemy.orm import Session, sessionmaker

from app.dispatch.bind_holds import BindHolds
from app.dispatch.leader import LeaderElector
from app.dispatch.picture import QueuePicture
from app.dispatch.plan import Plan, bind_request
from app.domain.runtime_history import RuntimeHistory
from app.scheduling.model import (
    Admission,
    CycleResult,
    FairState,
    LeaseReturn,
    Node,
    Preemption,
    Snapshot,
)
from app.scheduling.policies import get_policy
from app.scheduling.preemption import stop_sentence
from app.scheduling.releasing import hold_in_snapshot
from app.scheduling.verdicts import Reason, code_of
from app.store import batch_states, queue_order
from app.store.cordon import cordoned_nodes
from app.store.fair_state import read_fair, write_fair
from app.store.lease_returns import return_leases
from app.store.node_rows import fingerprint
from app.store.requeue import any_unschedulable, requeue_if_fits
from app.store.runtime_history_rows import read_history
from app.store.snapshot import SnapshotContext
from app.store.state_changes import Change, apply_changes

Decide = Callable[[Snapshot], CycleResult]
_UNREAD = object()  # no leader term has read the deficits yet
_D = TypeVar("_D", Admission, Preemption, LeaseReturn)


class PlanAndWrite:
    def __init__(
        self,
        session_factory: sessionmaker[Session],
        picture: QueuePicture,
        clock: Callable[[], datetime],
        policy: str = "gpuq",
        holds: BindHolds | None = None,
        elector: LeaderElector | None = None,
        avoided_nodes: Callable[[], Mapping[str, frozenset[str]]] | None = None,
    ) -> None:
        # the cluster's nodes to keep each job off for now (Cluster.avoided_nodes)
        self.avoided_nodes = avoided_nodes
        # the leader elector: the write transaction commits only in its epoch (fenced)
        self.elector = elector
        self.session_factory = session_factory
        # jobs whose bind was refused for a passing reason sit out their backoff
        self.holds = holds or BindHolds()
        self.picture = picture
        self.clock = clock
        self.policy_name = policy
        self.reason_refresh_s = 5.0  # see _write_queue
        self.timings: dict[str, float] = {}  # snapshot / core / write seconds, last run
        # the inventory unschedulable jobs were last re-checked against (see _recheck)
        self.inventory_sig: tuple[str, str, str] | None = None
        # the teams' deficits the core returned last pass (app/scheduling/deficit.py),
        # written with each pass and read back by a new leader (app/store/fair_state.py)
        self.fair: FairState | None = None
        self._fair_term: object = _UNREAD  # the leader term self.fair was read in
        # run-time predictions from the teams' history (app/domain/runtime_history.py)
        self.history = RuntimeHistory()

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
            ctx = self._snapshot(session, now, live_nodes)
            if decide is None and self._recheck(session, ctx.snapshot, now):
                self.picture.invalidate()  # requeued jobs join this very cycle
                ctx = self._snapshot(session, now, live_nodes)
            t1 = time.perf_counter()
            term = self.elector.epoch if self.elector is not None else None
            if term != self._fair_term:  # a new term: what the last leader left
                self.fair = read_fair(session)
                self._fair_term = term
            ctx.snapshot.fair = self.fair
            self._predict(session, ctx.snapshot)
            result = (decide or get_policy(self.policy_name))(ctx.snapshot)
            keep_fair = decide is None and result.fair is not None and result.fair != self.fair
            t2 = time.perf_counter()
            timings["snapshot"], timings["core"] = t1 - t0, t2 - t1
            plan.grace_seconds = ctx.snapshot.config.preemption_grace_s
            plan.result = result
            conn = session.connection()
            # Each kind of decision is one set-based change; a job that changed since
            # the snapshot (its revision moved on: a cancel raced the cycle) is left
            # to the next cycle by the statement itself.
            preempted = apply_changes(
                conn, [_preemption(p, rev) for p, rev in _seen(result.preemptions, ctx)], now
            )
            stopped: set[str] = set()
            for p in result.preemptions:
                if _id(p.job_id) in preempted and p.job_id not in stopped:
                    plan.stops.append((p.job_id, p.reason))
                    stopped.add(p.job_id)
            # a moved job is preempted, then admitted anew at its new revision
            admissions = [
                (a, preempted[i].revision if i in preempted else rev)
                for a, rev in _seen(result.admissions, ctx)
                for i in (int(a.job_id),)
            ]
            admitted = batch_states.admit_many(conn, admissions, now)
            plan.binds += [bind_request(admitted[int(a.job_id)], list(a.placements))
                           for a, _ in admissions if int(a.job_id) in admitted]
            unschedulable = [
                Change(int(job_id), "unschedulable", reason=why, revision=ctx.revisions[job_id])
                for job_id, why in result.unschedulable.items()
                if job_id in ctx.revisions and job_id.isdigit()
            ]
            apply_changes(conn, unschedulable, now)
            # leases now on the borrower's own guarantee; after the state changes, so a
            # job also stopped this cycle keeps its snapshot revision for them
            return_leases(conn, _seen(result.returned, ctx), now)
            decided = (
                {a.job_id for a in result.admissions}
                | {p.job_id for p in result.preemptions}
                | set(result.unschedulable)
            )
            reasons: list[tuple[int, int, str | None, float | None]] = []
            order: list[int] | None = None
            if decide is None:  # partial decisions (descheduler, reaper) leave the queue be
                order, reasons = self._write_queue(session, ctx, result, decided)
            if keep_fair:
                assert result.fair is not None
                write_fair(session, result.fair)
            if self.elector is not None:
                self.elector.fence(session)  # NotLeader: a new leader's term; roll back
            session.commit()
            if keep_fair:
                self.fair = result.fair
            self.picture.queue_written(reasons, order, ctx.snapshot.now)
            timings["write"] = time.perf_counter() - t2
        return plan

    def _snapshot(
        self, session: Session, now: datetime, live_nodes: list[Node] | None
    ) -> SnapshotContext:
        ctx = self.picture.refresh(session, now)
        held = self.holds.held()
        if held:  # a new list: the picture keeps its own
            ctx.snapshot.pending = [j for j in ctx.snapshot.pending if j.id not in held]
        avoid = self.avoided_nodes() if self.avoided_nodes is not None else {}
        if avoid:  # requests are the picture's: a changed copy, never the cached one
            ctx.snapshot.pending = [replace(j, avoid_nodes=avoid[j.id]) if j.id in avoid
                                    else j for j in ctx.snapshot.pending]
        if live_nodes is not None:
            # an operator's cordon applies to a live cluster's nodes too (app/store/cordon.py)
            cordoned = cordoned_nodes(session)
            ctx.snapshot.nodes = [
                replace(n, schedulable=False) if n.name in cordoned and n.schedulable else n
                for n in live_nodes
            ]
            hold_in_snapshot(ctx.snapshot, ctx.releasing)  # stopping Pods hold capacity
        return ctx

    def _predict(self, session: Session, snap: Snapshot) -> None:
        """Jobs without an estimate carry the run time their team's history predicts
        (``JobRequest.predicted_s``); new lists, the picture keeps its own."""
        self.history.stats = read_history(session).stats
        n = len(snap.pending)
        jobs = self.history.annotate([*snap.pending, *(r.request for r in snap.running)])
        snap.pending = jobs[:n]
        snap.running = [r if r.request is j else replace(r, request=j)
                        for r, j in zip(snap.running, jobs[n:], strict=True)]

    def _recheck(self, session: Session, snap: Snapshot, now: datetime) -> bool:
        """When the inventory changed since the last look (a node added,
        uncordoned, relabelled, its MIG layout cut anew; a GPU type or pool
        edited), every ``unschedulable`` job that could now fit goes back to
        the queue (app/store/requeue.py). True if any did."""
        if not any_unschedulable(session):
            return False
        sig = (fingerprint(snap.nodes), repr(sorted(snap.gpu_types.items())),
               repr(sorted(snap.pools.items())))
        if sig == self.inventory_sig:
            return False
        self.inventory_sig = sig
        return bool(requeue_if_fits(session, snap, now))

    def _write_queue(
        self, session: Session, ctx: SnapshotContext, result: CycleResult, decided: set[str]
    ) -> tuple[list[int], list[tuple[int, int, str | None, float | None]]]:
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
        rows: list[tuple[int, int, str | None, float | None]] = []
        for job_id, (reason, _) in ctx.pending_meta.items():
            if job_id in decided:
                continue
            new_reason = result.reasons.get(job_id, reason)
            start = _start_named(new_reason, now)
            if new_reason == reason and code_of(new_reason) == code_of(reason):
                # the same words and code (a row written by an older release may carry
                # the words without it); the start they name may have moved on (a first write
                # after a restart knows none): rewritten at most every reason_refresh_s
                if not self.picture.start_moved(job_id, start, now, self.reason_refresh_s):
                    continue
            elif (
                reason is not None
                and new_reason is not None
                and self.picture.reason_is_fresh(
                    job_id, reason, new_reason, now, self.reason_refresh_s
                )
            ):
                continue
            rows.append((int(job_id), ctx.revisions[job_id], new_reason, start))
        queue_order.write_reasons(conn, rows)
        return order, rows


def _start_named(reason: str | None, now: float) -> float | None:
    """The start (epoch) a core reason names through its ``start_in_s`` field (a
    reservation, other jobs' reservations, a preemption the preemptor would make), or
    None: the time is stored beside the words, never parsed back out of them."""
    if not isinstance(reason, Reason):
        return None
    s = reason.fields.get("start_in_s")
    return None if s is None else now + float(s)


def _id(job_id: str) -> int:
    return int(job_id) if job_id.isdigit() else -1


def _seen(decisions: Sequence[_D], ctx: SnapshotContext) -> list[tuple[_D, int]]:
    """Decisions about jobs the snapshot saw, each with the revision it saw."""
    return [
        (d, ctx.revisions[d.job_id])
        for d in decisions
        if d.job_id in ctx.revisions and d.job_id.isdigit()
    ]


def _preemption(p: Preemption, revision: int) -> Change:
    """The victim's change: its event's reason, and its pending reason until the
    next cycle explains why it waits, is :func:`stop_sentence` (who and why, once)."""
    reclaim = p.kind == "reclaim"
    return Change(
        int(p.job_id),
        "pending",
        reason=stop_sentence(p),
        event_type="reclaimed" if reclaim else "preempted",
        lease_state="reclaimed" if reclaim else "returned",
        data={"by_job": p.by_job, "kind": p.kind},
        revision=revision,
    )

"""Bind (step 6 of a pass): perform a committed plan on the cluster.

Stops first (victims free their capacity), then binds. A bind that would
land on capacity stopping Pods still hold waits (the job stays admitted;
reconcile binds it once the capacity is released). A failed bind is undone:
every reserve has an unreserve: the job fails when the cluster refused its Pod for
a reason of the job's own (app/cluster/k8s_refusals.py), else it goes back to the
queue and is held out of the plan with backoff (app/dispatch/bind_holds.py), so a
lasting refusal never becomes a create/delete loop.

Binds of different jobs are independent (the plan reserved distinct capacity), so up
to ``workers`` of them run at once (the cluster's ``bind_workers``: kube-scheduler's
asynchronous binding cycle, pkg/scheduler/schedule_one.go), a window that starts the
next bind as soon as one ends: leadership is re-checked before every ``workers`` binds
started and the epoch stamped on each, in this thread, and the outcomes are applied
here in the plan's order.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from app.cluster.interface import BindError, BindRequest
from app.dispatch.bind_holds import BindHolds
from app.dispatch.leader import LeaderElector
from app.dispatch.loops import Part, log
from app.dispatch.plan import Plan
from app.dispatch.releasing_view import cluster_view
from app.store.dispatch_rows import lock_job
from app.store.releasing_rows import any_releasing, blocked_binds, finalise
from app.store.state_changes import change_state

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def bind_pool(workers: int) -> ThreadPoolExecutor:
    """One pool of bind threads per size for the whole process: every dispatcher of a
    process (tests make many) shares it, so idle threads never pile up."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="gpuq-bind")
        return pool


@dataclass
class Binder(Part):
    grace_seconds: float = 30.0  # unless the scheduler config sets preemption_grace_s
    holds: BindHolds = field(default_factory=BindHolds)  # shared with the planner
    # the leader elector: every stop and bind of a committed plan re-checks leadership
    # and stamps the epoch (None: a single dispatcher, always leading)
    elector: LeaderElector | None = None
    workers: int = 1  # binds in flight at once (module docstring)

    def leading(self) -> bool:
        """Still the leader, right before a cluster call (lock and epoch re-checked)."""
        if self.elector is None or self.elector.still_leader():
            return True
        log.warning("leadership lost mid-pass: the committed plan is left to the new "
                    "leader (its reconcile binds or stops what this one did not)")
        return False

    def perform(self, plan: Plan) -> None:
        grace = self.grace_seconds if plan.grace_seconds is None else plan.grace_seconds
        if (plan.stops or plan.binds) and not self.leading():
            return
        for job_id, reason in plan.stops:
            try:
                self.cluster.stop(job_id, reason, grace_seconds=grace)
            except Exception:
                log.exception("stopping job %s failed; will retry at reconcile", job_id)
        blocked = self.release_and_gate(plan.binds)
        todo = []
        for req in plan.binds:
            if req.job_id in blocked:
                log.info("job %s stays admitted: %s", req.job_id, blocked[req.job_id])
                continue  # bound by reconcile once the capacity is released
            todo.append(req)
        step = max(1, self.workers)
        # a window of ``step`` binds in flight: a bind starts as soon as one ends (not
        # when the slowest of a batch does); outcomes are applied in the plan's order
        pending: deque[tuple[BindRequest, Future[BindError | None]]] = deque()
        started = 0  # binds started since leadership was last checked
        try:
            for req in todo:
                if started % step == 0:  # at most ``step`` binds per check, as before
                    if not self.leading():
                        return
                    started = 0
                if self.elector is not None:
                    req.leader_epoch = self.elector.epoch
                started += 1
                if step == 1:
                    self._settle(req, self._bind_one(req))
                    continue
                running = [f for _, f in pending if not f.done()]
                while len(running) >= step:
                    wait(running, return_when=FIRST_COMPLETED)
                    running = [f for f in running if not f.done()]
                self._settle_done(pending)
                pending.append((req, bind_pool(self.workers).submit(self._bind_one, req)))
        finally:  # the binds already started end, and their outcomes are applied
            for _, f in pending:
                with contextlib.suppress(Exception):
                    f.result()
            self._settle_done(pending)

    def _settle_done(self, pending: deque[tuple[BindRequest, Future[BindError | None]]]
                     ) -> None:
        """Apply the outcomes of the binds that ended, oldest first, up to the first
        still running (the plan's order)."""
        while pending and pending[0][1].done():
            req, f = pending.popleft()
            self._settle(req, f.result())

    def _settle(self, req: BindRequest, err: BindError | None) -> None:
        if err is not None:
            self.undo_bind(req.job_id, str(err), permanent=err.permanent, hold=err.hold)
        else:
            self.holds.clear(req.job_id)

    def _bind_one(self, req: BindRequest) -> BindError | None:
        try:
            self.cluster.bind(req)
        except BindError as e:
            return e
        return None

    def release_and_gate(self, binds: list[BindRequest]) -> dict[str, str]:
        """After the stops: release what the cluster already let go (a synchronous
        stop frees capacity in the same pass), then name the binds that would
        land on capacity stopping Pods still hold (app/store/releasing_rows.py)."""
        with self.session_factory() as session:
            if not any_releasing(session):
                return {}
            if finalise(session, cluster_view(self.cluster)):
                session.commit()
            return blocked_binds(session, binds)

    def undo_bind(self, job_id: str, message: str, *, permanent: bool = False,
                  hold: bool = True) -> None:
        reason = f"bind failed: {message}"
        if not permanent and hold:
            held = self.holds.hold(job_id)
            reason += f" (next try in {held:.0f} s, try {self.holds.failures(job_id)})"
        with self.session_factory() as session:
            job = lock_job(session, job_id)
            if job is not None and job.status == "admitted":
                change_state(
                    session,
                    job,
                    # a Pod the cluster refuses for the job's own reason fails every retry
                    "failed" if permanent else "pending",
                    now=self.clock(),
                    event_type="bind_failed",
                    reason=reason,
                )
                if self.elector is not None:
                    self.elector.fence(session)  # a deposed leader never requeues a job
                session.commit()
                # the cluster undid the bind: free at once what it no longer holds
                if finalise(session, cluster_view(self.cluster)):
                    session.commit()

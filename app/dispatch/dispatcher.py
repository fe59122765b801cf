"""The dispatcher: snapshot -> pure core -> one transaction -> cluster calls.

One pass (:meth:`Dispatcher.run_once`) runs its parts in order, each a
module of its own that can be tested alone:

1. Leadership (here): with a live cluster (Kubernetes) only the holder of the
   session advisory lock of :class:`~app.dispatch.leader.LeaderElector`
   dispatches; standbys keep their cluster cache warm and take over when the
   leader's session dies. Every pass also takes ``pg_try_advisory_lock`` for
   its critical section, so any number of replicas is safe.
2. Ingest (:mod:`~app.dispatch.ingest`): what the cluster reports (running,
   succeeded, failed, gone).
3. Reconcile (:mod:`~app.dispatch.reconcile`): live clusters' nodes and, after
   a leader change, their Pods; pods of jobs that no longer hold capacity are
   stopped; admitted jobs without pods are bound (this is how a crash between
   commit and bind is repaired); running jobs whose pods vanished are requeued.
4. + 5. Plan and write (:mod:`~app.dispatch.plan_write`): the snapshot from the
   incremental picture (:mod:`~app.dispatch.picture`), the core, every decision
   in one transaction, skipping jobs that changed since the snapshot.
6. Bind (:mod:`~app.dispatch.bind`): stop victims first, then bind; a failed
   bind is undone - every reserve has an unreserve; binds onto capacity that
   stopping Pods still hold wait (:mod:`~app.dispatch.releasing_view`).

One decision thread: the descheduler, the lease reaper and the tuner are
:class:`~app.dispatch.loops.Step` s run by :meth:`Dispatcher.run_pass` in the
dispatcher's own thread when due; other threads can only wake it. So the
picture and everything else the dispatcher holds is touched by one thread.

The database is the truth: a crash at any point leaves allocations that
either match a bind that will happen (step 3) or were never written.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.clock import utcnow
from app.cluster.interface import Cluster
from app.dispatch.bind import Binder
from app.dispatch.ingest import Ingest
from app.dispatch.leader import LeaderElector
from app.dispatch.loops import LoopService, Step
from app.dispatch.picture import QueuePicture
from app.dispatch.plan import Plan
from app.dispatch.plan_write import Decide, PlanAndWrite
from app.dispatch.reconcile import Reconcile
from app.dispatch.workloads import FrontDoor
from app.scheduling.model import CycleResult, Node

ADVISORY_LOCK_KEY = 0x67707571  # "gpuq"
#: exit status of a process ended by the pass watchdog (sysexits.h EX_SOFTWARE)
EXIT_PASS_OVERRUN = 70


def exit_process() -> None:
    """End the process now (the Deployment restarts it): a thread stuck in a call
    cannot be interrupted, and a clean interpreter shutdown would wait for it."""
    logging.shutdown()
    os._exit(EXIT_PASS_OVERRUN)


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
        picture: QueuePicture | None = None,
        pass_deadline_s: float = 0.0,
        on_overrun: Callable[[], None] = exit_process,
    ) -> None:
        super().__init__(interval)
        # a pass running longer than this ends the process after stepping down (0: never)
        self.pass_deadline_s = pass_deadline_s
        self.on_overrun = on_overrun
        self.session_factory = session_factory
        self.cluster = cluster
        self.clock = clock
        self.elector = elector
        if elector is not None:
            elector.on_change = self._leadership_changed
        self.ingest = Ingest(session_factory, cluster, clock, max_retries)
        self.reconciler = Reconcile(session_factory, cluster, clock, grace_seconds,
                                    elector=elector)
        # the queue and the cluster as of the last pass, refreshed incrementally
        # writes fenced by the leader epoch; cluster calls re-check leadership first
        self.planner = PlanAndWrite(session_factory, picture or QueuePicture(), clock, policy,
                                    elector=elector, avoided_nodes=cluster.avoided_nodes)
        # a bind refused for a passing reason holds its job out of the plan (backoff)
        self.binder = Binder(session_factory, cluster, clock, grace_seconds,
                             holds=self.planner.holds, elector=elector,
                             workers=cluster.capabilities.bind_workers)
        # Kubernetes-native workloads join the queue (and leave it) before ingest
        self.front_door = (FrontDoor(session_factory, cluster, clock)
                           if cluster.capabilities.workloads else None)
        self.steps: list[Step] = []
        self.timings: dict[str, float] = {}  # seconds per step of the last pass
        self.last_result: CycleResult | None = None

    # the one decision thread ------------------------------------------------

    def add_step(self, step: Step) -> Step:
        """Run ``step`` in this dispatcher's thread whenever it is due."""
        step.attach(self)
        self.steps.append(step)
        return step

    def run_pass(self) -> None:
        """One turn of the loop thread: the dispatch pass, then the steps due."""
        try:
            self.run_once()
        finally:
            now = time.monotonic()
            for step in self.steps:
                step.run_if_due(now)

    def seconds_to_next_pass(self, took: float) -> float:
        now = time.monotonic()
        wait = super().seconds_to_next_pass(took)
        return min([wait, *(s.seconds_to_due(now) for s in self.steps)])

    @property
    def picture(self) -> QueuePicture:
        return self.planner.picture

    # 1. leadership --------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self.session_factory.kw["bind"]

    def _leadership_changed(self, leader: bool) -> None:
        if leader:
            self.reconciler.after_leader_change = True
        else:
            # the next leader re-derives them from the cluster; kept, they could
            # finish an attempt that leader started meanwhile
            self.ingest.forget()
        self.picture.invalidate()  # another leader wrote meanwhile: start afresh

    def start(self, loops: int | None = None) -> None:
        if self.pass_deadline_s > 0:
            threading.Thread(target=self._watchdog, name="gpuq-pass-watchdog",
                             daemon=True).start()
        try:
            super().start(loops)
        finally:
            if self.elector is not None:
                self.elector.release()  # a standby takes over at once

    def _watchdog(self) -> None:
        """End the process when a pass overruns ``pass_deadline_s`` (every API call is
        bounded, so only a defect or a wedged database gets here): step down first, so
        a standby leads at once instead of after the session times out."""
        period = min(5.0, max(0.05, self.pass_deadline_s / 4))
        while not self._stop.wait(period):
            started = self.pass_started
            if started is None or time.monotonic() - started <= self.pass_deadline_s:
                continue
            self.log.error("pass running for %.0f s, beyond its bound of %g s "
                           "(GPUQ_PASS_DEADLINE): stepping down and ending the process",
                           time.monotonic() - started, self.pass_deadline_s)
            if self.elector is not None:
                # the stuck thread may hold the elector's connection: bounded wait
                t = threading.Thread(target=self.elector.release, daemon=True)
                t.start()
                t.join(5.0)
            self.on_overrun()
            return

    def run_once(self) -> None:
        self.run_with(None)

    def run_with(self, decide: Decide | None) -> CycleResult | None:
        """One leader-only pass that persists ``decide(snapshot)`` (default: the
        policy) -- the descheduler and the lease reaper write through here, so
        every decision takes the same path. None when another process leads."""
        try:
            return self._run_with(decide)
        except BaseException:
            # A failed pass (connection killed, failover, serialization error) may
            # have lost track of what the cluster did: the next pass re-reads the
            # cluster's view of every job holding capacity.
            self.reconciler.after_leader_change = True
            self.picture.invalidate()
            raise

    def _run_with(self, decide: Decide | None) -> CycleResult | None:
        if self.elector is not None and not self.elector.ensure():
            # Standby: do not act, but do not let the cluster's events pile up
            # either (a new leader reconciles from the Pods themselves).
            self.cluster.forget_events()
            self.ingest.forget()
            return None
        with self.engine.connect() as conn:
            leader = conn.scalar(select(func.pg_try_advisory_lock(ADVISORY_LOCK_KEY)))
            conn.commit()
            if not leader:
                self.log.debug("another dispatcher holds the lock; skipping this pass")
                self.picture.invalidate()
                return None
            try:
                timings: dict[str, float] = {}
                t0 = time.perf_counter()
                self.sync_cluster()
                if self.front_door is not None:
                    self.front_door.run()
                self.ingest_events()
                plan = self.reconcile()
                timings["ingest"] = time.perf_counter() - t0
                plan.extend(self.plan_and_commit(decide))
                timings.update(self.planner.timings)
                t0 = time.perf_counter()
                self.perform(plan)
                self.ingest_events()  # pods that started during perform show as running now
                timings["perform"] = time.perf_counter() - t0
                self.timings = timings
                return plan.result
            finally:
                conn.execute(select(func.pg_advisory_unlock(ADVISORY_LOCK_KEY)))
                conn.commit()

    # the parts, by name ----------------------------------------------------

    @property
    def live_nodes(self) -> list[Node] | None:
        return self.reconciler.live_nodes

    def sync_cluster(self) -> None:
        self.reconciler.sync_cluster()

    def ingest_events(self) -> None:
        self.ingest.run()

    def reconcile(self) -> Plan:
        return self.reconciler.run()

    def plan_and_commit(self, decide: Decide | None = None) -> Plan:
        plan = self.planner.run(decide, self.reconciler.live_nodes)
        self.last_result = plan.result
        return plan

    def perform(self, plan: Plan) -> None:
        self.binder.perform(plan)

"""Reconcile (step 3 of a pass): the database and the cluster agree again.

* Live clusters first (:meth:`Reconcile.sync_cluster`): their nodes are
  mirrored into the nodes table, they learn the GPU types, and after a
  leader change the cluster squares its Pods with the jobs that hold
  capacity (adopt, remove orphans and half-bound gangs).
* Then (:meth:`Reconcile.run`): capacity of stopped Pods that are gone is
  released; Pods of jobs that no longer hold capacity are to be stopped;
  admitted jobs without Pods are to be bound (this is how a crash between
  commit and bind is repaired); running jobs whose Pods vanished are
  requeued.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from app.dispatch.leader import LeaderElector, NotLeader
from app.dispatch.loops import Part, log
from app.dispatch.plan import Plan, bind_request
from app.dispatch.releasing_view import cluster_view
from app.scheduling.model import Node
from app.store.dispatch_rows import (
    active_owners,
    active_states,
    jobs_with_allocations,
    lock_job,
    past_time_limit,
)
from app.store.live_allocations import booked_among
from app.store.node_rows import fingerprint, gpu_type_configs, sync_node_rows
from app.store.orm import JobRow
from app.store.releasing_rows import finalise, moved_placements
from app.store.state_changes import change_state


@dataclass
class Reconcile(Part):
    grace_seconds: float = 30.0  # for Pods a reconcile evicts
    after_leader_change: bool = True  # the first pass as leader squares the cluster
    live_nodes: list[Node] | None = None  # a live cluster's nodes, this pass
    elector: LeaderElector | None = None  # re-checked before it stops orphans; fences writes
    _nodes_fingerprint: str | None = field(default=None, repr=False)

    def sync_cluster(self) -> None:
        """Live clusters: nodes from the cluster (mirrored into the nodes table
        for the API) and GPU types to the cluster. Every cluster: a full
        reconcile on the first pass, after gaining leadership and after a failed
        pass -- the cluster reports again what every active job's Pods are
        doing, finished ones included (a simulated cluster outlives a crashed
        dispatcher in tests; a Kubernetes one always does)."""
        live = self.cluster.capabilities.live_nodes
        if not live and not self.after_leader_change:
            return
        with self.session_factory() as session:
            if live:
                self.cluster.set_gpu_types(gpu_type_configs(session))
                # a stray Pod with gpuq's labels counts as another workload's
                nodes = self.cluster.list_nodes(partial(booked_among, session))
                fp = fingerprint(nodes)
                if fp != self._nodes_fingerprint:
                    _changed, kept = sync_node_rows(session, nodes)
                    session.commit()
                    # a gone node's row kept for its allocations: sync again next pass
                    self._nodes_fingerprint = None if kept else fp
                self.live_nodes = nodes
            if self.after_leader_change:
                if self.elector is not None and not self.elector.still_leader():
                    raise NotLeader("leadership lost before reconciling the cluster")
                # a moved job's old Pods are not its current attempt
                owners = active_owners(session)
                report = self.cluster.reconcile(
                    set(owners), moved_placements(session), self.grace_seconds, owners
                )
                log.info(
                    "reconciled with the cluster: %d adopted, %d to rebind or requeue, "
                    "%d orphans removed",
                    len(report.adopted),
                    len(report.missing),
                    len(report.orphans),
                )
                self.after_leader_change = False

    def run(self) -> Plan:
        plan = Plan()
        view = cluster_view(self.cluster)
        with self.session_factory() as session:
            if finalise(session, view):  # stopped Pods gone since the last pass
                session.commit()
            # ids and states only; rows are loaded just for the few to repair
            active: dict[str, Any] = dict(active_states(session))
            missing = [
                int(i) for i, st in active.items() if st == "admitted" and i not in view.live
            ]
            if missing:
                for j in jobs_with_allocations(session, missing):
                    active[str(j.id)] = j
            for job_id in sorted(view.running - set(active)):
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
                    locked = lock_job(session, job_id)
                    if locked is not None and locked.status == "running":
                        # Pods of the job the cluster still shows (an attempt this
                        # process does not follow as current, Pods stopping or on a lost
                        # node) hold their cards: they are stopped, and the capacity is
                        # released only once they are gone, never handed on meanwhile
                        held = job_id in view.running or job_id in view.draining
                        change_state(
                            session,
                            locked,
                            "pending",
                            now=now,
                            event_type="requeued",
                            reason="pods lost on the cluster (restart or node failure)"
                            + ("; its Pods left are stopped and keep its capacity until "
                               "they end" if held else ""),
                            pods_gone=not held,
                        )
                        if held:
                            plan.stops.append((job_id, "requeued: Pods of another attempt"))
                        changed = True
            changed = self._end_past_limit(session, plan, now) or changed
            if changed:
                if self.elector is not None:
                    self.elector.fence(session)
                session.commit()
        return plan

    def _end_past_limit(self, session: Session, plan: Plan, now: datetime) -> bool:
        """Running jobs that reached their ``time_limit_s`` end ``failed`` (not retried:
        the next run would meet the same limit) and their Pods are stopped; the capacity
        stays held until the Pods are gone, as for any stopped run. The limit is what
        lets a reservation count on the capacity freeing by then (the wait bound of
        docs/scheduling.md), as Slurm ends a job at its TimeLimit."""
        changed = False
        for job_id, limit in past_time_limit(session, now):
            locked = lock_job(session, str(job_id))
            if locked is None or locked.status != "running":
                continue  # it ended or was stopped meanwhile
            change_state(session, locked, "failed", now=now,
                         reason=f"time limit: stopped after running {limit:g} s "
                         "(time_limit_s)", pods_gone=False)
            plan.stops.append((str(job_id), "time limit reached"))
            changed = True
        return changed

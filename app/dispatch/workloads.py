"""The Kubernetes front door (a part of every pass on a Kubernetes cluster).

Kueue's job reconciler (kueue ``pkg/controller/jobframework/reconciler.go``,
``ReconcileGenericJob``) adapted to gpuq's one queue:

* a workload of a configured kind (``GPUQ_K8S_WORKLOAD_KINDS``) labelled
  ``gpuq.io/queue: <team>``, or in a namespace one team lists in its
  ``namespaces`` (the same namespaces its Pod policy allows), becomes a gpuq job
  through the same submit path as REST (:func:`app.store.jobs.submit_job`:
  catalog references, quotas, Pod policy, history), keyed by the workload's uid so
  it is created once; its request is read from its Pod templates
  (:mod:`app.cluster.workloads.requests`);
* one of those not suspended and not yet queued is suspended first (what Kueue's
  webhook and its reconciler's ``StopJob`` do for a Job created running);
* a workload gpuq cannot honour gets a Warning Event and ``gpuq.io/state: refused``
  with ``gpuq.io/reason``, once per reason;
* every pass mirrors the job's state onto the workload: Events when it changes
  (queued, admitted, preempted, cancelled, ...) and ``gpuq.io/state``,
  ``gpuq.io/reason`` (why it waits, the API's reason), ``gpuq.io/queue-position`` and
  ``gpuq.io/estimated-start`` (the API's ``estimated_start``, when wired: app/main.py);
* the workload's own verdict (Complete/Failed) ends the job; a workload deleted by
  its owner cancels its job (its Pods are garbage-collected with it, so the cards
  are free at once); a job cancelled through REST suspends its workload.

Cost: one list per kind with the queue label plus one per mapped namespace, and one
read of the jobs the listed workloads made (by their idempotency keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, select

from app.cluster import k8s_labels as L
from app.cluster.workloads.adaptor import Unhonourable, WorkloadAdaptor
from app.cluster.workloads.client import owner_of_object
from app.cluster.workloads.requests import job_spec, policy_templates
from app.dispatch.loops import Part, log
from app.domain.errors import GpuqError
from app.domain.owner import PREFIX, WorkloadOwner, owner_of
from app.domain.spec import JobSpec
from app.domain.states import ACTIVE, TERMINAL
from app.store.catalog_cache import current_catalog
from app.store.job_refs import JobRefs
from app.store.jobs import check_pod_sets, submit_job
from app.store.node_rows import gpu_type_configs
from app.store.orm import JobRow
from app.store.queue_order import fill_queue_positions
from app.store.state_changes import change_state

# gpuq.io/state for a job status (pending jobs that were preempted: "preempted")
STATE = {"pending": "queued", "admitted": "admitted", "running": "running",
         "unschedulable": "unschedulable", "succeeded": "finished", "failed": "failed",
         "cancelled": "cancelled"}
EVENT = {"queued": ("GpuqQueued", "Normal"), "admitted": ("GpuqAdmitted", "Normal"),
         "running": ("GpuqRunning", "Normal"), "preempted": ("GpuqPreempted", "Warning"),
         "unschedulable": ("GpuqUnschedulable", "Warning"),
         "finished": ("GpuqFinished", "Normal"), "failed": ("GpuqFailed", "Warning"),
         "cancelled": ("GpuqCancelled", "Warning")}
OPEN = ("pending", "admitted", "running", "unschedulable")


def made_by(keys: list[str]) -> Select[JobRow]:
    """The jobs the front door made for workloads of these keys (``k8s-uid:<uid>``): by
    the key's own index (migration 0016), not by a scan of the job table. Only jobs it
    made: a REST job keyed like a workload (refused since: app/api/routes/jobs.py
    ``reserved_key``) must not stand for it, or the workload would never be queued."""
    return select(JobRow).where(JobRow.idempotency_key.in_(keys),
                                JobRow.submitted_by.startswith(PREFIX))


@dataclass
class FrontDoor(Part):
    submitted: int = 0  # jobs this front door created (tests and metrics read it)
    refused: dict[str, str] = field(default_factory=dict)  # workload uid -> reason
    # job id -> its estimated start (the API's estimates, wired by app/main.py); None:
    # no gpuq.io/estimated-start annotation
    # (job id, the start its reason names) -> estimated start (app/api/estimates.py)
    start_of: Callable[[str, datetime | None], datetime | None] | None = None

    @property
    def client(self) -> Any:
        return self.cluster.workloads.client  # type: ignore[attr-defined]

    def run(self) -> None:
        with self.session_factory() as session:
            catalog = current_catalog(session)
        by_ns: dict[str, list[str]] = {}
        for team in catalog.teams.values():
            for ns in team.namespaces:
                by_ns.setdefault(ns, []).append(team.name)
        seen: dict[str, tuple[WorkloadAdaptor, dict, str | None]] = {}  # uid -> ...
        for a in self.client.adaptors:
            objs = self.client.list(a, selector=L.WL_QUEUE)
            for ns in sorted(by_ns):
                objs += self.client.list(a, namespace=ns)
            for o in objs:
                meta = o.get("metadata") or {}
                queue: str | None = (meta.get("labels") or {}).get(L.WL_QUEUE)
                if queue is None:
                    teams = by_ns.get(meta.get("namespace", ""), [])
                    queue = teams[0] if len(teams) == 1 else None
                if meta.get("uid"):
                    seen[meta["uid"]] = (a, o, queue)
        with self.session_factory() as session:
            keys = [WorkloadOwner("", "", "", "", uid).idempotency_key() for uid in seen]
            rows = {r.idempotency_key: r for r in session.scalars(made_by(keys))
                    } if keys else {}
            # their places in the queue, as GET /v1/jobs shows them (computed, not stored)
            fill_queue_positions(session, rows.values())
            for uid, (a, obj, queue) in seen.items():
                row = rows.get(WorkloadOwner("", "", "", "", uid).idempotency_key())
                if row is None:
                    self._admit_to_queue(session, a, obj, queue)
                else:
                    self._mirror(session, a, obj, row)
            # open jobs whose workload is gone: its owner deleted it
            gone = session.scalars(
                select(JobRow).where(JobRow.status.in_(OPEN),
                                     JobRow.submitted_by.startswith(PREFIX))
            ).all()
            for row in gone:
                owner = owner_of(row.submitted_by, row.idempotency_key)
                if owner is None or owner.uid in seen or self.client.get(owner) is not None:
                    continue
                change_state(session, row, "cancelled", now=self.clock(),
                             reason=f"{owner.ref} was deleted")
                session.commit()
                self.cluster.stop(str(row.id), f"{owner.ref} was deleted", 0)

    # ---------------------------------------------------------------- new ones
    def _admit_to_queue(self, session: Any, a: WorkloadAdaptor, obj: dict,
                        team: str | None) -> None:
        owner = owner_of_object(obj)
        if a.finished(obj) is not None:
            return  # ran (and ended) without gpuq: nothing to queue
        if team is None:
            return  # a mapped namespace with several teams and no queue label
        if not a.suspended(obj):
            # created running: suspend it first (Kueue's webhook default / StopJob)
            self.client.patch(owner, a.suspend_patch(obj))
            self.client.event(owner, "GpuqSuspended",
                              "suspended until gpuq admits it (create it with "
                              "spec.suspend: true to skip this)")
            return
        with self.session_factory() as s2:
            catalog = current_catalog(s2)
            types = gpu_type_configs(s2)
        try:
            body = job_spec(obj, a, team=team, gpu_types=types,
                            priorities=sorted(catalog.priorities),
                            priority_class_prefix=self.cluster.ks.priority_class_prefix,  # type: ignore[attr-defined]
                            scheduler_name=self.cluster.ks.scheduler_name)  # type: ignore[attr-defined]
            body["failure_policy"] = {"action": "fail"}  # its own controller retries
            spec = JobSpec.model_validate(body)
            install = self.cluster.ks.install_policy()  # type: ignore[attr-defined]
            check_pod_sets(session, spec, policy_templates(obj, a.pod_sets(obj), types),
                           install=install)
            got = submit_job(session, spec, now=self.clock(),
                             idempotency_key=owner.idempotency_key(),
                             submitted_by=owner.submitted_by(), install=install)
            session.commit()
        except (Unhonourable, GpuqError, ValidationError) as e:
            session.rollback()
            self._refuse(owner, obj, _why(e))
            return
        self.submitted += 1
        job = got.job
        self.cluster.workloads.follow(str(job.id), owner)  # type: ignore[attr-defined]
        self.client.annotate(owner, {L.WL_JOB_ID: str(job.id), L.WL_STATE: "queued",
                                     L.WL_REASON: None})
        self.client.event(owner, "GpuqQueued",
                          f"queued as gpuq job {job.id} (team {job.team}, pool {job.pool}, "
                          f"priority {job.priority}, {spec.replica_count} Pods as one gang)")

    def _refuse(self, owner: WorkloadOwner, obj: dict, reason: str) -> None:
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        self.refused[owner.uid] = reason
        if ann.get(L.WL_STATE) == "refused" and ann.get(L.WL_REASON) == reason[:1000]:
            return  # said already
        log.info("refused %s: %s", owner.ref, reason)
        self.client.event(owner, "GpuqRefused", reason, "Warning")
        self.client.annotate(owner, {L.WL_STATE: "refused", L.WL_REASON: reason[:1000],
                                    L.WL_REASON_CODE: None})

    # ---------------------------------------------------------------- known ones
    def _mirror(self, session: Any, a: WorkloadAdaptor, obj: dict, row: JobRow) -> None:
        owner = owner_of(row.submitted_by, row.idempotency_key)
        if owner is None:
            return
        job_id = str(row.id)
        self.cluster.workloads.follow(job_id, owner)  # type: ignore[attr-defined]
        done = a.finished(obj)
        if done is not None and row.status in ACTIVE:
            self.cluster.report_finished(job_id, *done)  # type: ignore[attr-defined]
        if row.status in TERMINAL - {"succeeded"} and done is None and not a.suspended(obj):
            self.cluster.stop(job_id, f"gpuq job {job_id} is {row.status}", 0)
        state = STATE.get(row.status, row.status)
        if state == "queued" and row.preemption_count:
            state = "preempted"
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        # the team reads its workload: another team's job is not named (app/store/job_refs.py)
        why = JobRefs(session, row.team, [row.reason]).text(row.reason)
        want: dict[str, str | None] = {
            L.WL_JOB_ID: job_id, L.WL_STATE: state,
            L.WL_REASON: (why or "")[:1000] or None,
            L.WL_REASON_CODE: row.reason_code,
            L.WL_QUEUE_POSITION: (str(row.queue_position)
                                  if row.queue_position is not None and row.status == "pending"
                                  else None),
            L.WL_ESTIMATED_START: self._estimated_start(row),
        }
        if all(ann.get(k) == v for k, v in want.items()):
            return
        if ann.get(L.WL_STATE) != state:
            reason, type_ = EVENT.get(state, ("GpuqState", "Normal"))
            msg = f"gpuq job {job_id}: {row.status}"
            if why:
                msg += f": {why}"
            self.client.event(owner, reason, msg, type_)
        self.client.annotate(owner, want)


    def _estimated_start(self, row: JobRow) -> str | None:
        """RFC 3339 (what ``kubectl`` shows for times), pending jobs only."""
        if row.status != "pending" or self.start_of is None:
            return None
        t = self.start_of(str(row.id), row.reason_start_at)
        return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _why(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                         for err in e.errors())
    if isinstance(e, GpuqError):
        return e.detail
    return str(e)

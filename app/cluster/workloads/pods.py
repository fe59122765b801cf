"""Start, follow and stop the Kubernetes workloads gpuq admitted.

Admission (Kueue's ``startJob`` in ``pkg/controller/jobframework/reconciler.go``):
one merge patch puts gpuq's attempt labels on every Pod template and sets
``suspend: false``; the workload's own controller then creates the Pods (they name
``schedulerName: gpuq``, so nothing else places them). Each pass binds the
attempt's unbound Pods, in the adaptor's order (pod set, index), onto the
placements of the reservation that no live Pod of the attempt holds yet: first its
replica label and device annotations (what gpuq's own Pods carry), then a Binding.
So a Pod its controller replaces after a failure lands on the same reserved cards.

Stopping (preemption, cancel, a gang that lost its place) suspends the workload
(Kueue's ``stopJob``): its controller deletes the Pods, which for a batch/v1 Job
does not count against ``backoffLimit``, and the GPUs are free once they are gone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from app.cluster import k8s_labels as L
from app.cluster.interface import BindError, BindRequest
from app.cluster.k8s_pods import attempt_labels, placement_annotations, placement_key
from app.cluster.k8s_pods import pod_placement_key as held_key
from app.cluster.workloads import ADAPTORS
from app.cluster.workloads.client import WorkloadClient
from app.domain.owner import WorkloadOwner

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Reserved:
    bind_id: str
    req: BindRequest


def _message(e: ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except (TypeError, ValueError):
        return str(e.reason)


class WorkloadPods:
    def __init__(self, client: WorkloadClient) -> None:
        self.client = client
        self.owners: dict[str, WorkloadOwner] = {}  # gpuq job id -> workload
        self.reserved: dict[str, _Reserved] = {}  # the attempt whose Pods gpuq binds

    def follow(self, job_id: str, owner: WorkloadOwner) -> None:
        """Known to come from ``owner`` (the front door says so every pass, so a
        restarted gpuq stops a workload job the right way)."""
        self.owners[job_id] = owner

    def admit(self, req: BindRequest, bind_id: str) -> None:
        """Start the workload with the attempt's labels (:class:`BindError` if it
        is gone or refuses the patch: the job goes back to the queue)."""
        owner = req.owner
        assert owner is not None
        self.owners[req.job_id] = owner
        try:
            obj = self.client.get(owner)
            if obj is None:
                raise BindError(f"{owner.ref} is gone")
            adaptor = ADAPTORS[owner.kind]
            self.client.patch(owner, adaptor.admit_patch(obj, attempt_labels(req, bind_id)))
        except ApiException as e:
            raise BindError(f"start {owner.ref}: {e.status} {_message(e)}") from e
        self.reserved[req.job_id] = _Reserved(bind_id, req)

    def stop(self, job_id: str) -> bool:
        """Suspend the job's workload; False when the job has none (a REST job)."""
        owner = self.owners.get(job_id)
        if owner is None:
            return False
        self.reserved.pop(job_id, None)
        try:
            obj = self.client.get(owner)
            a = ADAPTORS[owner.kind]
            if obj is not None and not a.suspended(obj) and a.finished(obj) is None:
                self.client.patch(owner, a.suspend_patch(obj))
        except ApiException as e:
            log.warning("suspend %s: %s %s", owner.ref, e.status, _message(e))
        return True

    def bind_pending(self, pods_of: Callable[[str, str], list[dict]],
                     refusal: Callable[[str, list[dict]], str | None] = lambda _t, _p: None,
                     refuse: Callable[[str, str], None] = lambda _j, _m: None) -> int:
        """Bind every reserved attempt's unbound Pods; returns how many were bound.

        ``refusal(team, pods)``: why the team's Pod policy refuses one of them, or None. A
        workload's Pods come from templates checked when it was queued, but a
        PyTorchJob's templates may change after that, and whoever may create a Pod in
        the namespace may give it the attempt's labels; gpuq's own Pods are checked the
        same way before they are created. A refused Pod is not bound: the job ends
        failed through ``refuse(job_id, message)`` and its workload is suspended."""
        bound = 0
        for job_id, r in list(self.reserved.items()):
            owner = self.owners[job_id]
            # only Pods in the workload's namespace: its labels say which job and attempt a
            # Pod is of, and anyone who may create a Pod may write them, so a Pod another
            # team made in its own namespace with this job's labels would otherwise be
            # bound onto this job's reserved cards (or, bound, hold them from its Pods)
            pods = [p for p in pods_of(job_id, r.bind_id)
                    if p["metadata"].get("namespace") == owner.namespace]
            held = {held_key(p) for p in pods
                    if (p.get("spec") or {}).get("nodeName")
                    and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
            free = [p for p in r.req.placements if placement_key(p) not in held]
            unbound = sorted(
                (p for p in pods if not (p.get("spec") or {}).get("nodeName")
                 and not p["metadata"].get("deletionTimestamp")
                 and (p.get("status") or {}).get("phase", "Pending") == "Pending"),
                key=ADAPTORS[owner.kind].pod_order,
            )
            why = refusal(r.req.team, unbound) if unbound else None
            if why is not None:
                log.warning("%s: %s", owner.ref, why)
                self.reserved.pop(job_id, None)
                refuse(job_id, why)
                continue
            for pod, pl in zip(unbound, free, strict=False):
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                try:
                    self.client.patch_pod(ns, name, {"metadata": {
                        "labels": {L.REPLICA: str(pl.replica)},
                        "annotations": placement_annotations(r.req, pl)}})
                    # the client's hints say its model class; it serializes a dict body too
                    self.client.core.create_namespaced_pod_binding(name, ns, {  # type: ignore[arg-type]
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": ns},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": pl.node},
                    }, _preload_content=False)
                    bound += 1
                except ApiException as e:  # the next pass tries again
                    log.warning("bind %s/%s of %s to %s: %s %s", ns, name, owner.ref,
                                pl.node, e.status, _message(e))
        return bound

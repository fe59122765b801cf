"""PyTorchJob (kubeflow.org/v1, the Kubeflow training operator): a master and workers,
one gang.

Modelled on Kueue's ``pkg/controller/jobs/kubeflow/jobs/pytorchjob/pytorch_controller.go``
and the shared ``pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go``:
one pod set per replica type, in the operator's order (``Master`` first, then
``Worker``: ``OrderedReplicaTypes``), of ``replicas`` Pods each (default 1);
suspended and started through ``spec.runPolicy.suspend`` (the training operator,
``pkg/controller.v1/common/job.go``, deletes the Pods and Services of a suspended
job and sets condition ``Suspended``; from v1.7); finished when the job has
condition ``Succeeded`` or ``Failed`` (``pkg/apis/kubeflow.org/v1/common_types.go``).

The operator names the Pods ``<job>-<type>-<index>`` and labels them
``training.kubeflow.org/replica-type`` (the type in lower case) and
``training.kubeflow.org/replica-index``; gpuq binds the master as replica 0, so
the rank torchrun reads (``RANK``, set by ``pkg/controller.v1/pytorch/envvar.go``)
follows the placement order. Elastic jobs (``elasticPolicy``) change their size
while running, which one reserved gang cannot follow: refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.cluster.workloads.adaptor import (
    Finished,
    PodSet,
    Unhonourable,
    as_int,
    condition,
    deadline_s,
    template_labels_patch,
)

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
ORDER = ("Master", "Worker")  # the operator's replica types, in Kueue's order


class PyTorchJobAdaptor:
    api_version = "kubeflow.org/v1"
    kind = "PyTorchJob"
    group = "kubeflow.org"
    version = "v1"
    plural = "pytorchjobs"

    @staticmethod
    def _replicas(obj: Mapping[str, Any]) -> dict[str, Any]:
        specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        if not isinstance(specs, Mapping) or not specs:
            raise Unhonourable("a PyTorchJob needs pytorchReplicaSpecs")
        unknown = sorted(set(specs) - set(ORDER))
        if unknown:
            raise Unhonourable(f"unknown replica type(s) {', '.join(unknown)} "
                               f"(a PyTorchJob has {', '.join(ORDER)})")
        return dict(specs)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"))

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        if (obj.get("spec") or {}).get("elasticPolicy"):
            raise Unhonourable("an elastic PyTorchJob (elasticPolicy) changes its size while "
                               "it runs; gpuq admits a fixed gang: remove elasticPolicy")
        specs = self._replicas(obj)
        out = []
        for rtype in ORDER:
            rs = specs.get(rtype)
            if rs is None:
                continue
            count = as_int(rs.get("replicas"), 1)
            if rtype == "Master" and count != 1:
                raise Unhonourable(f"Master replicas must be 1, got {count}")
            if count > 0:
                out.append(PodSet(rtype.lower(), count, dict(rs.get("template") or {})))
        if not out:
            raise Unhonourable("the PyTorchJob runs no Pods (every replicas is 0)")
        return out

    def admit_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> dict:
        # a merge patch merges maps: each replica type's template gets the labels
        specs = {rtype: {"template": template_labels_patch(rs.get("template") or {}, labels)}
                 for rtype, rs in self._replicas(obj).items()}
        return {"spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": specs}}

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict:
        return {"spec": {"runPolicy": {"suspend": True}}}

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        if condition(obj, "Succeeded"):
            return ("succeeded", "PyTorchJob succeeded")
        failed = condition(obj, "Failed")
        if failed:
            return ("failed", f"PyTorchJob failed: {failed.get('reason', '')} "
                              f"{failed.get('message', '')}".strip())
        return None

    def time_limit_s(self, obj: Mapping[str, Any]) -> float | None:
        # the training operator's RunPolicy.activeDeadlineSeconds
        run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
        return deadline_s(run_policy.get("activeDeadlineSeconds"))

    def pod_order(self, pod: Mapping[str, Any]) -> tuple:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        rtype = labels.get(REPLICA_TYPE, "")
        rank = [t.lower() for t in ORDER].index(rtype) if rtype in ("master", "worker") else 2
        idx = labels.get(REPLICA_INDEX, "0")
        return (rank, int(idx) if idx.isdigit() else 0, meta.get("name", ""))

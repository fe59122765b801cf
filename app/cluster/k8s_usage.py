"""What the Pods gpuq does not manage use on each node, kept per watch event.

kube-scheduler counts every bound, non-terminal Pod's requests against its node
(pkg/scheduler/framework/types.go ``NodeInfo.AddPod``), and watches only those Pods
for it: ``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``
(pkg/scheduler/scheduler.go, the assigned-Pod informer). gpuq does the same for the
Pods of other workloads: the apiserver filters them (:data:`FOREIGN_PODS_FIELDS`),
:func:`slim_pod` keeps of each only its key, node, phase and effective requests
(a Pod in full, with managedFields, is ~50 KiB parsed; this is well under 1 KiB),
and :class:`NodeUsage` keeps the per-node sums current as events arrive, so a
dispatcher pass reads one total per node instead of walking every Pod.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from decimal import Decimal

from app.cluster import k8s_labels as L
from app.cluster.k8s_nodes import pod_holds_resources, pod_requests

#: the field selector of the informer on other workloads' Pods
FOREIGN_PODS_FIELDS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: ... and its label selector: every Pod gpuq did not label as its own
FOREIGN_PODS_LABELS = f"{L.MANAGED_BY}!={L.MANAGED_BY_VALUE}"
#: the label selector of the informer on gpuq's own Pods
OWN_PODS_LABELS = f"{L.MANAGED_BY}={L.MANAGED_BY_VALUE}"

REQUESTS = "requests"  # the slim Pod's effective requests (resource -> Decimal)


def slim_pod(pod: dict) -> dict:
    """The part of another workload's Pod that node accounting reads."""
    meta = pod.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
        REQUESTS: pod[REQUESTS] if REQUESTS in pod else pod_requests(pod),
    }


class NodeUsage:
    """Per node, the summed requests of the foreign Pods that hold resources there.

    The informer's handler (:meth:`on_event`; a relist's synthetic events included)
    replaces a Pod's contribution by its new one, so the sums always equal those of
    the Pods in the informer's cache. Decimal arithmetic: adding and removing the same
    quantities leaves no rounding residue."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, dict[str, Decimal]]] = {}
        self._nodes: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))

    def on_event(self, type_: str, pod: dict, _prev: dict | None) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            old = self._pods.pop(key, None)
            if old is not None:
                totals = self._nodes[old[0]]
                for r, q in old[1].items():
                    totals[r] -= q
                    if not totals[r]:
                        del totals[r]
                if not totals:
                    del self._nodes[old[0]]
            if type_ == "DELETED" or not pod_holds_resources(pod):
                return
            node = pod["spec"]["nodeName"]
            reqs = pod.get(REQUESTS)
            if reqs is None:
                reqs = pod_requests(pod)
            self._pods[key] = (node, reqs)
            totals = self._nodes[node]
            for r, q in reqs.items():
                totals[r] += q

    def by_node(self) -> dict[str, dict[str, Decimal]]:
        with self._lock:
            return {n: dict(t) for n, t in self._nodes.items()}

    def __len__(self) -> int:
        return len(self._pods)

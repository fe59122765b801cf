"""What kube-controller-manager and an admission plug-in do when a node is lost, for
the fake API server (pure decisions on the objects' JSON; tests/fakekube/server.py
applies them under its lock and emits the watch events).

* **DefaultTolerationSeconds** (plugin/pkg/admission/defaulttolerationseconds/
  admission.go): a Pod created without them gets ``node.kubernetes.io/not-ready`` and
  ``node.kubernetes.io/unreachable`` ``NoExecute`` tolerations for 300 s
  (``--default-*-toleration-seconds``).
* **ServiceAccount** (plugin/pkg/admission/serviceaccount/admission.go): a Pod gets
  ``serviceAccountName: default`` and, unless it says ``automountServiceAccountToken:
  false``, a projected token volume mounted in every container (:func:`service_account`);
  a Pod naming a ServiceAccount its namespace does not have is refused, 403
  (:func:`missing_service_account`). Every namespace has ``default`` (the
  serviceaccounts controller, pkg/controller/serviceaccount/serviceaccounts_controller.go,
  makes it in each new namespace); others exist once a test adds them.
* **Node lifecycle** (pkg/controller/nodelifecycle/node_lifecycle_controller.go
  ``tryUpdateNodeHealth``): a node whose kubelet has not posted status (its Lease) for
  ``--node-monitor-grace-period`` (50 s since 1.32, 40 s before) gets every condition
  ``Unknown``, reason ``NodeStatusUnknown``, "Kubelet stopped posting node status.";
  ``doNoExecuteTaintingPass`` then taints it ``node.kubernetes.io/unreachable:NoExecute``
  (``timeAdded`` set; the scheduler's ``NoSchedule`` twin too, ``doNoScheduleTaintingPass``),
  and ``MarkPodsNotReady`` (pkg/controller/util/node/controller_utils.go) sets the Ready
  condition of its Pods False. A node that posts status again loses the taints.
* **Taint eviction** (pkg/controller/tainteviction/taint_eviction.go): a Pod on a node
  with a ``NoExecute`` taint it does not tolerate is deleted at once; one it tolerates for
  ``tolerationSeconds`` (the smallest of its matching tolerations,
  ``getMinTolerationTime``) is deleted that long after the taint's ``timeAdded``; one
  tolerated without seconds stays. The deletion first adds the ``DisruptionTarget``
  condition, reason ``DeletionByTaintManager`` (``addConditionAndDeletePod``), and is
  graceful: with no kubelet on the node to end it the Pod stays Terminating, phase
  Running.
* **PodGC** (pkg/controller/podgc/gc_controller.go ``gcOrphaned``): a Pod bound to a Node
  that no longer exists (after ``quarantineTime``, 40 s) is marked ``DisruptionTarget``
  ``DeletionByPodGC`` and phase ``Failed`` (``markFailedAndDeletePodWithCondition``), then
  deleted with grace period 0: nothing can run it any more.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from tests.fakekube.containers import stamp
from tests.fakekube.kubelet import tolerated

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
DEFAULT_TOLERATION_S = 300  # --default-unreachable-toleration-seconds
NODE_MONITOR_GRACE_S = 50.0  # --node-monitor-grace-period (1.32+)
PODGC_QUARANTINE_S = 40.0  # gc_controller.go quarantineTime


def default_tolerations(pod: dict, seconds: int = DEFAULT_TOLERATION_S) -> None:
    """DefaultTolerationSeconds: add what the Pod lacks (it mutates the create)."""
    tols = pod.setdefault("spec", {}).setdefault("tolerations", [])
    for key in (NOT_READY, UNREACHABLE):
        if not any((t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
                   and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": seconds})
    if not tols:
        pod["spec"].pop("tolerations")


def service_account(pod: dict) -> None:
    """The ServiceAccount admission plug-in (kubernetes
    ``plugin/pkg/admission/serviceaccount/admission.go``): ``serviceAccountName`` defaults
    to ``default``, and unless the Pod says ``automountServiceAccountToken: false``
    (``shouldAutomount``; the fake's ServiceAccounts never say it) every container and init
    container mounts a projected ``kube-api-access-*`` volume with the token
    (``TokenVolumeSource``: token, the root CA ConfigMap, the namespace). A Pod naming a
    ServiceAccount that does not exist was refused before (:func:`missing_service_account`)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("serviceAccountName", "default")
    if spec.get("automountServiceAccountToken") is False:
        return
    name = "kube-api-access-" + hashlib.sha256(
        pod["metadata"]["name"].encode()).hexdigest()[:5]
    spec.setdefault("volumes", []).append({"name": name, "projected": {
        "defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    for part in ("initContainers", "containers"):
        for c in spec.get(part) or []:
            c.setdefault("volumeMounts", []).append({
                "name": name, "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})


def missing_service_account(ns: str, pod: dict,
                            accounts: set[tuple[str, str]]) -> str | None:
    """Why the ServiceAccount admission plug-in refuses ``pod`` (its ``Admit``: the
    account the Pod names, else ``default``, must exist in ``ns``: ``getServiceAccount``,
    then ``admission.NewForbidden``), or None. ``accounts``: (namespace, name) of the
    accounts besides each namespace's ``default``."""
    spec = pod.get("spec") or {}
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    if name == "default" or (ns, name) in accounts:
        return None
    return (f"error looking up service account {ns}/{name}: "
            f'serviceaccount "{name}" not found')


def mark_unknown(node: dict, now: float) -> bool:
    """tryUpdateNodeHealth + the tainting passes for a node whose kubelet went silent;
    False when it was already marked."""
    st = node.setdefault("status", {})
    conds = st.setdefault("conditions", [])
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "Unknown":
        return False
    for c in conds:
        c.update(status="Unknown", reason="NodeStatusUnknown",
                 message="Kubelet stopped posting node status.", lastTransitionTime=stamp(now))
    if ready is None:
        conds.append({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                      "message": "Kubelet stopped posting node status.",
                      "lastTransitionTime": stamp(now)})
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    for effect in ("NoSchedule", "NoExecute"):
        if not any(t.get("key") == UNREACHABLE and t.get("effect") == effect for t in taints):
            taint: dict[str, Any] = {"key": UNREACHABLE, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = stamp(now)
            taints.append(taint)
    return True


def mark_ready(node: dict, now: float) -> None:
    """The kubelet posts status again: Ready, the unreachable taints removed."""
    for c in node.setdefault("status", {}).setdefault("conditions", []):
        healthy = "True" if c.get("type") == "Ready" else "False"
        c.update(status=healthy, reason="KubeletReady" if healthy == "True" else "",
                 message="", lastTransitionTime=stamp(now))
    spec = node.setdefault("spec", {})
    spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE]
    if not spec["taints"]:
        spec.pop("taints")


def mark_pod_not_ready(pod: dict, now: float) -> bool:
    """MarkPodsNotReady: the Pod's Ready condition False; False when it already was."""
    conds = pod.setdefault("status", {}).setdefault("conditions", [])
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False":
        return False
    if ready is None:
        ready = {"type": "Ready"}
        conds.append(ready)
    ready.update(status="False", lastTransitionTime=stamp(now))
    return True


def eviction_due(pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]],
                 epoch_of: Any) -> float | None:
    """When the taint eviction controller deletes ``pod`` (seconds since the epoch; 0:
    now), or None when it never does. ``epoch_of`` reads a ``timeAdded`` stamp."""
    due: float | None = None
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        matching = [t for t in tolerations if tolerated(taint, [t])]
        if not matching:
            return 0.0
        seconds = [t["tolerationSeconds"] for t in matching
                   if t.get("tolerationSeconds") is not None]
        if not seconds:
            continue  # tolerated forever
        at = epoch_of(taint.get("timeAdded")) + max(0, min(seconds))
        due = at if due is None else min(due, at)
    return due


def disruption_condition(pod: dict, reason: str, message: str, now: float) -> None:
    """The DisruptionTarget condition a component adds before it deletes the Pod."""
    conds = pod.setdefault("status", {}).setdefault("conditions", [])
    conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
    conds.append({"type": "DisruptionTarget", "status": "True", "reason": reason,
                  "message": message, "lastTransitionTime": stamp(now)})


def taint_evicted(pod: dict, now: float) -> dict:
    """The Pod as the taint eviction controller leaves it: DisruptionTarget, then a
    graceful delete (deletionTimestamp, the Pod's own grace period)."""
    pod = copy.deepcopy(pod)
    disruption_condition(pod, "DeletionByTaintManager", "Taint manager: deleting due to "
                         "NoExecute taint", now)
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    pod["metadata"]["deletionTimestamp"] = stamp(now + grace)
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def podgc_orphaned(pod: dict, now: float) -> dict:
    """The Pod as PodGC leaves it before the force delete: DisruptionTarget
    DeletionByPodGC and phase Failed."""
    pod = copy.deepcopy(pod)
    disruption_condition(pod, "DeletionByPodGC", "PodGC: node no longer exists", now)
    pod["status"]["phase"] = "Failed"
    return pod

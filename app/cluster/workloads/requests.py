"""A workload's request, read from its Pod templates, as a gpuq job spec.

What Kueue reads as a workload's pod sets' requests (kueue
``pkg/controller/jobframework/reconciler.go``, ``constructWorkload``; requests per
Pod from ``pkg/util/resource``) plus what gpuq's exact placement needs that
Kubernetes has no field for, as annotations (a stable contract, docs/operations.md):

* cards: the first container's limits of ``nvidia.com/gpu`` (or another vendor's
  ``resource_name`` of a GPU type), or one MIG slice ``nvidia.com/mig-<profile>``;
* GPU types: ``gpuq.io/gpu-types`` (comma-separated gpuq type names), else the
  ``nvidia.com/gpu.product`` values of a required node affinity ``In`` term or of
  the nodeSelector, each mapped to the gpuq type whose product pattern matches;
* ``gpuq.io/min-gpu-memory-gb``, ``gpuq.io/duration-estimate-s``, ``gpuq.io/pool``;
* priority: ``gpuq.io/priority``, else the template's ``priorityClassName`` mapped
  back through the install's prefix (``gpuq-p0`` -> ``P0``, the PriorityClasses of
  k8s/priorityclasses.yaml that gpuq's own Pods name).

Annotations are read from the workload first, then from the (first) Pod template.
Anything gpuq cannot honour raises :class:`Unhonourable` naming the field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from app.cluster import k8s_labels as L
from app.cluster.k8s_nodes import match_gpu_type, pod_requests
from app.cluster.workloads.adaptor import PodSet, Unhonourable, WorkloadAdaptor
from app.domain.config import GpuTypeConfig
from app.domain.pod_policy import OWN_DEVICE_ENV
from app.domain.pod_resources import GB, container_requests, mig_prefix, required_node_affinity


def _annotation(obj: Mapping[str, Any], sets: Sequence[PodSet], key: str) -> str | None:
    for meta in (obj.get("metadata") or {}, *((s.template.get("metadata") or {}) for s in sets)):
        v = (meta.get("annotations") or {}).get(key)
        if v is not None:
            return v.strip()
    return None


def _number(raw: str | None, key: str) -> float | None:
    if raw is None:
        return None
    try:
        v = float(raw)
    except ValueError:
        raise Unhonourable(f"annotation {key}: {raw!r} is not a number") from None
    if v < 0 or v != v:
        raise Unhonourable(f"annotation {key}: {raw!r} must be >= 0")
    return v


def _products(spec: Mapping[str, Any]) -> list[str]:
    """``nvidia.com/gpu.product`` values the template requires (nodeSelector, or the
    ``In`` expressions of required node affinity)."""
    out = []
    sel = (spec.get("nodeSelector") or {}).get(L.GFD_PRODUCT)
    if sel:
        out.append(sel)
    for term in required_node_affinity(spec).get("nodeSelectorTerms") or []:
        for e in term.get("matchExpressions") or []:
            if e.get("key") == L.GFD_PRODUCT and e.get("operator") == "In":
                out.extend(e.get("values") or [])
    return out


def _selection(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """A template's node selection (nodeSelector, required node affinity), to compare."""
    return spec.get("nodeSelector") or {}, required_node_affinity(spec)


def _shape(template: Mapping[str, Any], types: Sequence[GpuTypeConfig]) -> dict[str, Any]:
    """Per-Pod resources (JobSpec ``resources`` fields) of one Pod template."""
    spec = template.get("spec") or {}
    req = pod_requests({"spec": spec})
    # CPU and memory of the main (first) container, in GB as gpuq writes them: the rest
    # of the template (sidecars, init containers) is added by the booking itself
    # (app/domain/pod_resources.py ``booked``), so the job books the Pod's effective
    # requests exactly once
    main = container_requests(((spec.get("containers") or [{}])[0]) or {})
    cpu = float(main.get("cpu", Decimal(0)))
    mem = float(main.get("memory", Decimal(0)) / GB)
    out: dict[str, Any] = {"cpu": round(cpu, 3), "memory_gb": round(mem, 3)}
    names = {t.resource_name for t in types} | {"nvidia.com/gpu"}
    cards = {k: v for k, v in req.items() if k in names and v}
    migs = {k: v for k, v in req.items()
            if any(k.startswith(mig_prefix(n)) for n in names) and v}
    if migs:
        if cards or len(migs) > 1 or next(iter(migs.values())) != 1:
            raise Unhonourable(
                "a Pod may ask for one MIG slice (one nvidia.com/mig-<profile>: 1) and "
                f"no whole cards; it asks for {sorted({**cards, **migs})}"
            )
        out["mig"] = next(iter(migs)).split("/mig-", 1)[1]
        return out
    if len(cards) > 1:
        raise Unhonourable(f"a Pod may ask for one kind of GPU, not {sorted(cards)}")
    n = next(iter(cards.values()), Decimal(0))
    if n != n.to_integral_value():
        raise Unhonourable(f"{next(iter(cards))}: {n} is not a whole number of cards")
    out["gpus"] = int(n)
    if cards:
        res = next(iter(cards))
        if res != "nvidia.com/gpu":  # another vendor: only its types
            out["gpu_types"] = sorted(t.name for t in types if t.resource_name == res)
    return out


def _gpu_types(raw: str | None, products: list[str],
               types: Sequence[GpuTypeConfig]) -> list[str] | None:
    known = {t.name for t in types}
    if raw:
        names = [s.strip() for s in raw.split(",") if s.strip()]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise Unhonourable(f"annotation {L.WL_GPU_TYPES}: unknown GPU type(s) "
                               f"{', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return names
    if not products:
        return None
    out = []
    for p in products:
        t = match_gpu_type(p, None, types)
        if t is None:
            raise Unhonourable(f"node affinity {L.GFD_PRODUCT} In {p!r}: no gpuq GPU type "
                               "has this product")
        out.append(t.name)
    return sorted(set(out))


def _priority(raw: str | None, template: Mapping[str, Any], priorities: Sequence[str],
              prefix: str) -> str | None:
    by_lower = {p.lower(): p for p in priorities}
    if raw:
        if raw.lower() not in by_lower:
            raise Unhonourable(f"annotation {L.WL_PRIORITY}: unknown priority {raw!r} "
                               f"(known: {', '.join(priorities)})")
        return by_lower[raw.lower()]
    pc = (template.get("spec") or {}).get("priorityClassName")
    if not pc:
        return None
    if pc.startswith(prefix) and pc[len(prefix):] in by_lower:
        return by_lower[pc[len(prefix):]]
    raise Unhonourable(f"priorityClassName {pc!r} is not one of gpuq's PriorityClasses "
                       f"({', '.join(prefix + p.lower() for p in priorities)})")


def _policy_template(name: str, template: Mapping[str, Any],
                     types: Sequence[GpuTypeConfig]) -> dict[str, Any]:
    """The Pod template of pod set ``name`` as the team's Pod policy sees it (the job's
    ``pod_template``): without what gpuq read into ``resources`` (accelerator
    requests) and ``priority`` (``priorityClassName``), the ``schedulerName`` it checked
    above, and the ``NVIDIA_VISIBLE_DEVICES=void`` of containers without a card: the
    fields a REST job leaves to gpuq.

    gpuq sets that ``void`` on every container of its own Pods that the device plugin
    gives no card, or the NVIDIA runtime shows such a container every card of its node
    when its image says ``all`` (CUDA images do; nvidia-container-toolkit
    ``internal/config/image/cuda_image.go``). It cannot set it on Pods a workload's
    controller makes, so the template must: a container or init container without a
    card and without it is :class:`Unhonourable`."""
    t = copy.deepcopy(dict(template))
    spec = t.setdefault("spec", {})
    spec.pop("schedulerName", None)
    spec.pop("priorityClassName", None)  # read into ``priority`` (checked there)
    names = {ty.resource_name for ty in types} | {"nvidia.com/gpu"}
    prefixes = tuple(mig_prefix(n) for n in names)
    blind: list[str] = []
    for part in ("initContainers", "containers"):
        for c in spec.get(part) or []:
            res = c.get("resources") or {}
            card = any(k in names or k.startswith(prefixes)
                       for p in ("limits", "requests") for k in (res.get(p) or {}))
            if not card:
                env = c.get("env") or []
                if OWN_DEVICE_ENV in env:
                    c["env"] = [e for e in env if e != OWN_DEVICE_ENV]
                else:
                    blind.append(str(c.get("name")))
                continue
            if part == "initContainers":
                continue  # the policy refuses its accelerator request (owned)
            for p in ("limits", "requests"):
                kept = {k: v for k, v in (res.get(p) or {}).items()
                        if k not in names and not k.startswith(prefixes)}
                if kept:
                    res[p] = kept
                else:
                    res.pop(p, None)
    if blind:
        raise Unhonourable(
            f"pod set {name}: container(s) {', '.join(blind)} get no card: give each the "
            "env NVIDIA_VISIBLE_DEVICES=void (else the NVIDIA runtime shows a container "
            "every card of its node when its image says all, as CUDA images do)")
    return t


def policy_templates(obj: Mapping[str, Any], sets: Sequence[PodSet],
                     gpu_types: Sequence[GpuTypeConfig]) -> list[tuple[str, dict[str, Any]]]:
    """(pod set name, its template as the team's Pod policy sees it) for every pod set,
    in the workload's namespace. The first is the job's ``pod_template``; the others
    (a PyTorchJob's workers, a JobSet's other replicated Jobs) run Pods as well, so each
    is held to the same rules (``app.store.jobs.check_pod_sets``)."""
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    out = []
    for s in sets:
        t = _policy_template(s.name, s.template, gpu_types)
        t.setdefault("metadata", {})["namespace"] = ns
        out.append((s.name, t))
    return out


def job_spec(
    obj: Mapping[str, Any],
    adaptor: WorkloadAdaptor,
    *,
    team: str,
    gpu_types: Sequence[GpuTypeConfig],
    priorities: Sequence[str],
    priority_class_prefix: str = "gpuq-",
    scheduler_name: str = "gpuq",
) -> dict[str, Any]:
    """The JobSpec body (validated by the caller, with the same checks as REST) of a
    workload: one gang of every Pod of every pod set, all of one shape."""
    meta = obj.get("metadata") or {}
    sets = adaptor.pod_sets(obj)
    shapes = []
    for s in sets:
        sched = (s.template.get("spec") or {}).get("schedulerName")
        if sched != scheduler_name:
            raise Unhonourable(
                f"pod set {s.name}: the Pod template must set schedulerName: {scheduler_name} "
                f"(it has {sched or 'none, the default scheduler'}), or another scheduler "
                "would place the Pods on capacity gpuq did not reserve"
            )
        shapes.append(_shape(s.template, gpu_types))
    if any(sh != shapes[0] for sh in shapes[1:]):
        raise Unhonourable(
            "the pod sets ask for different resources per Pod ("
            + "; ".join(f"{s.name}: {sh}" for s, sh in zip(sets, shapes, strict=True))
            + "); gpuq runs one gang of one shape"
        )
    selections = [_selection(s.template.get("spec") or {}) for s in sets]
    if any(sel != selections[0] for sel in selections[1:]):
        raise Unhonourable(
            "the pod sets select nodes differently (nodeSelector or required node "
            f"affinity of {', '.join(s.name for s in sets)}); gpuq maps one selection to "
            "GPU types and checks every node of the gang against it: give them the same")
    resources = dict(shapes[0])
    types = _gpu_types(_annotation(obj, sets, L.WL_GPU_TYPES),
                       _products(sets[0].template.get("spec") or {}), gpu_types)
    if types is not None:
        allowed = resources.get("gpu_types")
        if allowed is not None and not set(types) <= set(allowed):
            raise Unhonourable(f"GPU types {types} do not offer {allowed}")
        resources["gpu_types"] = types
    mem = _number(_annotation(obj, sets, L.WL_MIN_GPU_MEMORY), L.WL_MIN_GPU_MEMORY)
    if mem is not None:
        resources["min_gpu_memory_gb"] = mem
    template = policy_templates(obj, sets[:1], gpu_types)[0][1]  # the others: check_pod_sets
    spec: dict[str, Any] = {
        "name": L.label_value(meta.get("name", "")).lower() or "workload",
        "team": team,
        "replicas": sum(s.count for s in sets),
        "resources": resources,
        "pod_template": template,
    }
    prio = _priority(_annotation(obj, sets, L.WL_PRIORITY), sets[0].template, priorities,
                     priority_class_prefix)
    if prio is not None:
        spec["priority"] = prio
    pool = _annotation(obj, sets, L.WL_POOL)
    if pool:
        spec["pool"] = pool
    duration = _number(_annotation(obj, sets, L.WL_DURATION), L.WL_DURATION)
    if duration:
        spec["duration_estimate_s"] = duration
    limit = adaptor.time_limit_s(obj)
    if limit is not None:
        spec["time_limit_s"] = limit
    return spec

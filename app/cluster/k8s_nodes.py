"""Kubernetes Node (+ the Pods on it) -> the core's :class:`Node`.

Pure functions over the API's JSON dicts, so node sync is unit-testable
without a server. What is read, and why:

* GPU type: gpuq's own labels (``gpu-type``, ``gpu-memory``) or NVIDIA
  GPU Feature Discovery's (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``
  in MiB, ``nvidia.com/gpu.count``), matched to the configured types by
  name, then by the type's ``product`` regex, then by name tokens + memory.
  A product no type matches is *reported* (the caller emits an Event and a
  metric); the node's GPUs are then not offered, its CPU still is.
* Cards: allocatable ``resource_name`` of the type (``nvidia.com/gpu``, or
  another vendor's name), plus MIG resources (``nvidia.com/mig-3g.40gb``,
  mixed strategy; single strategy: one slice per ``nvidia.com/gpu``) packed onto
  the MIG-mode cards. A node whose device layer gpuq cannot drive (time-slicing or
  MPS replicas, HAMi, DRA only: :mod:`app.cluster.k8s_devices`) offers no cards.
* Usage by Pods gpuq does not manage: their CPU, memory and accelerator
  requests count as used (cards marked ``external``, slices used).
* Usage by gpuq's own Pods is what the dispatcher booked for them: the Pod's
  effective requests (app/domain/pod_resources.py ``booked``), so no second count.
* Cordoned or NotReady -> ``schedulable=False``. Taints NoSchedule/NoExecute (other
  than the tolerated GPU taints) go to ``Node.taints``: placement uses the node only
  for a job whose template tolerates them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from kubernetes.utils import parse_quantity

from app.cluster import k8s_labels as L
from app.cluster.k8s_devices import MIG_SINGLE, DeviceLayer, device_layer
from app.cluster.k8s_settings import KubeSettings
from app.domain.config import GpuTypeConfig
from app.domain.pod_resources import PRODUCT_KEYS, effective_requests, mig_prefix
from app.scheduling.model import Device, Node

EPS = 1e-6
_MEM = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
NETWORKS = ("ib", "roce", "eth")


@dataclass(slots=True)
class NodeView:
    """One node as gpuq sees it, and what did not fit the configuration."""

    node: Node
    unmatched_product: str | None = None  # GPU product that no configured type matches
    unknown_mig: list[str] = field(default_factory=list)  # MIG profiles not in the type
    reasons_unschedulable: list[str] = field(default_factory=list)
    layer: DeviceLayer = field(default_factory=DeviceLayer)  # the node's device plugin mode


def quantity(q: object) -> Decimal:
    try:
        return parse_quantity(q) if q is not None else Decimal(0)
    except ValueError:
        return Decimal(0)


def memory_label_gb(v: str | None) -> float | None:
    """``80g``, ``80Gi``, ``80GB``, ``80`` -> 80.0 (gpuq's label style)."""
    if not v:
        return None
    m = _MEM.match(v)
    if not m:
        return None
    n, unit = float(m.group(1)), m.group(2).lower()
    if unit in ("", "g", "gb", "gi", "gib"):
        return n
    if unit in ("m", "mb", "mi", "mib"):
        return n / 1024
    if unit in ("t", "tb", "ti", "tib"):
        return n * 1024
    return None


def _memory_close(type_gb: float, seen_gb: float | None) -> bool:
    # GFD reports MiB of the card (81920 for "80GB"); allow 10% either way.
    return seen_gb is None or abs(type_gb - seen_gb) <= 0.1 * max(type_gb, 1.0)


def _tokens_match(t: GpuTypeConfig, product: str) -> bool:
    """``v100-16g`` matches ``Tesla-V100-SXM2-16GB``: every name token occurs."""
    p = product.lower()
    return all(tok in p for tok in t.name.lower().split("-") if tok)


def match_gpu_type(
    product: str, memory_gb: float | None, types: Sequence[GpuTypeConfig]
) -> GpuTypeConfig | None:
    """The configured type for a label value, or None (then it is reported)."""
    low = product.lower()
    for t in types:
        if t.name.lower() == low:
            return t
    by_regex = [t for t in types if t.product and re.search(t.product, product, re.IGNORECASE)]
    if by_regex:
        close = [t for t in by_regex if _memory_close(t.memory_gb, memory_gb)]
        return (close or by_regex)[0]
    # article style "gpu-type=a100 gpu-memory=80g" -> a100-80g
    prefixed = [
        t
        for t in types
        if (t.name.lower().startswith(low + "-") or _tokens_match(t, product))
        and _memory_close(t.memory_gb, memory_gb)
    ]
    if len(prefixed) == 1 or (prefixed and memory_gb is not None):
        return prefixed[0]
    return None


def _node_gpu_type(
    labels: Mapping[str, str], allocatable: Mapping[str, object], types: Sequence[GpuTypeConfig],
    layer: DeviceLayer | None = None,
) -> tuple[GpuTypeConfig | None, str | None]:
    """(type, unmatched product). Explicit article labels win over GFD's. GFD's product
    loses its ``-SHARED`` / ``-MIG-<profile>`` suffix first; under the MIG single strategy
    its memory label is the slice's, so it is not compared with the card's."""
    art = labels.get(L.ARTICLE_GPU_TYPE)
    if art:
        t = match_gpu_type(art, memory_label_gb(labels.get(L.ARTICLE_GPU_MEMORY)), types)
        return (t, None) if t else (None, art)
    # another vendor's labeller: the label keys its types name (product_label, memory_label)
    for key in dict.fromkeys(t.product_label for t in types if t.product_label):
        value = labels.get(key)
        if not value:
            continue
        mine = [t for t in types if t.product_label == key]
        mem_key = next((t.memory_label for t in mine if t.memory_label), None)
        raw = labels.get(mem_key) if mem_key else None
        mem = float(raw) / 1024 if raw and raw.replace(".", "", 1).isdigit() else (
            memory_label_gb(raw))
        t = match_gpu_type(value, mem, mine)
        return (t, None) if t else (None, value)
    gfd = labels.get(L.GFD_PRODUCT)
    if gfd:
        product = (layer.product if layer is not None else None) or gfd
        mib = labels.get(L.GFD_MEMORY_MIB)
        mem = float(mib) / 1024 if mib and mib.replace(".", "", 1).isdigit() else None
        if layer is not None and layer.mode == MIG_SINGLE:
            mem = None
        t = match_gpu_type(product, mem, types)
        return (t, None) if t else (None, product)
    # No product label: a resource only one type uses (other vendors), or the
    # only configured type of a single-model cluster.
    present = [r for r, q in allocatable.items() if "/" in r and quantity(q) > 0]
    users = [t for t in types if t.resource_name in present]
    if len(users) == 1:
        return users[0], None
    if users and all(u.resource_name == "nvidia.com/gpu" for u in users):
        return None, "unlabelled nvidia.com/gpu node (add gpu-type or GFD labels)"
    if len(users) > 1:
        return None, f"ambiguous resources {sorted({u.resource_name for u in users})}"
    if any(r.startswith("nvidia.com/mig-") or r == "nvidia.com/gpu" for r in present):
        return None, "unlabelled GPU node"
    return None, None


def pod_requests(pod: Mapping) -> dict[str, Decimal]:
    """Effective requests as kube-scheduler and the kubelet count them (containers,
    sidecars, the largest init container, overhead): :func:`effective_requests`."""
    return effective_requests(pod.get("spec") or {})


def pod_holds_resources(pod: Mapping) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def _ready(node: Mapping) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _pack_mig(
    counts: Mapping[str, int], t: GpuTypeConfig, first_index: int, cards_hint: int | None
) -> tuple[list[Device], list[str]]:
    """Spread the node's MIG slices over its MIG-mode cards by compute fraction."""
    unknown = sorted(p for p in counts if p not in t.mig_profiles)
    slices = sorted(
        (p for p, n in counts.items() if p in t.mig_profiles for _ in range(n)),
        key=lambda p: (-t.mig_profiles[p].compute_fraction, p),
    )
    cards: list[list[str]] = [[] for _ in range(cards_hint or 0)]
    load: list[float] = [0.0] * len(cards)
    for p in slices:
        f = t.mig_profiles[p].compute_fraction
        for i, used in enumerate(load):
            if used + f <= 1.0 + 0.01:  # fractions are rounded sevenths
                cards[i].append(p)
                load[i] += f
                break
        else:
            cards.append([p])
            load.append(f)
    devices = [
        Device(index=first_index + i, mig_layout=tuple(layout))
        for i, layout in enumerate(cards)
        if layout
    ]
    for i, d in enumerate(devices):  # keep indices dense
        d.index = first_index + i
    return devices, unknown


def _keep_held(
    devices: list[Device], held: set[int], held_mig: list[tuple[int, int, str]]
) -> None:
    """Cards or slices gpuq's running Pods hold but the node no longer
    advertises (a card went unhealthy, a MIG layout changed) stay in the model,
    marked unavailable, so the core can still account for those jobs instead
    of failing on a device index that vanished."""
    need = max([*held, *(d for d, _s, _p in held_mig)], default=-1)
    while len(devices) <= need:
        devices.append(Device(index=len(devices), external=True))
    for d, sl, prof in held_mig:
        dev = devices[d]
        if len(dev.mig_layout) <= sl:
            missing = sl + 1 - len(dev.mig_layout)
            dev.mig_layout = dev.mig_layout + (prof,) * missing
            dev.slices_used = list(dev.slices_used) + [True] * missing
            dev.external = False


def node_view(
    node: Mapping,
    pods_on_node: Iterable[Mapping],
    types: Sequence[GpuTypeConfig],
    ks: KubeSettings,
    foreign: Mapping[str, Decimal] | None = None,
    own: Callable[[Mapping], bool] = L.is_gpuq_pod,
) -> NodeView:
    """``pods_on_node``: gpuq's Pods there (and any others, summed like ``foreign``);
    ``foreign``: the summed requests of the Pods gpuq does not manage that hold
    resources there (:class:`app.cluster.k8s_usage.NodeUsage`); ``own``: is a Pod
    gpuq's (its labels alone prove nothing: anyone who may create a Pod may write
    them), else what it requests counts as another workload's."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = meta.get("name", "")
    labels: dict[str, str] = dict(meta.get("labels") or {})
    alloc: dict[str, object] = dict(status.get("allocatable") or status.get("capacity") or {})

    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    resource = next((t.resource_name for t in types if t.resource_name in alloc),
                    "nvidia.com/gpu")
    layer = device_layer(labels, annotations, alloc, resource)
    gpu_type, unmatched = _node_gpu_type(labels, alloc, types, layer)
    if gpu_type is not None and gpu_type.resource_name != resource:
        layer = device_layer(labels, annotations, alloc, gpu_type.resource_name)
    devices: list[Device] = []
    unknown_mig: list[str] = []
    single = layer.mode == MIG_SINGLE and layer.mig_profile is not None
    if gpu_type is not None and layer.offered:
        whole = 0 if single else int(quantity(alloc.get(gpu_type.resource_name)))
        devices = [Device(index=i) for i in range(whole)]
        prefix = mig_prefix(gpu_type.resource_name)
        mig_counts = {
            r[len(prefix) :]: int(quantity(q))
            for r, q in alloc.items()
            if r.startswith(prefix) and quantity(q) > 0
        }
        if single and layer.mig_profile is not None:  # one slice per nvidia.com/gpu, all of
            # the labelled profile (``single`` checked the profile; this narrows its type)
            n = int(quantity(alloc.get(gpu_type.resource_name)))
            mig_counts = {layer.mig_profile: n} if n > 0 else {}
        if mig_counts:
            total = labels.get(L.GFD_COUNT)
            hint = (max(int(total) - whole, 0) if total and total.isdigit() and not single
                    else None)
            mig_devices, unknown_mig = _pack_mig(mig_counts, gpu_type, whole, hint)
            devices.extend(mig_devices)

    # --- taints, cordon, readiness
    reasons: list[str] = []
    if spec.get("unschedulable"):
        reasons.append("cordoned")
    if not _ready(node):
        reasons.append("not ready")
    taints: list[tuple[str, str, str]] = []
    for t in spec.get("taints") or []:
        key, effect = t.get("key", ""), t.get("effect", "")
        if effect not in ("NoSchedule", "NoExecute") or key in ks.tolerated_taints:
            continue
        taints.append((key, t.get("value", "") or "", effect))

    # --- usage by Pods gpuq does not manage
    used: dict[str, Decimal] = defaultdict(Decimal, foreign or {})
    gpuq_devices: set[int] = set()
    gpuq_slices: set[tuple[int, int]] = set()
    gpuq_mig: list[tuple[int, int, str]] = []
    for pod in pods_on_node:
        if not pod_holds_resources(pod):
            continue
        if own(pod):
            ann = (pod.get("metadata") or {}).get("annotations") or {}
            gpuq_devices.update(int(x) for x in ann.get(L.ANN_DEVICES, "").split(",") if x)
            for item in ann.get(L.ANN_MIG, "").split(";"):
                if item.count(":") == 2:
                    d, sl, prof = item.split(":")
                    gpuq_slices.add((int(d), int(sl)))
                    gpuq_mig.append((int(d), int(sl), prof))
            continue
        for r, q in pod_requests(pod).items():
            used[r] += q
    cpu_used = used.get("cpu", Decimal(0))
    mem_used = used.get("memory", Decimal(0))
    ext_whole = 0
    ext_mig: Counter[str] = Counter()
    if gpu_type is not None:
        ext_whole = int(used.get(gpu_type.resource_name, 0))
        prefix = mig_prefix(gpu_type.resource_name)
        for r, q in used.items():
            if r.startswith(prefix):
                ext_mig[r[len(prefix) :]] += int(q)
        if single and layer.mig_profile:  # another Pod's nvidia.com/gpu is a slice
            ext_mig[layer.mig_profile] += ext_whole
            ext_whole = 0
    if gpu_type is not None and layer.offered:
        _keep_held(devices, gpuq_devices, gpuq_mig)
    # External cards: highest index first and never one gpuq's own Pods hold,
    # so applying gpuq's running jobs on top does not double count.
    for d in sorted(devices, key=lambda d: -d.index):
        if ext_whole <= 0:
            break
        if not d.mig_layout and d.index not in gpuq_devices:
            d.external = True
            ext_whole -= 1
    for profile, n in ext_mig.items():
        for d in sorted(devices, key=lambda d: -d.index):
            for s, p in enumerate(d.mig_layout):
                if n > 0 and p == profile and (d.index, s) not in gpuq_slices:
                    d.slices_used[s] = True
                    n -= 1

    rack = next((labels[k] for k in ks.rack_labels if labels.get(k)), None)
    network = labels.get(ks.network_label, "eth").lower()
    core = Node(
        name=name,
        gpu_type=gpu_type.name if gpu_type is not None and devices else None,
        devices=devices if gpu_type is not None else [],
        cpu=float(quantity(alloc.get("cpu"))),
        memory_gb=float(quantity(alloc.get("memory")) / Decimal(10**9)),
        cpu_used=float(cpu_used),
        memory_used_gb=float(mem_used / Decimal(10**9)),
        rack=rack,
        network=network if network in NETWORKS else "eth",
        nvlink_domain=labels.get(ks.nvlink_label),
        # only what a job may select it by: every other label (the hostname's above all)
        # would make each node's signature its own and placement score node by node
        labels={k: labels[k] for k in sorted(PRODUCT_KEYS) if k in labels},
        taints=tuple(taints),
        schedulable=not reasons,
        device_layer=layer.as_dict(),
    )
    return NodeView(core, unmatched, unknown_mig, reasons, layer)


def node_views(
    nodes: Iterable[Mapping],
    pods: Iterable[Mapping],
    types: Sequence[GpuTypeConfig],
    ks: KubeSettings,
    foreign: Mapping[str, Mapping[str, Decimal]] | None = None,
    own: Callable[[Mapping], bool] = L.is_gpuq_pod,
) -> list[NodeView]:
    """Every node's view. ``foreign``: node -> summed requests of the Pods gpuq does
    not manage, kept per event (so a pass costs O(nodes + gpuq's Pods), not O(all
    Pods)); ``pods`` are read one by one, gpuq's and any others given."""
    by_node: dict[str, list[Mapping]] = defaultdict(list)
    for p in pods:
        n = (p.get("spec") or {}).get("nodeName")
        if n:
            by_node[n].append(p)
    out = []
    for n in nodes:
        name = (n.get("metadata") or {}).get("name", "")
        out.append(node_view(n, by_node.get(name, ()), types, ks,
                             (foreign or {}).get(name), own))
    return out

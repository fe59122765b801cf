"""Explain: a reason a person can act on for every job left waiting.

Two kinds. ``never_fits`` compares the request with the cluster's static
capacity (what no amount of waiting will fix: it becomes
``unschedulable``). ``capacity_reason`` describes what is free now,
from the capacity index, e.g. "needs 2 x 4 x a100-80g (>= 40 GB); largest
free block: a100-80g 2, v100-16g 0".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.context import PlacementContext
from app.scheduling.demands import replica_options
from app.scheduling.filters import FAST_NETWORKS, allowed_type_names, allowed_types
from app.scheduling.model import GpuType, JobRequest, Node

EPS = 1e-9


@dataclass(slots=True)
class TypeCapacity:
    nodes: int = 0
    cards: int = 0
    max_cards: int = 0
    fast_cards: int = 0
    max_cpu: float = 0.0
    max_memory_gb: float = 0.0
    mig_slices: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class StaticCapacity:
    """The cluster with nothing running: what could ever fit."""

    by_type: dict[str, TypeCapacity]
    max_cpu: float
    max_memory_gb: float

    @classmethod
    def of(cls, nodes: Sequence[Node]) -> StaticCapacity:
        by_type: dict[str, TypeCapacity] = {}
        max_cpu = max_mem = 0.0
        for n in nodes:
            if not n.schedulable:
                continue
            max_cpu = max(max_cpu, n.cpu)
            max_mem = max(max_mem, n.memory_gb)
            if not n.devices or n.gpu_type is None:
                continue
            tc = by_type.setdefault(n.gpu_type, TypeCapacity())
            whole = sum(1 for d in n.devices if not d.mig_layout and not d.external)
            tc.nodes += 1
            tc.cards += whole
            tc.max_cards = max(tc.max_cards, whole)
            if n.network in FAST_NETWORKS:
                tc.fast_cards += whole
            tc.max_cpu = max(tc.max_cpu, n.cpu)
            tc.max_memory_gb = max(tc.max_memory_gb, n.memory_gb)
            for d in n.devices:
                for p in d.mig_layout:
                    tc.mig_slices[p] = tc.mig_slices.get(p, 0) + 1
        return cls(by_type, max_cpu, max_mem)


def _types_text(job: JobRequest, names: Sequence[str]) -> str:
    return "|".join(names) if names else "none"


def never_fits(job: JobRequest, static: StaticCapacity, ctx: PlacementContext) -> str | None:
    """Why no cluster state could ever run this job (None if some could)."""
    if job.cpu > static.max_cpu + EPS or job.memory_gb > static.max_memory_gb + EPS:
        return (
            f"no node has {job.cpu:g} CPU and {job.memory_gb:g} GB memory per replica "
            f"(largest: {static.max_cpu:g} CPU, {static.max_memory_gb:g} GB)"
        )
    mode = job.mode
    if mode == "gpus" and not job.gpus:
        return None
    names = allowed_type_names(job, ctx.gpu_types, ctx.pools)
    if not names:
        return (
            f"no GPU type is allowed (job types: {', '.join(job.gpu_types) or 'any'}, "
            f"pool {job.pool}, avoided: {', '.join(job.avoid_gpu_types) or 'none'})"
        )
    types = allowed_types(job, ctx.gpu_types, ctx.pools)
    present = [t for t in types if t.name in static.by_type]
    if mode == "gpus":
        if not types:
            return (
                f"no allowed GPU type has >= {job.min_gpu_memory_gb:g} GB memory "
                f"(allowed: {', '.join(names)})"
            )
        k = job.gpus or 0
        if not present:
            return (
                f"no node has a GPU of an allowed type with >= {job.min_gpu_memory_gb:g} GB "
                f"(types that would fit: {', '.join(t.name for t in types)}; "
                f"nodes have: {', '.join(sorted(static.by_type)) or 'no GPUs'})"
            )
        ok = [t for t in present if _host_ok(job, static, t) and static.by_type[t.name].max_cards
              >= k]
        if not ok:
            return (
                f"no node of {_types_text(job, [t.name for t in types])} has {k} GPU(s) with "
                f"{job.cpu:g} CPU and {job.memory_gb:g} GB memory"
            )
        if job.topology == "same_node" and job.min_available > 1 and not any(
            static.by_type[t.name].max_cards >= k * job.min_available for t in ok
        ):
            return (
                f"same_node needs {job.min_available} x {k} GPU(s) on one node; "
                f"largest node has {max(static.by_type[t.name].max_cards for t in ok)}"
            )
        return None
    if mode == "mig":
        options = replica_options(job, types)
        if not options:
            if job.mig != "auto":
                return (
                    f"MIG profile {job.mig} with >= {job.min_gpu_memory_gb:g} GB is not "
                    f"defined for {', '.join(names)}"
                )
            return f"no MIG slice or card of {', '.join(names)} has >= {job.min_gpu_memory_gb:g} GB"
        for d in options:
            tc = static.by_type.get(d.gpu_type or "")
            if tc is None:
                continue
            if d.kind == "mig" and tc.mig_slices.get(d.profile, 0) > 0:
                return None
            if d.kind == "whole" and tc.cards > 0:
                return None
        if job.mig == "auto":
            return (
                f"no node has a MIG slice or whole card of {', '.join(names)} with "
                f">= {job.min_gpu_memory_gb:g} GB"
            )
        having = [t.name for t in types if job.mig in t.mig_profiles] or names
        return (
            f"no node's MIG layout has a {job.mig} slice (types defining it: "
            f"{', '.join(having)}); ask for mig: auto or another profile"
        )
    if mode == "gpu_share":
        if not any(t.shareable for t in types):
            return (
                f"gpu_share needs a shareable GPU type; allowed types "
                f"({', '.join(names)}) are not shareable or lack {job.min_gpu_memory_gb:g} GB"
            )
        if not any(t.shareable and t.name in static.by_type for t in types):
            return "no node has a shareable GPU of an allowed type"
        return None
    if mode == "gpu_units":
        units = job.gpu_units or 0.0
        per_type = {t.name: static.by_type[t.name].cards * t.weight for t in present}
        best = sum(per_type.values()) if job.allow_mixed_types else max(
            per_type.values(), default=0.0)
        if best + EPS < units:
            return (
                f"gpu_units {units:g} CU exceeds what the cluster has of "
                f"{', '.join(names)} ({best:g} CU"
                f"{'' if job.allow_mixed_types else ' of one type; set allow_mixed_types'})"
            )
    return None


def _host_ok(job: JobRequest, static: StaticCapacity, t: GpuType) -> bool:
    tc = static.by_type[t.name]
    return tc.max_cpu + EPS >= job.cpu and tc.max_memory_gb + EPS >= job.memory_gb


def capacity_reason(job: JobRequest, index: CapacityIndex, ctx: PlacementContext) -> str:
    """What is missing now, from the index (cheap: no node scan)."""
    types = allowed_types(job, ctx.gpu_types, ctx.pools)
    mem = f" (>= {job.min_gpu_memory_gb:g} GB)" if job.min_gpu_memory_gb else ""
    gang = f"{job.min_available} replicas x " if job.min_available > 1 else ""
    topo = f", topology {job.topology}" if job.topology != "none" and job.min_available > 1 else ""
    mode = job.mode
    if mode == "gpus" and not job.gpus:
        return (
            f"needs {gang}{job.cpu:g} CPU and {job.memory_gb:g} GB memory on one node; "
            "no node has that free"
        )
    if mode == "gpus":
        k = job.gpus or 0
        free = ", ".join(f"{t.name} {index.max_free_whole(t.name)}" for t in types)
        fits = any(index.max_free_whole(t.name) >= k for t in types)
        head = f"needs {gang}{k} x {_types_text(job, [t.name for t in types])}{mem} per replica"
        if not fits:
            return f"{head}; largest free block: {free}{topo}"
        return (
            f"{head}; free GPU blocks exist ({free}) but not with {job.cpu:g} CPU and "
            f"{job.memory_gb:g} GB memory free on the same node{topo}, or they are reserved"
        )
    if mode == "gpu_units":
        free = ", ".join(
            f"{t.name} {index.free_whole_total(t.name)} cards" for t in types
        )
        return (
            f"needs {job.gpu_units:g} CU of {_types_text(job, [t.name for t in types])}"
            f"{' (one type)' if not job.allow_mixed_types else ''}; free: {free}{topo}"
        )
    if mode == "mig":
        opts = replica_options(job, types)
        parts = []
        for d in opts[:4]:
            if d.kind == "mig":
                n = index.mig_free_total(d.gpu_type or "", d.profile)
                parts.append(f"{d.gpu_type} {d.profile}: {n}")
            else:
                parts.append(f"{d.gpu_type} whole: {index.free_whole_total(d.gpu_type or '')}")
        return f"needs {gang}{job.mig} MIG{mem}; free: {', '.join(parts) or 'none'}{topo}"
    shareable = [t for t in types if t.shareable]
    return (
        f"needs {gang}a {job.gpu_share:g} share of {_types_text(job, [t.name for t in shareable])}"
        f"{mem}; no card has that much share and memory free{topo}"
    )

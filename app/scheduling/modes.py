"""Request modes: one object per way a job asks for GPUs, and the one table of them.

A job asks in exactly one mode (:attr:`JobRequest.mode`, set by which request field
is given): ``gpus`` whole cards per replica (``gpus: 0`` is CPU-only work, its own
object here), ``gpu_units`` a total of CU made of whole cards of any count,
``mig`` one MIG slice (or ``auto``: a slice or a card), ``gpu_share`` a fraction of
a shareable card. The core never compares a mode's name: it asks the job's mode
object (:func:`mode_of`) what it needs to know:

- ``reads``: the request field that selects and sizes the mode (the fields of every
  mode join the job signature and the score cache key: :data:`MODE_FIELDS`);
- ``options(job, types)``: the :class:`~app.scheduling.demands.Demand` options one
  replica may take, cheapest first (placement, the cheapest charge, texts);
- ``units_total(job)``: the CU total of a request placed as one sum of whole cards
  (``gpu_units``), else None (placement then places replica by replica);
- ``cheapest_first``: placement stops at the cheapest tier of options that fits;
- ``needs_gpu(job)``, ``whole_cards(job)``: what preemption, reservations and the
  descheduler look for;
- ``card_shape(job)``: whole cards and a fraction of one per replica, as entitlements
  and the expected job mix count a request before it is placed;
- ``shareable_only``: only shareable types serve it (the entitlement classes);
- ``guarantee_need(job, t)``: the CU a never-borrowing job needs of type ``t``
  (None: not known before placement, the check does not apply);
- ``never_text`` / ``capacity_text`` / ``capacity_code``: why it can never fit, what
  is missing now (:mod:`app.scheduling.reasons` adds what every mode shares).

Adding a mode: its field on :class:`JobRequest` and in ``JobRequest.mode``, one
subclass here, and one line in :data:`MODES` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from app.scheduling.demands import EPS, Demand, share_memory
from app.scheduling.filters import allowed_type_names, allowed_types
from app.scheduling.model import GpuType, JobRequest
from app.scheduling.verdicts import ReasonCode

if TYPE_CHECKING:  # annotations only: these modules import this one
    from app.scheduling.capacity_index import CapacityIndex
    from app.scheduling.context import PlacementContext
    from app.scheduling.reasons import StaticCapacity


def types_text(names: Sequence[str]) -> str:
    return "|".join(names) if names else "none"


class RequestMode:
    """What the core asks of one request mode; the defaults are a GPU mode's."""

    name: ClassVar[str]  # JobRequest.mode of the requests it serves
    reads: ClassVar[frozenset[str]]  # the request field that selects and sizes it
    cheapest_first: ClassVar[bool] = False
    shareable_only: ClassVar[bool] = False
    capacity_code: ClassVar[ReasonCode] = ReasonCode.CAPACITY

    def variant(self, job: JobRequest) -> RequestMode:
        """The object that serves this job (a mode may have a variant: ``gpus: 0``)."""
        return self

    def needs_gpu(self, job: JobRequest) -> bool:
        return True

    def whole_cards(self, job: JobRequest) -> int:
        """Whole cards one replica needs on one node (0: not whole cards)."""
        return 0

    def units_total(self, job: JobRequest) -> float | None:
        return None

    def options(self, job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
        """Demands that satisfy one replica, cheapest in CU first. ``types`` are the
        allowed types (whole-card memory already checked: ``filters.allowed_types``)."""
        return []

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        """(whole cards, fraction of a card) one replica is counted as before placement."""
        raise NotImplementedError

    def guarantee_need(self, job: JobRequest, t: GpuType) -> float | None:
        return None

    def never_text(
        self, job: JobRequest, static: StaticCapacity, ctx: PlacementContext
    ) -> str | None:
        """Why no cluster state could ever run the job (None: some could); host CPU and
        memory are checked before (``reasons``)."""
        names = allowed_type_names(job, ctx.gpu_types, ctx.pools)
        if not names:
            return (
                f"no GPU type is allowed (job types: {', '.join(job.gpu_types) or 'any'}, "
                f"pool {job.pool}, avoided: {', '.join(job.avoid_gpu_types) or 'none'})"
            )
        types = allowed_types(job, ctx.gpu_types, ctx.pools)
        present = [t for t in types if t.name in static.by_type]
        return self.never_of_types(job, static, names, types, present)

    def never_of_types(
        self, job: JobRequest, static: StaticCapacity, names: list[str],
        types: list[GpuType], present: list[GpuType],
    ) -> str | None:
        return None

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        """What is missing now, from the index; ``gang``, ``mem`` and ``topo`` are the
        shared parts of the sentence."""
        raise NotImplementedError


# -- gpus: whole cards per replica -------------------------------------------------
_TOPOLOGY_WHERE = {
    "same_rack": " within one rack",
    "fast_network": " on one node or on fast-network (ib/roce) nodes",
}


def _slots(job: JobRequest, k: int, whole: int, cpu: float, mem: float) -> int:
    """Replicas of ``k`` whole cards one empty node could hold at once."""
    n = whole // k
    if job.cpu > EPS:
        n = min(n, int((cpu + EPS) // job.cpu))
    if job.memory_gb > EPS:
        n = min(n, int((mem + EPS) // job.memory_gb))
    return max(0, n)


def _mig_note(caps: Sequence[tuple[str, int, int, float, float]], k: int) -> str:
    cut = [(name, whole, c) for name, whole, c, _cpu, _mem in caps if c and whole + c >= k]
    if not cut:
        return ""
    name, whole, c = max(cut, key=lambda x: (x[1] + x[2], x[0]))
    return f" ({name} has {whole} whole + {c} cut into MIG slices)"


def _holders(caps: Sequence[tuple[str, int, int, float, float]], slots: dict[str, int]) -> str:
    parts = []
    for name, whole, cut, _cpu, _mem in sorted(caps, key=lambda c: (-slots[c[0]], c[0]))[:4]:
        mig = f" + {cut} MIG-cut" if cut else ""
        # ("a100-1: 1 (8 whole card(s))" left the 1 unexplained)
        parts.append(f"{name} holds {slots[name]} with {whole} whole card(s){mig}")
    return "; ".join(parts)


def _gang_blocks(
    job: JobRequest, k: int, types: Sequence[GpuType], index: CapacityIndex
) -> str | None:
    """Why too few ``k``-card blocks are free for ``min_available`` replicas,
    counted as the placement counts them (None: enough are free): a gang
    takes all its replicas of one GPU type unless ``allow_mixed_types``, and
    a ``spread`` gang one replica per node. Summing the blocks of every type
    once told a gang that could not mix types that blocks existed "but not
    with CPU and memory free", which was never why it waited."""
    m = job.min_available
    spread = job.placement == "spread" and job.replicas > 1
    slots = {t.name: index.replica_slots(t.name, k, spread) for t in types}
    one_type = job.replicas > 1 and not job.allow_mixed_types and len(slots) > 1
    n = max(slots.values(), default=0) if one_type else sum(slots.values())
    if n >= m:
        return None
    if m <= 1:
        return ""
    what = f"nodes with {k} free card(s)" if spread else f"free {k}-card blocks"
    if not one_type:
        text = f"; {what}: {n} of {m} needed"
    else:
        per = ", ".join(f"{name} {s}" for name, s in slots.items())
        text = (f"; {what} of one GPU type: at most {n} of {m} needed ({per}; a gang "
                "does not mix types unless allow_mixed_types)")
    return text + (" (spread: one replica per node)" if spread else "")


class WholeCards(RequestMode):
    name = "gpus"
    reads = frozenset({"gpus"})

    def variant(self, job: JobRequest) -> RequestMode:
        return self if job.gpus else CPU_ONLY

    def whole_cards(self, job: JobRequest) -> int:
        return job.gpus or 0

    def options(self, job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
        k = job.gpus or 0
        need = job.min_gpu_memory_gb
        return [
            Demand(t.name, "whole", count=k, units=t.weight * k, memory_gb=t.memory_gb)
            for t in types
            if t.memory_gb + EPS >= need
        ]

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        return job.gpus or 0, 0.0

    def guarantee_need(self, job: JobRequest, t: GpuType) -> float | None:
        return float((job.gpus or 0) * job.min_available) * t.weight

    def never_of_types(
        self, job: JobRequest, static: StaticCapacity, names: list[str],
        types: list[GpuType], present: list[GpuType],
    ) -> str | None:
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
        # replicas each node could hold at once: whole cards, CPU and memory of the same
        # node, per distinct node shape (counted), then per node only for the message
        per_shape = [(_slots(job, k, *shape), n) for t in present
                     for shape, n in static.by_type[t.name].shapes.items()]
        most = max((x for x, _ in per_shape), default=0)
        total = sum(x * n for x, n in per_shape)
        m = job.min_available
        same_node = job.topology == "same_node" and m > 1
        if most > 0 and (most >= m if same_node else total >= m):
            return None
        caps = [c for t in present for c in static.by_type[t.name].node_caps]
        slots = {name: _slots(job, k, whole, cpu, mem) for name, whole, _c, cpu, mem in caps}
        if not any(slots.values()):
            return (
                f"no node of {types_text([t.name for t in types])} has {k} whole GPU(s) "
                f"with {job.cpu:g} CPU and {job.memory_gb:g} GB memory"
                f"{_mig_note(caps, k)}"
            )
        if same_node:
            if max(slots.values()) < m:
                return (
                    f"same_node needs {m} x {k} GPU(s) (with {m * job.cpu:g} CPU, "
                    f"{m * job.memory_gb:g} GB memory) on one node; the largest holds "
                    f"{max(slots.values())} replica(s)"
                )
        elif sum(slots.values()) < m:
            return (
                f"needs {m} replicas x {k} whole {types_text([t.name for t in present])} "
                f"GPU(s) at once; the whole cluster holds at most {sum(slots.values())} "
                f"({_holders(caps, slots)})"
            )
        return None

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        k = job.gpus or 0
        m = job.min_available
        free = ", ".join(f"{t.name} {index.max_free_whole(t.name)}" for t in types)
        head = f"needs {gang}{k} x {types_text([t.name for t in types])}{mem} per replica"
        if job.topology == "same_node" and m > 1:  # the whole gang on one node
            if not any(index.max_free_whole(t.name) >= k * m for t in types):
                return f"{head}; largest free block: {free}{topo}"
        else:
            blocks = _gang_blocks(job, k, types, index)
            if blocks is not None:
                return f"{head}; largest free block: {free}{blocks}{topo}"
        where = _TOPOLOGY_WHERE.get(job.topology, "") if m > 1 else ""
        return (
            f"{head}; free GPU blocks exist ({free}) but not{where} with {job.cpu:g} CPU and "
            f"{job.memory_gb:g} GB memory free on the same node, or they are reserved"
        )


class CpuOnly(WholeCards):
    """``gpus: 0``: no card; it runs on CPU-only nodes unless
    ``scheduler.cpu_jobs_on_gpu_nodes``."""

    capacity_code = ReasonCode.HOST_RESOURCES

    def variant(self, job: JobRequest) -> RequestMode:
        return self

    def needs_gpu(self, job: JobRequest) -> bool:
        return False

    def whole_cards(self, job: JobRequest) -> int:
        return 0

    def options(self, job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
        return [Demand(None, "none")]

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        return 0, 0.0

    def never_text(
        self, job: JobRequest, static: StaticCapacity, ctx: PlacementContext
    ) -> str | None:
        if ctx.config.cpu_jobs_on_gpu_nodes:
            return None
        if not static.cpu_node_max_cpu:
            return ("a job without GPUs runs on CPU-only nodes and the cluster has none "
                    "(or set scheduler.cpu_jobs_on_gpu_nodes: true to let such jobs use GPU "
                    "nodes)")
        if (job.cpu > static.cpu_node_max_cpu + EPS
                or job.memory_gb > static.cpu_node_max_memory_gb + EPS):
            return (
                f"no CPU-only node has {job.cpu:g} CPU and {job.memory_gb:g} GB memory per "
                f"replica (largest: {static.cpu_node_max_cpu:g} CPU, "
                f"{static.cpu_node_max_memory_gb:g} GB); jobs without GPUs run on CPU-only "
                "nodes")
        return None

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        return (
            f"needs {gang}{job.cpu:g} CPU and {job.memory_gb:g} GB memory on one node; "
            "no node has that free"
        )


# -- gpu_units: a CU total of whole cards ------------------------------------------
class GpuUnits(RequestMode):
    name = "gpu_units"
    reads = frozenset({"gpu_units"})

    def units_total(self, job: JobRequest) -> float | None:
        return job.gpu_units or 0.0

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        return 1, 0.0  # the type is unknown until placed: one card

    def guarantee_need(self, job: JobRequest, t: GpuType) -> float | None:
        return job.gpu_units or 0.0

    def never_of_types(
        self, job: JobRequest, static: StaticCapacity, names: list[str],
        types: list[GpuType], present: list[GpuType],
    ) -> str | None:
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

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        free = ", ".join(
            f"{t.name} {index.free_whole_total(t.name)} cards" for t in types
        )
        return (
            f"needs {job.gpu_units:g} CU of {types_text([t.name for t in types])}"
            f"{' (one type)' if not job.allow_mixed_types else ''}; free: {free}{topo}"
        )


# -- mig: one slice (auto: a slice or a whole card) --------------------------------
class Mig(RequestMode):
    name = "mig"
    reads = frozenset({"mig"})
    cheapest_first = True  # the cheapest group in CU that fits wins

    def options(self, job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
        need = job.min_gpu_memory_gb
        out: list[Demand] = []
        auto = job.mig == "auto"
        for t in types:
            for name, p in t.mig_profiles.items():
                if (auto or name == job.mig) and p.memory_gb + EPS >= need:
                    out.append(
                        Demand(t.name, "mig", profile=name, units=t.weight * p.compute_fraction,
                               memory_gb=p.memory_gb)
                    )
            if auto and t.memory_gb + EPS >= need:
                out.append(Demand(t.name, "whole", count=1, units=t.weight,
                                  memory_gb=t.memory_gb))
        out.sort(key=lambda d: (round(d.units, 9), d.memory_gb))
        return out

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        return 0, 0.3  # a slice is a fraction of a card

    def never_of_types(
        self, job: JobRequest, static: StaticCapacity, names: list[str],
        types: list[GpuType], present: list[GpuType],
    ) -> str | None:
        options = self.options(job, types)
        if not options:
            if job.mig != "auto":
                mem = (f" with >= {job.min_gpu_memory_gb:g} GB" if job.min_gpu_memory_gb
                       else "")  # ("with >= 0 GB" was noise)
                return f"MIG profile {job.mig}{mem} is not defined for {', '.join(names)}"
            return f"no MIG slice or card of {', '.join(names)} has >= {job.min_gpu_memory_gb:g} GB"
        for d in options:
            tc = static.by_type.get(d.gpu_type or "")
            if tc is not None and d.how.in_inventory(d, tc):
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

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        parts = [d.how.free_text(d, index) for d in self.options(job, types)[:4]]
        return f"needs {gang}{job.mig} MIG{mem}; free: {', '.join(parts) or 'none'}{topo}"


# -- gpu_share: a fraction of a shareable card -------------------------------------
class GpuShare(RequestMode):
    name = "gpu_share"
    reads = frozenset({"gpu_share"})
    shareable_only = True

    def options(self, job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
        x = job.gpu_share or 0.0
        need = job.min_gpu_memory_gb
        out = []
        for t in types:
            if not t.shareable:
                continue
            mem = share_memory(t, x, need)
            if mem > t.memory_gb + EPS:
                continue
            out.append(Demand(t.name, "share", share=x, units=t.weight * x, memory_gb=mem,
                              share_memory_gb=mem))
        out.sort(key=lambda d: (round(d.units, 9), d.memory_gb))
        return out

    def card_shape(self, job: JobRequest) -> tuple[int, float]:
        return 0, job.gpu_share or 0.0

    def never_of_types(
        self, job: JobRequest, static: StaticCapacity, names: list[str],
        types: list[GpuType], present: list[GpuType],
    ) -> str | None:
        if not any(t.shareable for t in types):
            return (
                f"gpu_share needs a shareable GPU type; allowed types "
                f"({', '.join(names)}) are not shareable"
                + (f" or lack {job.min_gpu_memory_gb:g} GB" if job.min_gpu_memory_gb else "")
                + "; ask for a whole card (gpus: 1)"
                + (" or a MIG slice (mig: auto)" if any(t.mig_profiles for t in types) else "")
                + " instead"
            )
        if not any(t.shareable and t.name in static.by_type for t in types):
            return "no node has a shareable GPU of an allowed type"
        return None

    def capacity_text(
        self, job: JobRequest, index: CapacityIndex, types: list[GpuType], gang: str,
        mem: str, topo: str,
    ) -> str:
        shareable = [t for t in types if t.shareable]
        return (
            f"needs {gang}a {job.gpu_share:g} share of "
            f"{types_text([t.name for t in shareable])}"
            f"{mem}; no card has that much share and memory free{topo}"
        )


CPU_ONLY = CpuOnly()
# The one table: JobRequest.mode -> the object that serves it
MODES: Mapping[str, RequestMode] = {
    m.name: m for m in (WholeCards(), GpuUnits(), Mig(), GpuShare())
}
# Every request field a mode reads: part of the job signature and the score cache key
MODE_FIELDS: frozenset[str] = frozenset().union(*(m.reads for m in MODES.values()))


def mode_of(job: JobRequest) -> RequestMode:
    return MODES[job.mode].variant(job)


def replica_options(job: JobRequest, types: Sequence[GpuType]) -> list[Demand]:
    """Demands that satisfy one replica of ``job`` (none for ``gpu_units``), cheapest first."""
    return mode_of(job).options(job, types)

"""How much a placement reduces what the expected job mix can still use.

The idea of Fragmentation Gradient Descent (FGD, USENIX ATC'23): a node's
fragmentation, with respect to a workload, is the GPU capacity on it that
a task drawn from that workload could not use. Placing a task where that
measure grows least keeps the cluster able to take future tasks.

For one node (free GPU capacity per card ``L``, free CPU ``c``, free
memory ``m``) and one task kind ``k`` of the mix (popularity ``p_k``):

* the task cannot run there at all (wrong GPU type, too little CPU or
  memory, not enough cards with room for it), or it is CPU-only: every
  free GPU-milli ``T = sum(L)`` is a fragment for it;
* it can run there: the cards whose free part is smaller than what the
  task needs per card are fragments for it.

``F(node) = sum_k p_k * frag_k(node) = T - sum_{k fits} p_k * (T - small_k)``
where ``small_k`` is the free capacity on cards too small for ``k``.

This is FGD's measure, plus memory (FGD only checks CPU). It is computed
in integer units (milli-GPU, milli-CPU, MB or MiB) on a node *signature*
``(type, sorted free per card, free CPU, free memory)`` so identical nodes
share one cached value, and the mix is compiled per GPU type into classes
``(milli per card, cards)`` each with a 2-D cumulative table of weights by
(CPU, memory) need: one query is a couple of bisects per class, not a loop
over the whole mix.

INTERFACE NOTE (for the team): the signatures of ``node_fragmentation`` and
``fragmentation_delta`` are fixed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from app.scheduling.model import GpuType, Node, ReplicaPlacement
from app.scheduling.node_reads import reads

MILLI = 1000


@dataclass(frozen=True, slots=True)
class MixEntry:
    """One kind of task in the expected workload.

    ``gpus`` whole cards, or (when ``gpus == 0``) ``gpu_share`` of one card
    (0 < share <= 1; 0 means CPU-only). ``weight`` is its popularity.
    """

    gpus: int
    gpu_share: float
    cpu: float
    memory_gb: float
    gpu_types: tuple[str, ...] = ()
    min_gpu_memory_gb: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """The expected workload, plus gpuq's two terms beyond FGD (both 0 = pure FGD).

    ``w_balance`` charges a placement for leaving the node's free GPU share and
    free CPU share apart (GPUs stranded without CPU, see :func:`placement_cost`);
    ``w_type`` times ``type_pressure[type]`` charges it for using a GPU type
    that pods restricted to few types need (:func:`type_pressure`).
    """

    entries: tuple[MixEntry, ...] = ()
    type_pressure: tuple[tuple[str, float], ...] = ()
    w_balance: float = 0.0
    w_type: float = 0.0


@dataclass(frozen=True, slots=True)
class IntTask:
    """A mix entry in integer units: ``num`` cards of ``milli`` each (num 0: CPU-only)."""

    cpu: int
    mem: int
    num: int
    milli: int
    types: frozenset[str] | None  # None = any type
    weight: float
    min_gpu_memory_gb: float = 0.0


class _Table:
    """Sum of weights of tasks with cpu <= c and mem <= m, by two bisects."""

    __slots__ = ("cpus", "mems", "cum")

    def __init__(self, items: list[tuple[int, int, float]]) -> None:
        self.cpus = sorted({c for c, _, _ in items})
        self.mems = sorted({m for _, m, _ in items})
        grid = [[0.0] * len(self.mems) for _ in self.cpus]
        for c, m, w in items:
            grid[bisect_right(self.cpus, c) - 1][bisect_right(self.mems, m) - 1] += w
        for i in range(len(self.cpus)):  # 2-D prefix sums
            row = grid[i]
            acc = 0.0
            for j in range(len(self.mems)):
                acc += row[j]
                row[j] = acc + (grid[i - 1][j] if i else 0.0)
        self.cum = grid

    def weight(self, cpu: int, mem: int) -> float:
        i = bisect_right(self.cpus, cpu) - 1
        if i < 0:
            return 0.0
        j = bisect_right(self.mems, mem) - 1
        if j < 0:
            return 0.0
        return self.cum[i][j]


class FragModel:
    """A workload mix compiled for fast per-node fragmentation queries.

    ``type_ok(task, type_name)`` says whether a task may use a GPU type (its
    allowed list, memory need). ``use_memory=False`` reproduces FGD, which
    ignores host memory. Values are cached by node signature.
    """

    def __init__(
        self,
        tasks: Iterable[IntTask],
        type_ok: Callable[[IntTask, str], bool] | None = None,
        *,
        use_memory: bool = True,
    ) -> None:
        self.tasks = [t for t in tasks if t.weight > 0]
        total = sum(t.weight for t in self.tasks)
        self.total_weight = total
        self._norm = 1.0 / total if total > 0 else 0.0
        self._type_ok = type_ok or (lambda t, name: t.types is None or name in t.types)
        self.use_memory = use_memory
        self._classes: dict[str, list[tuple[int, int, _Table]]] = {}
        self._cache: dict[tuple, float] = {}

    def classes(self, type_name: str) -> list[tuple[int, int, _Table]]:
        got = self._classes.get(type_name)
        if got is None:
            groups: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
            for t in self.tasks:
                if t.num == 0 or not self._type_ok(t, type_name):
                    continue
                mem = t.mem if self.use_memory else 0
                groups.setdefault((t.milli, t.num), []).append((t.cpu, mem, t.weight * self._norm))
            got = [(milli, num, _Table(items)) for (milli, num), items in sorted(groups.items())]
            self._classes[type_name] = got
        return got

    def frag(self, type_name: str, free: tuple[int, ...], cpu: int, mem: int) -> float:
        """Expected fragmented GPU-milli; ``free`` is sorted high to low."""
        key = (type_name, free, cpu, mem)
        v = self._cache.get(key)
        if v is not None:
            return v
        total = sum(free)
        if total <= 0:
            v = 0.0
        else:
            if not self.use_memory:
                mem = 0
            v = float(total)
            n = len(free)
            for milli, num, table in self.classes(type_name):
                if num > n or free[num - 1] < milli:
                    continue
                w = table.weight(cpu, mem)
                if w <= 0.0:
                    continue
                small = 0
                for x in free:
                    if x < milli:
                        small += x
                v -= w * (total - small)
        if len(self._cache) > 500_000:
            self._cache.clear()
        self._cache[key] = v
        return v


def placement_cost(
    model: FragModel,
    type_name: str,
    before: tuple[tuple[int, ...], int, int],
    after: tuple[tuple[int, ...], int, int],
    cpu_capacity: int,
    gpu_milli: int,
    *,
    w_balance: float = 0.0,
    w_type: float = 0.0,
    pressure: float = 0.0,
) -> float:
    """gpuq's cost of a placement on one node, in GPU-milli (lower is better).

    ``before``/``after`` are the node's (free per card high->low, free CPU,
    free memory). The cost is

    * FGD's fragmentation delta ``F(after) - F(before)``;
    * ``w_balance x |free GPU share - free CPU share| x 1000`` after the
      placement: a node whose CPU runs out while cards are free strands
      them (the Alibaba traces lose more GPUs this way than any other, once
      shares are packed), one whose cards run out first strands only CPU,
      but keeping the two in step keeps the node usable by the typical pod;
    * ``w_type x pressure x gpu_milli``: using a type that type-restricted
      pods need costs in proportion to how oversubscribed it is by them.
    """
    cost = model.frag(type_name, *after) - model.frag(type_name, *before)
    free_after = after[0]
    if w_balance and free_after:
        gap = sum(free_after) / (len(free_after) * MILLI) - after[1] / max(1, cpu_capacity)
        cost += w_balance * abs(gap) * MILLI
    if w_type and pressure:
        cost += w_type * pressure * gpu_milli
    return cost


def type_pressure(
    demands: Iterable[tuple[tuple[str, ...], float]], capacity: Mapping[str, float]
) -> dict[str, float]:
    """Per type: GPU demand of type-restricted work (split evenly over its allowed
    types) divided by the type's capacity. ``demands`` are (allowed types, GPUs)."""
    need = {t: 0.0 for t in capacity}
    for types, gpus in demands:
        allowed = [t for t in types if t in capacity]
        for t in allowed:
            need[t] += gpus / len(allowed)
    return {t: need[t] / capacity[t] if capacity[t] else 0.0 for t in capacity}


# ---------------------------------------------------------------------------
# The core's interface (plain Node / GpuType / ReplicaPlacement)
# ---------------------------------------------------------------------------


def _device_free_milli(node: Node) -> list[int]:
    out = []
    for d in node.devices:
        if d.external or d.whole_used or d.mig_layout:
            out.append(0)
        else:
            out.append(max(0, round((1.0 - d.share_used) * MILLI)))
    return out


def _mix_tasks(mix: WorkloadMix) -> list[IntTask]:
    tasks = []
    for e in mix.entries:
        if e.gpus > 0:
            num, milli = e.gpus, MILLI
        elif e.gpu_share > 0:
            num, milli = 1, min(MILLI, max(1, round(e.gpu_share * MILLI)))
        else:
            num, milli = 0, 0
        tasks.append(
            IntTask(
                cpu=round(e.cpu * MILLI),
                mem=round(e.memory_gb * MILLI),
                num=num,
                milli=milli,
                types=frozenset(e.gpu_types) if e.gpu_types else None,
                weight=e.weight,
                min_gpu_memory_gb=e.min_gpu_memory_gb,
            )
        )
    return tasks


_models: dict[int, tuple[WorkloadMix, dict[tuple[str, float, bool], FragModel]]] = {}


def _model_for(mix: WorkloadMix, gpu_type: GpuType) -> FragModel:
    """One compiled model per (mix object, GPU type): min memory and shareability
    depend on the type, so they are folded into ``type_ok`` at compile time."""
    slot = _models.get(id(mix))
    if slot is None or slot[0] is not mix:
        if len(_models) > 64:
            _models.clear()
        slot = (mix, {})
        _models[id(mix)] = slot
    key = (gpu_type.name, gpu_type.memory_gb, gpu_type.shareable)
    model = slot[1].get(key)
    if model is None:

        def ok(t: IntTask, name: str, _gt: GpuType = gpu_type) -> bool:
            if t.types is not None and name not in t.types:
                return False
            if t.milli < MILLI and not _gt.shareable:
                return False
            return t.min_gpu_memory_gb <= _gt.memory_gb + 1e-9

        model = FragModel(_mix_tasks(mix), ok)
        slot[1][key] = model
    return model


def _model_input(node: Node, free: list[int]) -> tuple[tuple[int, ...], int, int]:
    """The FGD model's input (its own memo key, not a node signature): the free
    milli-GPU of each card, sorted, and free CPU and memory, from the aspects
    :func:`fragmentation_delta` declares."""
    return (
        tuple(sorted(free, reverse=True)),
        round(node.cpu_free * MILLI),
        round(node.memory_free_gb * MILLI),
    )


def node_fragmentation(node: Node, gpu_type: GpuType | None, mix: WorkloadMix) -> float:
    """Expected unusable GPU capacity (in cards) on ``node`` for a task drawn from ``mix``."""
    if gpu_type is None or not node.devices or not mix.entries:
        return 0.0
    free, cpu, mem = _model_input(node, _device_free_milli(node))
    return _model_for(mix, gpu_type).frag(gpu_type.name, free, cpu, mem) / MILLI


@reads("gpu_type", "cards", "cpu", "memory")
def fragmentation_delta(
    node: Node, gpu_type: GpuType | None, placement: ReplicaPlacement, mix: WorkloadMix
) -> float:
    """Fragmentation after minus before placing ``placement`` on ``node`` (lower is better),
    in cards, plus the mix's balance and type terms when set (:func:`placement_cost`).

    ``node`` is not changed.
    """
    if gpu_type is None or not node.devices or not mix.entries:
        return 0.0
    model = _model_for(mix, gpu_type)
    free = _device_free_milli(node)
    before = _model_input(node, free)
    after_free = list(free)
    if placement.share > 0 and placement.devices:
        i = placement.devices[0]
        after_free[i] = max(0, after_free[i] - round(placement.share * MILLI))
    else:
        for i in placement.devices:
            after_free[i] = 0
        for dev, _idx, _profile in placement.mig:
            after_free[dev] = 0
    after = (
        tuple(sorted(after_free, reverse=True)),
        round((node.cpu_free - placement.cpu) * MILLI),
        round((node.memory_free_gb - placement.memory_gb) * MILLI),
    )
    gpu_milli = sum(free) - sum(after_free)
    pressure = dict(mix.type_pressure).get(gpu_type.name, 0.0) if mix.w_type else 0.0
    cost = placement_cost(
        model, gpu_type.name, before, after, round(node.cpu * MILLI), gpu_milli,
        w_balance=mix.w_balance, w_type=mix.w_type, pressure=pressure,
    )
    return cost / MILLI



def with_gpuq_terms(
    mix: WorkloadMix,
    capacity_cards: Mapping[str, float],
    *,
    w_balance: float = 0.1,
    w_type: float = 1.0,
) -> WorkloadMix:
    """``mix`` with gpuq's balance and type terms switched on (the tuned defaults).

    The type pressure comes from the mix itself: the cards wanted by entries
    restricted to some types (weight x cards, split over their types) over
    each type's card count (``capacity_cards``). For the live core: build the
    mix from the queue (``mix_from_jobs``), then pass it through this.
    """
    demands = [
        (e.gpu_types, e.weight * (e.gpus if e.gpus > 0 else e.gpu_share))
        for e in mix.entries
        if e.gpu_types and (e.gpus > 0 or e.gpu_share > 0)
    ]
    pressure = type_pressure(demands, capacity_cards)
    return WorkloadMix(
        entries=mix.entries,
        type_pressure=tuple(sorted(pressure.items())),
        w_balance=w_balance,
        w_type=w_type,
    )

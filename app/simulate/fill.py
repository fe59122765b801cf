"""The FGD paper's "fill" protocol on an Alibaba openb trace.

Protocol (traces README; Weng et al., ATC'23): GPU nodes only; pods sorted
by name, shuffled with the seed, timestamps ignored; copies drawn uniformly
with replacement are appended until the requested GPU reaches ``inflate``
(1.3) x capacity; pods never leave; a pod that does not fit is dropped (no
retry, no preemption). After each pod: arrived % = requested GPU-milli so
far (dropped pods included) / capacity, allocation % = allocated GPU-milli
/ capacity. The result is the allocation % when arrived % first reaches
each whole percent, and 100 - allocation % at arrived 100 %.

Policies (by name, :data:`FILL_POLICIES`):

* ``random``: a uniformly random node that fits, a random card that fits
  (the paper's Random).
* ``bestfit``: the paper simulator's BestFit score: minimise
  0.5 (free CPU - request) / 128 CPU + 0.5 (free GPU-milli - request) / 8000,
  quantised to the integer 0..100 node score of the Kubernetes framework,
  ties broken at random (the framework's ``selectHost``); a shared pod
  takes the fullest card that still fits.
* ``fgd``: our re-implementation of FGD (integer sigmoid score of the
  fragmentation decrease, random ties, card chosen by the same measure,
  memory ignored) so gpuq is compared with FGD in the same harness too.
* ``gpuq``: the live core itself: ``app.scheduling.placement.place_job``
  (every score term the dispatcher uses, ``scheduler:`` weights as in a
  live config) on a persistent ClusterState, the expected mix being the
  trace's pod shapes (:class:`CorePolicy`).

The node state is kept in the trace's integer units; nodes with the same
state (type, sorted free milli per card, free CPU, free memory) form one
group, so a policy scores each distinct state once per pod.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.scheduling.fragmentation import FragModel, IntTask
from app.simulate.alibaba import TraceNode, TracePod

MILLI = 1000
MAX_SPEC_CPU = 128_000  # the paper simulator's normalisers
MAX_SPEC_GPU = 8_000

Sig = tuple[str, tuple[int, ...], int, int]  # (model, free per card high->low, cpu, mem)


@dataclass(slots=True)
class FillPod:
    name: str
    cpu: int
    mem: int
    num: int
    milli: int
    spec: frozenset[str] | None

    @property
    def total(self) -> int:
        return self.num * self.milli

    @classmethod
    def of(cls, p: TracePod, name: str | None = None) -> FillPod:
        return cls(
            name or p.name,
            p.cpu_milli,
            p.memory_mib,
            p.num_gpu,
            p.gpu_milli,
            frozenset(p.gpu_spec) if p.gpu_spec else None,
        )


class FillCluster:
    """Free capacity per node plus the nodes grouped by identical state."""

    def __init__(self, nodes: list[TraceNode]) -> None:
        self.names = [n.name for n in nodes]
        self.models = [n.model for n in nodes]
        self.cpu = [n.cpu_milli for n in nodes]  # free CPU (milli)
        self.mem = [n.memory_mib for n in nodes]  # free memory (MiB)
        self.cpu_cap = list(self.cpu)
        self.free = [[MILLI] * n.gpus for n in nodes]
        self.capacity_milli = sum(n.gpus for n in nodes) * MILLI
        self.allocated_milli = 0
        self.groups: dict[Sig, list[int]] = {}
        self.sig: list[Sig] = []
        for i in range(len(nodes)):
            s = self._make_sig(i)
            self.sig.append(s)
            self.groups.setdefault(s, []).append(i)

    def _make_sig(self, i: int) -> Sig:
        return (self.models[i], tuple(sorted(self.free[i], reverse=True)), self.cpu[i], self.mem[i])

    def feasible(self, pod: FillPod) -> list[tuple[Sig, list[int]]]:
        out = []
        num, milli, cpu, mem, spec = pod.num, pod.milli, pod.cpu, pod.mem, pod.spec
        for s, idx in self.groups.items():
            model, free, c, m = s
            if c < cpu or m < mem:
                continue
            if num:
                if num > len(free) or free[num - 1] < milli:
                    continue
                if spec is not None and model not in spec:
                    continue
            out.append((s, idx))
        return out

    def place(self, i: int, gpus: list[int], pod: FillPod) -> None:
        old = self.sig[i]
        grp = self.groups[old]
        grp.remove(i)
        if not grp:
            del self.groups[old]
        self.cpu[i] -= pod.cpu
        self.mem[i] -= pod.mem
        for g in gpus:
            if self.free[i][g] < pod.milli:
                raise AssertionError(f"over-allocation on {self.names[i]} gpu {g}")
            self.free[i][g] -= pod.milli
        if self.cpu[i] < 0 or self.mem[i] < 0:
            raise AssertionError(f"over-allocation of CPU/memory on {self.names[i]}")
        self.allocated_milli += pod.total
        new = self._make_sig(i)
        self.sig[i] = new
        grp = self.groups.setdefault(new, [])
        grp.append(i)
        if len(grp) > 1 and grp[-2] > i:
            grp.sort()


# --------------------------------------------------------------------------- policies

Choice = tuple[int, list[int]] | None


def _whole_gpus(free: list[int], num: int) -> list[int]:
    """The lowest-index fully free cards (the paper simulator's exclusive choice)."""
    out = [g for g, x in enumerate(free) if x == MILLI][:num]
    return out


def _after_free(free: tuple[int, ...], take: int, num: int, milli: int) -> tuple[int, ...]:
    """Sorted free list after taking ``num`` cards of value ``take`` by ``milli`` each."""
    lst = list(free)
    for _ in range(num):
        lst[lst.index(take)] -= milli
    lst.sort(reverse=True)
    return tuple(lst)


class RandomPolicy:
    name = "random"

    def __init__(self, rng: random.Random, **_: Any) -> None:
        self.rng = rng

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        nodes = [i for _, idx in cl.feasible(pod) for i in idx]
        if not nodes:
            return None
        i = self.rng.choice(nodes)
        if pod.num == 0:
            return i, []
        if pod.milli < MILLI:
            fits = [g for g, x in enumerate(cl.free[i]) if x >= pod.milli]
            return i, [self.rng.choice(fits)]
        return i, _whole_gpus(cl.free[i], pod.num)


class BestFitPolicy:
    name = "bestfit"

    def __init__(self, rng: random.Random, **_: Any) -> None:
        self.rng = rng

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        best = -1
        tied: list[int] = []
        req = pod.total
        for (_model, free, cpu, _mem), idx in cl.feasible(pod):
            raw = 0.5 * (cpu - pod.cpu) / MAX_SPEC_CPU + 0.5 * (sum(free) - req) / MAX_SPEC_GPU
            score = int((1.0 - raw) * 100)
            if score > best:
                best, tied = score, list(idx)
            elif score == best:
                tied.extend(idx)
        if not tied:
            return None
        i = self.rng.choice(tied)
        if pod.num == 0:
            return i, []
        if pod.milli < MILLI:
            fits = [(x, g) for g, x in enumerate(cl.free[i]) if x >= pod.milli]
            return i, [min(fits)[1]]
        return i, _whole_gpus(cl.free[i], pod.num)


def _sigmoid_score(decrease: float) -> int:
    return int(100.0 / (1.0 + math.exp(-decrease / 1000.0)))


class FgdPolicy:
    """FGD as published: integer score, random ties, memory not considered."""

    name = "fgd"

    def __init__(self, rng: random.Random, model: FragModel, **_: Any) -> None:
        self.rng = rng
        self.model = model

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        best = -1
        tied: list[tuple[int, int]] = []  # (node, card value taken)
        frag = self.model.frag
        for (model, free, cpu, mem), idx in cl.feasible(pod):
            before = frag(model, free, cpu, mem)
            if pod.num == 0:
                after = frag(model, free, cpu - pod.cpu, mem - pod.mem)
                score, take = _sigmoid_score(before - after), 0
            elif pod.milli < MILLI:
                score, take = -1, 0
                for v in sorted(set(free), reverse=True):  # paper: first card in index order
                    if v < pod.milli:
                        continue
                    after_free = _after_free(free, v, 1, pod.milli)
                    after = frag(model, after_free, cpu - pod.cpu, mem - pod.mem)
                    s = _sigmoid_score(before - after)
                    if s > score:
                        score, take = s, v
            else:
                after = frag(
                    model, _after_free(free, MILLI, pod.num, MILLI), cpu - pod.cpu, mem - pod.mem
                )
                score, take = _sigmoid_score(before - after), MILLI
            if score > best:
                best, tied = score, [(i, take) for i in idx]
            elif score == best:
                tied.extend((i, take) for i in idx)
        if not tied:
            return None
        i, take = self.rng.choice(tied)
        return i, _cards(cl.free[i], pod, take)


def _cards(free: list[int], pod: FillPod, take: int) -> list[int]:
    if pod.num == 0:
        return []
    if pod.milli < MILLI:
        return [free.index(take)]
    return _whole_gpus(free, pod.num)


FILL_POLICIES = ("random", "bestfit", "fgd", "gpuq")


# --------------------------------------------------------------------------- the protocol


def workload_model(pods: list[TracePod], *, use_memory: bool) -> FragModel:
    """The mix: every pod shape of the (un-inflated) trace, weighted by its count
    (FGD's "typical pods" with every shape kept)."""
    counts: dict[tuple, int] = {}
    for p in pods:
        key = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec)
        counts[key] = counts.get(key, 0) + 1
    tasks = [
        IntTask(cpu, mem, num, milli, frozenset(spec) if spec else None, float(w))
        for (cpu, mem, num, milli, spec), w in counts.items()
    ]
    return FragModel(tasks, use_memory=use_memory)


def make_policy(
    name: str,
    rng: random.Random,
    pods: list[TracePod],
    nodes: list[TraceNode],
    scheduler: Mapping[str, Any] | None = None,
) -> RandomPolicy | BestFitPolicy | FgdPolicy | CorePolicy:
    if name == "random":
        return RandomPolicy(rng)
    if name == "bestfit":
        return BestFitPolicy(rng)
    if name == "fgd":
        return FgdPolicy(rng, workload_model(pods, use_memory=False))
    if name == "gpuq":
        return CorePolicy(nodes, pods, scheduler)
    raise ValueError(f"unknown fill policy {name!r}; known: {', '.join(FILL_POLICIES)}")


def fill_sequence(pods: list[TracePod], capacity_milli: int, seed: int, inflate: float):
    """Pods by name, shuffled with the seed, then random copies up to ``inflate`` x capacity."""
    rng = random.Random(seed)
    base = sorted(pods, key=lambda p: p.name)
    order = [FillPod.of(p) for p in base]
    rng.shuffle(order)
    requested = sum(p.total for p in order)
    target = inflate * capacity_milli
    if base and any(p.total_gpu_milli > 0 for p in base):
        k = 0
        while requested < target:
            src = base[rng.randrange(len(base))]
            k += 1
            order.append(FillPod.of(src, f"{src.name}-copy{k}"))
            requested += src.total_gpu_milli
    return order


@dataclass(slots=True)
class FillRun:
    seed: int
    policy: str
    total_gpus: int
    pods: int = 0
    dropped: int = 0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (arrived %, allocation %)
    placements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unallocated_pct_at_100(self) -> float | None:
        for a, alloc in self.curve:
            if a == 100:
                return round(100.0 - alloc, 4)
        return None


def run_fill(
    nodes: list[TraceNode],
    pods: list[TracePod],
    *,
    policy: str,
    seed: int,
    inflate: float = 1.3,
    scheduler: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FillRun:
    """One seed of the fill protocol; deterministic for (inputs, policy, seed)."""
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    cl = FillCluster(gpu_nodes)
    run = FillRun(seed=seed, policy=policy, total_gpus=cl.capacity_milli // MILLI)
    if cl.capacity_milli == 0:
        return run
    seq = fill_sequence(pods, cl.capacity_milli, seed, inflate)
    pol = make_policy(policy, random.Random(seed + 1_000_003), pods, gpu_nodes, scheduler)
    replay_sequence(cl, seq, pol, run, progress)
    return run


def replay_sequence(
    cl: FillCluster,
    seq: list[FillPod],
    pol: Any,
    run: FillRun,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Offer the pods in order; record placements, drops and the curve into ``run``."""
    arrived = 0
    next_pct = 1
    cap = cl.capacity_milli
    for n, pod in enumerate(seq):
        arrived += pod.total
        choice = pol.choose(pod, cl)
        if choice is None:
            run.dropped += 1
        else:
            i, gpus = choice
            cl.place(i, gpus, pod)
            run.placements.append(
                {"pod": pod.name, "node": cl.names[i], "gpus": gpus, "gpu_milli": pod.milli}
            )
        while next_pct * cap <= arrived * 100:
            run.curve.append((next_pct, round(100.0 * cl.allocated_milli / cap, 4)))
            next_pct += 1
        if progress is not None and n % 256 == 0:
            progress(n, len(seq))
    run.pods += len(seq)


def check_placements(
    nodes: list[TraceNode], pods: list[TracePod], placements: list[dict[str, Any]]
) -> list[str]:
    """Re-check a result independently: no card, CPU or memory over-allocated, types allowed.

    Copies are recognised by their ``-copyN`` suffix. Returns the problems found.
    """
    by_name = {p.name: p for p in pods}
    node_by = {n.name: n for n in nodes}
    gpu_used: dict[tuple[str, int], int] = {}
    cpu_used: dict[str, int] = {}
    mem_used: dict[str, int] = {}
    problems: list[str] = []
    seen: set[str] = set()
    for pl in placements:
        name = pl["pod"]
        if name in seen:
            problems.append(f"pod {name} placed twice")
        seen.add(name)
        base = name.rsplit("-copy", 1)[0] if "-copy" in name else name
        pod = by_name.get(base)
        node = node_by.get(pl["node"])
        if pod is None or node is None:
            problems.append(f"unknown pod or node in {pl}")
            continue
        if pod.gpu_spec and pod.num_gpu and node.model not in pod.gpu_spec:
            problems.append(f"{name}: model {node.model} not in {pod.gpu_spec}")
        if len(pl["gpus"]) != pod.num_gpu or len(set(pl["gpus"])) != len(pl["gpus"]):
            problems.append(f"{name}: gpus {pl['gpus']} do not match num_gpu {pod.num_gpu}")
        if pl["gpu_milli"] != pod.gpu_milli:
            problems.append(f"{name}: gpu_milli {pl['gpu_milli']} != {pod.gpu_milli}")
        for g in pl["gpus"]:
            if not 0 <= g < node.gpus:
                problems.append(f"{name}: gpu {g} out of range on {node.name}")
            key = (node.name, g)
            gpu_used[key] = gpu_used.get(key, 0) + pod.gpu_milli
            if gpu_used[key] > MILLI:
                problems.append(f"{node.name} gpu {g} over-allocated ({gpu_used[key]})")
        cpu_used[node.name] = cpu_used.get(node.name, 0) + pod.cpu_milli
        mem_used[node.name] = mem_used.get(node.name, 0) + pod.memory_mib
        if cpu_used[node.name] > node.cpu_milli:
            problems.append(f"{node.name} CPU over-allocated")
        if mem_used[node.name] > node.memory_mib:
            problems.append(f"{node.name} memory over-allocated")
    return problems


def parse_seeds(text: str | None, default: int) -> list[int]:
    """``42..51`` (inclusive), ``1,2,3`` or a single number."""
    if not text:
        return [default]
    text = text.strip()
    if ".." in text:
        lo, hi = (int(x) for x in text.split("..", 1))
        if hi < lo or hi - lo > 1000:
            raise ValueError(f"bad seed range {text!r}")
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",") if x.strip()]


def summarize(runs: list[FillRun]) -> dict[str, Any]:
    """The API.md fill result: medians over seeds of the curve and of the 100 % figure."""
    if not runs:
        raise ValueError("no runs")
    by_pct: dict[int, list[float]] = {}
    for r in runs:
        for a, alloc in r.curve:
            by_pct.setdefault(a, []).append(alloc)
    curve = [
        {"arrived_pct": a, "allocation_pct": round(statistics.median(v), 4)}
        for a, v in sorted(by_pct.items())
        if len(v) == len(runs)
    ]
    at100 = [r.unallocated_pct_at_100 for r in runs]
    return {
        "protocol": "fill",
        "policy": runs[0].policy,
        "total_gpus": runs[0].total_gpus,
        "seeds": [r.seed for r in runs],
        "unallocated_pct_at_100": (
            round(statistics.median(at100), 4) if all(x is not None for x in at100) else None
        ),
        "curve": curve,
        "per_seed": [
            {
                "seed": r.seed,
                "unallocated_pct_at_100": r.unallocated_pct_at_100,
                "pods": r.pods,
                "dropped": r.dropped,
                "placements": r.placements,
            }
            for r in runs
        ],
    }


# --------------------------------------------------------------------------- the live core


class CorePolicy:
    """The live core's ``place_job`` on a persistent ClusterState (the dispatcher's code path).

    Pods become JobRequests (gpu_milli -> gpu_share, gpu_spec -> gpu_types),
    nodes core Nodes of the default GPU types; the context's workload mix is
    the trace's pod shapes weighted by count (what the live core derives
    from its pending queue), passed through ``with_gpuq_terms`` with the
    config's ``w_balance``/``w_type_pressure`` as ``PlacementContext.from_snapshot``
    does; every score weight comes from ``scheduler:`` as in a live config.
    """

    name = "gpuq"

    def __init__(
        self,
        nodes: list[TraceNode],
        pods: list[TracePod],
        scheduler: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        from app.scheduling.context import PlacementContext
        from app.scheduling.fragmentation import MixEntry, WorkloadMix, with_gpuq_terms
        from app.scheduling.model import Device, GpuType, Node, SchedulerConfig
        from app.scheduling.state import ClusterState
        from app.simulate.alibaba import GPU_MODELS, MIB_TO_GB

        self._mib = MIB_TO_GB
        self.types = {
            m.type_name: GpuType(m.type_name, m.memory_gb, m.weight, shareable=True)
            for m in GPU_MODELS.values()
        }
        self.type_of = {code: m.type_name for code, m in GPU_MODELS.items()}
        core_nodes = [
            Node(
                name=n.name,
                gpu_type=self.type_of[n.model],
                devices=[Device(index=g) for g in range(n.gpus)],
                cpu=n.cpu_milli / MILLI,
                memory_gb=n.memory_mib * MIB_TO_GB,
            )
            for n in nodes
        ]
        self.state = ClusterState(core_nodes, self.types)
        counts: dict[tuple, int] = {}
        for p in pods:
            key = (p.num_gpu, p.gpu_milli, p.cpu_milli, p.memory_mib, p.gpu_spec)
            counts[key] = counts.get(key, 0) + 1
        config = SchedulerConfig.from_mapping(scheduler)
        entries = tuple(
            MixEntry(
                gpus=num if milli >= MILLI else 0,
                gpu_share=milli / MILLI if 0 < milli < MILLI else 0.0,
                cpu=cpu / MILLI,
                memory_gb=mem * MIB_TO_GB,
                gpu_types=tuple(self.type_of[s] for s in spec if s in self.type_of),
                weight=float(w),
            )
            for (num, milli, cpu, mem, spec), w in counts.items()
        )
        cards: dict[str, float] = {}
        for n in core_nodes:
            cards[n.gpu_type or ""] = cards.get(n.gpu_type or "", 0.0) + len(n.devices)
        mix = with_gpuq_terms(
            WorkloadMix(entries), cards, w_balance=config.w_balance, w_type=config.w_type_pressure
        )
        self.ctx = PlacementContext(gpu_types=self.types, config=config, mix=mix)
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self._n = 0

    def job_of(self, pod: FillPod) -> Any:
        """The pod as the JobRequest the dispatcher would hand the core."""
        from app.scheduling.model import JobRequest

        self._n += 1
        share = pod.num == 1 and pod.milli < MILLI
        return JobRequest(
            id=f"{pod.name}",
            name=pod.name,
            team="openb",
            pool="default",
            priority="P1",
            priority_value=500,
            preemptible=True,
            submitted_at=float(self._n),
            gpus=None if share else pod.num,
            gpu_share=pod.milli / MILLI if share else None,
            gpu_types=tuple(self.type_of[s] for s in pod.spec) if pod.spec else (),
            cpu=pod.cpu / MILLI,
            memory_gb=pod.mem * self._mib,
        )

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        from app.scheduling.placement import place_job

        placed = place_job(self.job_of(pod), self.state, self.ctx)
        if not placed:
            return None
        (p,) = placed
        self.state.reserve(p)
        return self.node_index[p.node], list(p.devices)

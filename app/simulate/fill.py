"""The FGD paper's "fill" protocol on an Alibaba openb trace.

Protocol (traces README; Weng et al., ATC'23): GPU nodes only; pods sorted
by name, shuffled with the seed, timestamps ignored; copies drawn uniformly
with replacement are appended until the requested GPU reaches ``inflate``
(1.3) x capacity; pods never leave; a pod that does not fit is dropped (no
retry, no preemption). After each pod: arrived % = requested GPU-milli so
far (dropped pods included) / capacity, allocation % = allocated GPU-milli
/ capacity. The result is the allocation % when arrived % first reaches
each whole percent, and 100 - allocation % at arrived 100 %.

This module is the protocol only: the sequence of offers, the curve, the
re-check and the summary. The policies are the simulator's, by name
(:data:`FILL_POLICIES`), one module each: ``random``
(:mod:`app.simulate.baselines.random_fit`), ``bestfit``
(:mod:`app.simulate.baselines.bestfit`), ``fgd``
(:mod:`app.simulate.baselines.fgd`) and ``gpuq``, the live core's
``place_job`` (:mod:`app.simulate.fill_core`); each chooses on the
protocol's integer-unit cluster (:mod:`app.simulate.fill_state`).

Why the offers are a plain loop and not events of the replay engine
(:mod:`app.simulate.replay`, the one event loop that the replay, the
what-if and the estimated starts share): the protocol has no clock and
nothing ever leaves, so its only "event" is the next offer, in a fixed
order; a heap would hand back that same order. The replay engine's jobs
carry run times, finishes, preemptions and queues that the protocol
forbids (a pod that does not fit is dropped, never retried).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.simulate.alibaba import TraceNode, TracePod
from app.simulate.baselines.bestfit import BestFitPolicy
from app.simulate.baselines.fgd import FgdPolicy, workload_model
from app.simulate.baselines.random_fit import RandomPolicy
from app.simulate.fill_core import CorePolicy
from app.simulate.fill_state import MILLI, FillCluster, FillPod

FillPolicy = RandomPolicy | BestFitPolicy | FgdPolicy | CorePolicy


FILL_POLICIES = ("random", "bestfit", "fgd", "gpuq")


def make_policy(
    name: str,
    rng: random.Random,
    pods: list[TracePod],
    nodes: list[TraceNode],
    scheduler: Mapping[str, Any] | None = None,
) -> FillPolicy:
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
    """The fill result document: medians over seeds of the curve and of the 100 % figure."""
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
    known100 = [x for x in at100 if x is not None]
    return {
        "protocol": "fill",
        "policy": runs[0].policy,
        "total_gpus": runs[0].total_gpus,
        "seeds": [r.seed for r in runs],
        "unallocated_pct_at_100": (
            round(statistics.median(known100), 4) if len(known100) == len(at100) else None
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

"""The live core's fragmentation-aware placement: CPU-only pods pay the fragmentation
they cause, every distinct node state is a candidate, and a cycle's mix carries
gpuq's balance and type-pressure terms."""

from __future__ import annotations

import random

from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.context import PlacementContext
from app.scheduling.demands import Demand
from app.scheduling.fragmentation import MixEntry, WorkloadMix
from app.scheduling.model import ReplicaPlacement, SchedulerConfig
from app.scheduling.node_reads import node_signature as signature
from app.scheduling.placement import place_job
from app.scheduling.scores import score
from app.scheduling.state import ClusterState
from tests.unit.core_fixtures import RTX, TYPES, V100, job, node, snap

# the expected work: one V100 card with 8 CPUs
GPU_MIX = WorkloadMix((MixEntry(gpus=1, gpu_share=0.0, cpu=8.0, memory_gb=16.0),))


def _cpu_only_score(n, cfg: SchedulerConfig) -> float:
    j = job("c", gpus=None, cpu=4.0, memory_gb=4.0)
    ctx = PlacementContext(gpu_types=TYPES, config=cfg, mix=GPU_MIX)
    idx = CapacityIndex(TYPES)
    idx.add(n)
    p = ReplicaPlacement(0, n.name, None, (), cpu=4.0, memory_gb=4.0)
    return score(j, Demand(None, "none"), n, idx.caps[n.name], p, ctx, {}, set())


def test_cpu_only_pod_pays_the_fragmentation_it_causes() -> None:
    # tight leaves 4 CPUs next to a free V100 that needs 8: the card is lost for the mix
    tight = node("tight", "v100-16g", 1, cpu=8, mem=64)
    roomy = node("roomy", "v100-16g", 1, cpu=8, mem=64)
    roomy.cpu = 32.0
    roomy.cpu_used = 12.0  # 20 CPUs free: still 16 after the pod
    only_frag = SchedulerConfig(w_binpack=0, w_headroom=0, w_memory_waste=0,
                                w_type_preference=0)
    assert _cpu_only_score(tight, only_frag) < _cpu_only_score(roomy, only_frag) - 0.5
    no_frag = SchedulerConfig(w_binpack=0, w_headroom=0, w_memory_waste=0, w_type_preference=0,
                              w_fragmentation=0)
    assert _cpu_only_score(tight, no_frag) == _cpu_only_score(roomy, no_frag) == 0.0


def test_cpu_only_pod_goes_where_it_strands_no_card() -> None:
    nodes = [node("tight", "v100-16g", 1, cpu=8, mem=64), node("roomy", "v100-16g", 1, cpu=32,
                                                               mem=64)]
    # GPU nodes take jobs without GPUs only when the config allows it (as openb's replays)
    cfg = SchedulerConfig(w_binpack=0, w_headroom=0, cpu_jobs_on_gpu_nodes=True)
    ctx = PlacementContext(gpu_types=TYPES, config=cfg, mix=GPU_MIX)
    (p,) = place_job(job("c", gpus=None, cpu=4.0, memory_gb=4.0), ClusterState(nodes, TYPES), ctx)
    assert p.node == "roomy"


def test_every_distinct_node_state_is_a_candidate() -> None:
    # 40 one-card V100 nodes, all in the same index bucket, each with a different free CPU;
    # only the last one filed leaves exactly the 8 CPUs the mix's next job needs (no
    # fragment). A walk over the first few nodes of the bucket never sees it.
    nodes = []
    for i in range(40):
        n = node(f"n{i:02d}", "v100-16g", 2, cpu=64, mem=64)
        n.cpu_used = 64 - (10 + i * 0.1) if i < 39 else 64 - 16
        nodes.append(n)
    cfg = SchedulerConfig(w_binpack=0, w_headroom=0, candidates_per_replica=4)
    ctx = PlacementContext(gpu_types=TYPES, config=cfg, mix=GPU_MIX)
    (p,) = place_job(job("g", gpus=1, cpu=8.0, memory_gb=8.0), ClusterState(nodes, TYPES), ctx)
    assert p.node == "n39"
    capped = PlacementContext(gpu_types=TYPES, config=SchedulerConfig(
        w_binpack=0, w_headroom=0, candidate_states=4), mix=GPU_MIX)
    (q,) = place_job(job("g", gpus=1, cpu=8.0, memory_gb=8.0), ClusterState(nodes, TYPES),
                     capped)
    assert q.node != "n39"  # the cap is honoured: only four states were scored


def test_state_groups_follow_reservations() -> None:
    rng = random.Random(3)
    types = {V100.name: V100, RTX.name: RTX}
    nodes = [node(f"n{i}", rng.choice(list(types)), rng.choice([1, 2, 4]), cpu=32, mem=128)
             for i in range(12)] + [node("cpu0", None, 0, cpu=16, mem=64)]
    state = ClusterState(nodes, types)
    ctx = PlacementContext(gpu_types=types, mix=GPU_MIX)
    held = []
    for k in range(60):
        if held and rng.random() < 0.3:
            state.unapply(held.pop(rng.randrange(len(held))))
        else:
            kind = rng.choice(["g", "s", "c"])
            j = (job(f"j{k}", gpus=1, cpu=2.0) if kind == "g" else
                 job(f"j{k}", gpu_share=0.25, gpu_types=("rtx4090-24g",), cpu=1.0)
                 if kind == "s" else job(f"j{k}", gpus=None, cpu=3.0))
            got = place_job(j, state, ctx)
            if got:
                for p in got:
                    state.apply(p)
                held.extend(got)
        idx = state.index
        for t in idx.group_types():
            for sig, names in idx.groups_of(t):
                names = list(names)
                assert names, "empty groups are dropped"
                for name in names:
                    assert signature(state.nodes[name]) == sig


def test_cycle_mix_carries_balance_and_type_pressure() -> None:
    nodes = [node("v", "v100-16g", 4), node("r", "rtx4090-24g", 4)]
    pending = [job("a", gpus=2, gpu_types=("v100-16g",)), job("b", gpus=1)]
    ctx = PlacementContext.from_snapshot(snap(nodes, pending))
    assert ctx.mix.w_balance == SchedulerConfig().w_balance > 0
    assert ctx.mix.w_type == SchedulerConfig().w_type_pressure > 0
    pressure = dict(ctx.mix.type_pressure)
    assert pressure["v100-16g"] == 0.5 and pressure["rtx4090-24g"] == 0.0
    off = PlacementContext.from_snapshot(
        snap(nodes, pending, config=SchedulerConfig(w_balance=0, w_type_pressure=0)))
    assert off.mix.w_balance == 0 and off.mix.w_type == 0


def test_same_state_on_another_type_is_scored_for_its_own_type() -> None:
    # a V100 node and a 4090 node alike in everything but the type; the mix wants 4090
    # cards with 8 CPUs, so a CPU-only pod belongs on the V100 node (nobody in the mix
    # can use its card anyway), whichever node's state is scored first
    nodes = [node("r", "rtx4090-24g", 1, cpu=8, mem=64), node("v", "v100-16g", 1, cpu=8, mem=64)]
    mix = WorkloadMix((MixEntry(gpus=1, gpu_share=0.0, cpu=8.0, memory_gb=16.0,
                                gpu_types=("rtx4090-24g",)),))
    cfg = SchedulerConfig(w_binpack=0, w_headroom=0, cpu_jobs_on_gpu_nodes=True)
    ctx = PlacementContext(gpu_types=TYPES, config=cfg, mix=mix)
    (p,) = place_job(job("c", gpus=None, cpu=4.0, memory_gb=4.0), ClusterState(nodes, TYPES), ctx)
    assert p.node == "v"

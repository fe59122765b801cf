"""Placement rules, including the design's worked cases, one test per rule."""

from __future__ import annotations

from app.scheduling.context import PlacementContext
from app.scheduling.engine import schedule
from app.scheduling.model import PoolInfo, ReplicaPlacement, TeamInfo
from app.scheduling.placement import place_job
from app.scheduling.state import ClusterState
from tests.unit.core_fixtures import TYPES, job, node, running, snap, whole


def placed(res, job_id):
    for a in res.admissions:
        if a.job_id == job_id:
            return a.placements
    return None


# -- memory fit ------------------------------------------------------------------
def test_30gb_job_never_on_v100_even_when_only_v100_is_free() -> None:
    nodes = [node("v", "v100-16g", 8), node("a", "a100-80g", 1)]
    busy = running(job("busy"), whole("a", "a100-80g", (0,)))
    res = schedule(snap(nodes, [job("j", gpus=1, min_gpu_memory_gb=30)], running=[busy]))
    assert placed(res, "j") is None
    assert "a100-80g 0" in res.reasons["j"]  # names what is missing


def test_30gb_job_on_v100_only_cluster_is_unschedulable() -> None:
    res = schedule(snap([node("v", "v100-16g", 8)], [job("j", gpus=1, min_gpu_memory_gb=30)]))
    assert "j" in res.unschedulable
    assert "30 GB" in res.unschedulable["j"]


def test_20gb_job_takes_free_4090_before_a100() -> None:
    nodes = [node("a", "a100-80g", 8), node("r", "rtx4090-24g", 8), node("v", "v100-16g", 8)]
    res = schedule(snap(nodes, [job("j", gpus=1, min_gpu_memory_gb=20)]))
    (p,) = placed(res, "j")
    assert p.gpu_type == "rtx4090-24g" and p.node == "r"


def test_20gb_job_takes_a100_when_no_4090_is_free() -> None:
    nodes = [node("a", "a100-80g", 8), node("r", "rtx4090-24g", 1)]
    busy = running(job("busy"), whole("r", "rtx4090-24g", (0,)))
    res = schedule(snap(nodes, [job("j", gpus=1, min_gpu_memory_gb=20)], running=[busy]))
    (p,) = placed(res, "j")
    assert p.gpu_type == "a100-80g"


# -- gpu_units ---------------------------------------------------------------------
def test_gpu_units_20_least_overshoot_and_enough() -> None:
    nodes = [node("a", "a100-80g", 8), node("r", "rtx4090-24g", 8), node("v", "v100-16g", 8)]
    res = schedule(snap(nodes, [job("u", gpu_units=20)]))
    ps = placed(res, "u")
    total = sum(p.units for p in ps)
    assert total >= 20 and total - 20 < 1e-6
    assert len({p.gpu_type for p in ps}) == 1
    assert len({p.node for p in ps}) == len(ps)  # one replica per node used


def test_gpu_units_picks_type_with_least_overshoot() -> None:
    # 12 CU: A100 needs 2 cards (20 CU, +8), V100 3 cards (12 CU, +0)
    nodes = [node("a", "a100-80g", 8), node("v", "v100-16g", 8)]
    ps = placed(schedule(snap(nodes, [job("u", gpu_units=12)])), "u")
    assert [p.gpu_type for p in ps] == ["v100-16g"] and sum(p.units for p in ps) == 12


def test_gpu_units_multi_node_one_replica_per_node() -> None:
    nodes = [node(f"r{i}", "rtx4090-24g", 4) for i in range(3)]
    ps = placed(schedule(snap(nodes, [job("u", gpu_units=20, cpu=10, memory_gb=10)])), "u")
    assert sum(len(p.devices) for p in ps) == 10
    assert len({p.node for p in ps}) == len(ps) == 3
    assert abs(sum(p.cpu for p in ps) - 10) < 1e-9


def test_gpu_units_mixed_types_only_when_allowed() -> None:
    # 14 CU from 1 A100 (10) + 1 V100 (4) exactly; one type alone overshoots
    nodes = [node("a", "a100-80g", 1), node("v", "v100-16g", 1)]
    res = schedule(snap(nodes, [job("u", gpu_units=14)]))
    assert placed(res, "u") is None
    res = schedule(snap(nodes, [job("u", gpu_units=14, allow_mixed_types=True)]))
    ps = placed(res, "u")
    assert {p.gpu_type for p in ps} == {"a100-80g", "v100-16g"}
    assert sum(p.units for p in ps) == 14


# -- MIG -----------------------------------------------------------------------------
def test_mig_auto_18gb_takes_2g20gb_slice() -> None:
    layout = {0: ("3g.40gb", "2g.20gb", "1g.10gb")}
    nodes = [node("a", "a100-80g", 4, mig=layout), node("v", "v100-16g", 8)]
    (p,) = placed(schedule(snap(nodes, [job("m", mig="auto", min_gpu_memory_gb=18)])), "m")
    assert p.mig == ((0, 1, "2g.20gb"),)
    assert abs(p.units - 10 * 0.2857) < 1e-9


def test_mig_auto_falls_back_to_cheapest_whole_card() -> None:
    layout = {0: ("2g.20gb",)}
    nodes = [node("a", "a100-80g", 2, mig=layout), node("v", "v100-16g", 2)]
    busy = running(job("b"), ReplicaPlacement(0, "a", "a100-80g", (), mig=((0, 0, "2g.20gb"),),
                                              units=2.857))
    res = schedule(snap(nodes, [job("m", mig="auto", min_gpu_memory_gb=12)], running=[busy]))
    (p,) = placed(res, "m")
    assert p.gpu_type == "v100-16g"  # 4 CU whole V100 beats a 10 CU A100


def test_named_mig_profile_unknown_is_unschedulable() -> None:
    res = schedule(snap([node("a", "a100-80g", 1)], [job("m", mig="7g.80gb")]))
    assert "7g.80gb" in res.unschedulable["m"]


# -- vGPU shares -----------------------------------------------------------------
def test_shares_never_exceed_one_card() -> None:
    nodes = [node("r", "rtx4090-24g", 1)]
    jobs = [job(f"s{i}", gpu_share=0.4, submitted_at=i) for i in range(3)]
    res = schedule(snap(nodes, jobs))
    got = [a.job_id for a in res.admissions]
    assert got == ["s0", "s1"]
    assert "share" in res.reasons["s2"]


def test_share_memory_never_exceeds_card() -> None:
    nodes = [node("r", "rtx4090-24g", 1)]
    jobs = [job("s0", gpu_share=0.3, min_gpu_memory_gb=14),
            job("s1", gpu_share=0.3, min_gpu_memory_gb=14, submitted_at=1)]
    res = schedule(snap(nodes, jobs))
    assert [a.job_id for a in res.admissions] == ["s0"]


def test_share_needs_shareable_type() -> None:
    res = schedule(snap([node("a", "a100-80g", 1)], [job("s", gpu_share=0.5)]))
    assert "shareable" in res.unschedulable["s"]


# -- binpack / spread / topology --------------------------------------------------
def test_binpack_prefers_most_allocated_node() -> None:
    nodes = [node("n0", "a100-80g", 8), node("n1", "a100-80g", 8)]
    busy = running(job("b"), whole("n1", "a100-80g", (0, 1, 2)))
    (p,) = placed(schedule(snap(nodes, [job("j", gpus=2)], running=[busy])), "j")
    assert p.node == "n1"


def test_binpack_gang_uses_fewest_nodes() -> None:
    nodes = [node(f"n{i}", "a100-80g", 8) for i in range(4)]
    ps = placed(schedule(snap(nodes, [job("g", gpus=2, replicas=4, min_available=4)])), "g")
    assert len({p.node for p in ps}) == 1


def test_spread_puts_replicas_on_distinct_nodes() -> None:
    nodes = [node(f"n{i}", "a100-80g", 8) for i in range(4)]
    ps = placed(schedule(snap(nodes, [job("s", gpus=1, replicas=3, min_available=3,
                                              placement="spread")])), "s")
    assert len({p.node for p in ps}) == 3


def test_spread_gang_waits_when_too_few_nodes() -> None:
    nodes = [node(f"n{i}", "a100-80g", 8) for i in range(2)]
    res = schedule(snap(nodes, [job("s", gpus=1, replicas=3, min_available=3,
                                    placement="spread")]))
    assert placed(res, "s") is None


def test_fast_network_gang_never_on_1gbe_nodes() -> None:
    nodes = [node(f"r{i}", "rtx4090-24g", 8, network="eth") for i in range(4)]
    g = job("g", gpus=8, replicas=2, min_available=2, topology="fast_network")
    res = schedule(snap(nodes, [g]))
    assert placed(res, "g") is None
    nodes += [node(f"a{i}", "a100-80g", 8, network="ib") for i in range(2)]
    ps = placed(schedule(snap(nodes, [g])), "g")
    assert {p.node for p in ps} == {"a0", "a1"}


def test_fast_network_gang_may_share_one_eth_node() -> None:
    nodes = [node("r0", "rtx4090-24g", 8, network="eth")]
    g = job("g", gpus=4, replicas=2, min_available=2, topology="fast_network")
    ps = placed(schedule(snap(nodes, [g])), "g")
    assert {p.node for p in ps} == {"r0"}


def test_gang_never_mixes_types_unless_allowed() -> None:
    nodes = [node("a", "a100-80g", 1), node("v", "v100-16g", 1)]
    g = job("g", gpus=1, replicas=2, min_available=2)
    assert placed(schedule(snap(nodes, [g])), "g") is None
    g2 = job("g", gpus=1, replicas=2, min_available=2, allow_mixed_types=True)
    ps = placed(schedule(snap(nodes, [g2])), "g")
    assert {p.gpu_type for p in ps} == {"a100-80g", "v100-16g"}


def test_same_rack_gang_stays_in_one_rack() -> None:
    nodes = [node("x0", "a100-80g", 4, rack="r1"), node("y0", "a100-80g", 8, rack="r2"),
             node("y1", "a100-80g", 8, rack="r2")]
    g = job("g", gpus=4, replicas=3, min_available=3, topology="same_rack")
    ps = placed(schedule(snap(nodes, [g])), "g")
    assert {p.node for p in ps} <= {"y0", "y1"}


def test_same_node_gang_needs_one_node() -> None:
    nodes = [node("n0", "a100-80g", 4), node("n1", "a100-80g", 4)]
    res = schedule(snap(nodes, [job("g", gpus=4, replicas=2, min_available=2,
                                    topology="same_node")]))
    assert "g" in res.unschedulable


def test_gang_min_available_partial() -> None:
    nodes = [node("n0", "a100-80g", 2)]
    ps = placed(schedule(snap(nodes, [job("g", gpus=1, replicas=4, min_available=2)])), "g")
    assert len(ps) == 2 and sorted(p.replica for p in ps) == [0, 1]


# -- headroom ---------------------------------------------------------------------
def test_node_not_left_with_free_gpus_and_no_cpu() -> None:
    nodes = [node("a", "a100-80g", 8, cpu=64), node("b", "a100-80g", 8, cpu=64)]
    run = [
        running(job("ra"), whole("a", "a100-80g", (0, 1, 2, 3), cpu=40)),
        running(job("rb"), whole("b", "a100-80g", (0, 1, 2, 3), cpu=8)),
    ]
    hungry = job("h", gpus=1, cpu=24)
    typical = job("typ", gpus=1, cpu=4, submitted_at=5)
    res = schedule(snap(nodes, [hungry, typical], running=run))
    (p,) = placed(res, "h")
    assert p.node == "b"  # on a, 3 free A100s would be left with 0 CPU


def test_cpu_only_job_prefers_cpu_node() -> None:
    nodes = [node("g", "a100-80g", 8, cpu=128), node("c", None, 0, cpu=32)]
    (p,) = placed(schedule(snap(nodes, [job("c1", gpus=0, cpu=16)])), "c1")
    assert p.node == "c" and p.gpu_type is None


# -- pools, taints, API ------------------------------------------------------------
def test_pool_type_preference_orders_types() -> None:
    pools = {"p": PoolInfo("p", gpu_types=("v100-16g", "a100-80g"))}
    nodes = [node("a", "a100-80g", 8), node("v", "v100-16g", 8)]
    (p,) = placed(schedule(snap(nodes, [job("j", gpus=1)], pools=pools)), "j")
    assert p.gpu_type == "v100-16g"


def test_pool_types_limit_gpu_work() -> None:
    pools = {"p": PoolInfo("p", gpu_types=("v100-16g",))}
    res = schedule(snap([node("a", "a100-80g", 8)], [job("j", gpus=1)], pools=pools))
    assert "j" in res.unschedulable


def test_taints_need_toleration() -> None:
    n = node("a", "a100-80g", 1)
    n.taints = (("dedicated", "p0", "NoSchedule"),)
    res = schedule(snap([n], [job("j")]))
    assert placed(res, "j") is None
    tol = job("k", tolerations=(("dedicated", "p0", "NoSchedule"),))
    assert placed(schedule(snap([n], [tol])), "k") is not None
    # `operator: Exists` with no key tolerates every taint (Kubernetes' rule)
    anything = job("m", tolerations=(("", "", ""),))
    assert placed(schedule(snap([n], [anything])), "m") is not None
    other = job("o", tolerations=(("other", "", ""),))
    assert placed(schedule(snap([n], [other])), "o") is None


def test_a_job_runs_only_on_the_nodes_it_selects_by_label() -> None:
    """A type spanning two products: a job selecting one (a Pod's required node affinity)
    never lands on the other, whichever is emptier or first; a gang's replicas too. When
    the selected nodes are full it waits, and its reason names the selection."""
    key = "nvidia.com/gpu.product"
    pcie = [node(f"p{i}", "a100-80g", 8) for i in range(3)]
    for n in pcie:
        n.labels = {key: "PCIe"}
    sxm = [node(f"s{i}", "a100-80g", 4) for i in range(2)]
    for n in sxm:
        n.labels = {key: "SXM"}
    want = (((key, ("SXM",)),),)
    one = job("one", gpus=1, node_selector=want)
    gang = job("gang", gpus=4, replicas=2, min_available=2, node_selector=want)
    res = schedule(snap(pcie + sxm, [gang, job("free", gpus=8)]))
    assert sorted(p.node for p in placed(res, "gang")) == ["s0", "s1"]
    assert placed(res, "free")[0].node.startswith("p")  # no selection: any node
    (p,) = placed(schedule(snap(pcie + sxm, [one])), "one")
    assert p.node.startswith("s")
    busy = [running(job(f"b{i}", gpus=4), whole(f"s{i}", "a100-80g", (0, 1, 2, 3)))
            for i in range(2)]
    res = schedule(snap(pcie + sxm, [one], running=busy))
    assert placed(res, "one") is None  # 24 free PCIe cards, none selected
    assert "only on nodes whose labels meet nvidia.com/gpu.product in (SXM)" in (
        res.reasons["one"])
    either = job("either", gpus=1, node_selector=(((key, ("SXM",)),), ((key, ("PCIe",)),)))
    assert placed(schedule(snap(pcie, [either])), "either") is not None  # terms are ORed
    # no node of the product at all: it never fits (until one appears), as a type no
    # node has; a cordoned one is waited for
    res = schedule(snap(pcie, [one]))
    assert res.unschedulable["one"] == "no node has labels that meet " \
        "nvidia.com/gpu.product in (SXM)"
    sxm[0].schedulable = False
    assert "waits for nodes that are cordoned" in schedule(snap(pcie + sxm[:1], [one])).reasons[
        "one"]


def test_place_job_leaves_state_unchanged_and_reserve_is_callers_choice() -> None:
    s = snap([node("a", "a100-80g", 2)], [])
    state = ClusterState.from_snapshot(s)
    ctx = PlacementContext.from_snapshot(s)
    j = job("j", gpus=2)
    ps = place_job(j, state, ctx)
    assert ps is not None
    assert state.index.max_free_whole("a100-80g") == 2
    for p in ps:
        state.apply(p)
    assert place_job(job("k", gpus=1), state, ctx) is None
    state.unapply(ps[0])
    assert place_job(job("k", gpus=1), state, ctx) is not None


def test_team_quota_per_type() -> None:
    teams = {"t": TeamInfo("t", "p", quota_by_type={"a100-80g": 10})}
    nodes = [node("a", "a100-80g", 8)]
    res = schedule(snap(nodes, [job("x"), job("y", submitted_at=1)], teams=teams))
    assert [a.job_id for a in res.admissions] == ["x"]
    assert "a100-80g quota" in res.reasons["y"]


def test_types_registry_is_the_articles() -> None:
    assert TYPES["a100-80g"].weight == 10 and TYPES["v100-16g"].weight == 4


# -- fragmentation ------------------------------------------------------------------
def test_fragmentation_score_keeps_room_for_the_expected_mix() -> None:
    from app.scheduling.fragmentation import MixEntry, WorkloadMix
    from app.scheduling.model import SchedulerConfig

    nodes = [node("a", "a100-80g", 8), node("b", "a100-80g", 8)]
    run = [running(job("ra"), whole("a", "a100-80g", (0, 1, 2))),
           running(job("rb"), whole("b", "a100-80g", (0, 1, 2, 3)))]
    s = snap(nodes, [], running=run)
    mix = WorkloadMix((MixEntry(gpus=4, gpu_share=0.0, cpu=1, memory_gb=1, weight=10),))

    def where(w_frag: float) -> str:
        state = ClusterState.from_snapshot(s)
        ctx = PlacementContext(TYPES, config=SchedulerConfig(w_fragmentation=w_frag), mix=mix)
        (p,) = place_job(job("one", gpus=1), state, ctx)
        return p.node

    # binpack alone takes the fuller node b and leaves it 3 cards no 4-card job can use
    assert where(0.0) == "b"
    # with the fragmentation score, a keeps 4 and b keeps 4: two 4-card jobs still fit
    assert where(1.0) == "a"


def test_gpu_units_multi_node_fast_network_only_on_ib() -> None:
    eth = [node(f"e{i}", "rtx4090-24g", 4, network="eth") for i in range(4)]
    res = schedule(snap(eth, [job("u", gpu_units=16, topology="fast_network")]))
    assert placed(res, "u") is None  # 8 cards need two 1 GbE nodes
    ib = [node(f"i{i}", "rtx4090-24g", 4, network="ib") for i in range(2)]
    ps = placed(schedule(snap(eth + ib, [job("u", gpu_units=16, topology="fast_network")])),
                "u")
    assert {p.node for p in ps} == {"i0", "i1"}


def test_gpu_units_single_node_when_one_can_hold_it() -> None:
    nodes = [node("small", "rtx4090-24g", 4), node("big", "rtx4090-24g", 8)]
    ps = placed(schedule(snap(nodes, [job("u", gpu_units=12)])), "u")
    assert [(p.node, len(p.devices)) for p in ps] == [("big", 6)]


def test_a_state_whose_cached_fit_a_node_refuses_is_asked_again_node_by_node() -> None:
    """Placement caches per node state whether a replica fits, and the signature rounds
    CPU to 6 decimals where the host filter allows 1e-9: two nodes 4e-7 CPU apart share a
    state. A job needing every CPU fits the first and is cached as fitting the state; the
    next such job's winner is then the other node, which refuses it. It waits (as it did
    before the cache), instead of failing the cycle on the cached answer."""
    a = node("a", "a100-80g", 8, cpu=16)
    b = node("b", "a100-80g", 8, cpu=16)
    b.cpu_used = 4e-7
    res = schedule(snap([a, b], [job("j1", cpu=16.0, submitted_at=0.0),
                                 job("j2", cpu=16.0, submitted_at=1.0)]))
    assert [x.node for x in placed(res, "j1")] == ["a"]
    assert placed(res, "j2") is None and "j2" in res.reasons, res.reasons
    # b with exact numbers takes such a job
    b.cpu_used = 0.0
    res = schedule(snap([a, b], [job("j1", cpu=16.0), job("j2", cpu=16.0, submitted_at=1.0)]))
    assert sorted(x.node for j in ("j1", "j2") for x in placed(res, j)) == ["a", "b"]

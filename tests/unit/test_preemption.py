"""Priority preemption: who may be a victim, which set, and what happens next."""

from app.scheduling.books import Books
from app.scheduling.context import PlacementContext
from app.scheduling.engine import schedule
from app.scheduling.model import LeaseInfo, PoolInfo, ReplicaPlacement, RunningJob
from app.scheduling.placement import place_job
from app.scheduling.pools import PoolLedger
from app.scheduling.preemption import VictimTrial, candidates, find_victims
from app.scheduling.quota import QuotaLedger
from app.scheduling.state import ClusterState
from tests.unit.quota_sim import Sim, job, node, running, snapshot

POOLS = [PoolInfo("p")]


def one_node_full(*jobs_on_devices, now=1000.0, pending=(), **cfg):
    """One 8-card a100 node; each (job, devices, started_at) runs there."""
    run = [running(j, "a0", "a100", d, started_at=t) for j, d, t in jobs_on_devices]
    return snapshot([node("a0", "a100", 8)], POOLS, pending, run, now=now, **cfg)


def victims(res):
    return sorted(p.job_id for p in res.preemptions)


def test_p0_preempts_p2_before_p1_when_either_would_do() -> None:
    snap = one_node_full(
        (job("p1", prio="P1", gpus=4), (0, 1, 2, 3), 900.0),  # cheaper (younger) but P1
        (job("p2", prio="P2", gpus=4), (4, 5, 6, 7), 0.0),
        pending=[job("urgent", prio="P0", gpus=4)],
    )
    res = schedule(snap)
    assert victims(res) == ["p2"]
    assert res.preemptions[0].by_job == "urgent" and res.preemptions[0].kind == "preempt"
    assert [a.job_id for a in res.admissions] == ["urgent"]


def test_p0_job_is_never_a_victim() -> None:
    snap = one_node_full(
        (job("online", prio="P0", gpus=8), tuple(range(8)), 0.0),
        pending=[job("other", prio="P0", gpus=8)],
    )
    res = schedule(snap)
    assert res.preemptions == [] and res.admissions == []


def test_equal_priority_never_preempts() -> None:
    snap = one_node_full((job("a", gpus=8), tuple(range(8)), 0.0), pending=[job("b", gpus=8)])
    assert schedule(snap).preemptions == []


def test_cheapest_victim_by_lost_cu_seconds() -> None:
    snap = one_node_full(
        (job("old", prio="P2", gpus=4), (0, 1, 2, 3), 0.0),
        (job("young", prio="P2", gpus=4), (4, 5, 6, 7), 800.0),
        pending=[job("j", prio="P1", gpus=4)],
    )
    assert victims(schedule(snap)) == ["young"]


def test_min_run_time_protects_fresh_jobs() -> None:
    snap = one_node_full(
        (job("fresh", prio="P2", gpus=8), tuple(range(8)), 990.0),
        pending=[job("j", prio="P0", gpus=8)], min_run_time_s=60,
    )
    res = schedule(snap)
    assert res.preemptions == [] and "j" in res.reasons


def test_min_run_time_does_not_protect_against_lease_reclaim() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 40}, reclaim="when_needed"),
             PoolInfo("q", guaranteed={"a100": 40}, reclaim="when_needed")]
    b = job("b", gpus=4)
    lease = LeaseInfo("L1", "p", "q", "a100", 40, "b", 0, 10)
    mine = job("mine", gpus=4)
    run = [running(mine, "a0", "a100", (0, 1, 2, 3), started_at=0),
           running(b, "a0", "a100", (4, 5, 6, 7), started_at=5, leases=(lease,))]
    snap = snapshot([node("a0", "a100", 8)], pools, [job("z", pool="q", gpus=4)], run,
                    now=20, min_run_time_s=600)
    res = schedule(snap)
    assert [(p.job_id, p.kind) for p in res.preemptions] == [("b", "reclaim")]


def test_never_preempt_when_it_would_not_fit_even_after() -> None:
    snap = one_node_full(
        (job("a", prio="P2", gpus=8), tuple(range(8)), 0.0),
        pending=[job("big", prio="P0", gpus=8, replicas=2, min_available=2)],
    )
    res = schedule(snap)
    assert res.preemptions == []
    # one 8-card node can never hold two 8-card replicas: unschedulable, nobody preempted
    assert "big" in res.unschedulable


def test_whole_gang_is_the_victim() -> None:
    gang = job("gang", prio="P2", gpus=4, replicas=2, min_available=2)
    r = RunningJob(gang, (
        ReplicaPlacement(0, "a0", "a100", (0, 1, 2, 3), units=40, cpu=1, memory_gb=1),
        ReplicaPlacement(1, "a1", "a100", (0, 1, 2, 3), units=40, cpu=1, memory_gb=1),
    ), 0.0)
    snap = snapshot([node("a0", "a100", 4), node("a1", "a100", 4)], POOLS,
                    [job("p0", prio="P0", gpus=4)], [r], now=1000)
    res = schedule(snap)
    assert victims(res) == ["gang"]
    assert res.admissions[0].job_id == "p0"


def test_victim_set_is_minimal() -> None:
    """Removing any single victim from the chosen set makes the job not fit."""
    small = [job(f"s{i}", prio="P2", gpus=2) for i in range(4)]
    run = [(small[i], (2 * i, 2 * i + 1), float(i)) for i in range(4)]
    snap = one_node_full(*run, pending=[job("j", prio="P0", gpus=4)])
    state = ClusterState.from_snapshot(snap)
    ledger = PoolLedger.from_snapshot(snap)
    j = snap.pending[0]

    ctx = PlacementContext.from_snapshot(snap)

    def place(jb, st):
        return place_job(jb, st, ctx)

    w = VictimTrial(j, Books(state, QuotaLedger.from_snapshot(snap), ledger), place)

    def fits(victims) -> bool:
        for v in victims:
            w.remove(v.job)
        try:
            return w.fits()
        finally:
            w.restore_all()

    chosen = find_victims(j, candidates(j, snap, snap.running, {"a100"}), w)
    assert chosen is not None and len(chosen) == 2
    for c in chosen:
        assert not fits([x for x in chosen if x is not c])
    assert fits(chosen)
    assert not fits([])


def test_thrash_guard_refuses_preempting_back() -> None:
    a = job("a", prio="P2", gpus=8)
    b = job("b", prio="P1", gpus=8, last_preempted_by="a", last_preempted_at=900.0)
    snap = one_node_full((a, tuple(range(8)), 0.0), pending=[b], thrash_window_s=600)
    assert schedule(snap).preemptions == []
    snap = one_node_full((a, tuple(range(8)), 0.0), pending=[b], now=1600.0,
                         thrash_window_s=600)
    assert victims(schedule(snap)) == ["a"]


def test_preempted_jobs_requeue_and_later_finish() -> None:
    s = Sim(nodes=[node("a0", "a100", 8)], pools=POOLS, config={"min_run_time_s": 0})
    s.submit(job("low", prio="P2", gpus=8), runtime=500)
    s.cycle()
    s.advance(100)
    s.submit(job("high", prio="P0", gpus=8), runtime=300)
    res = s.cycle()
    assert victims(res) == ["low"]
    low = s.pending["low"]
    assert low.submitted_at == 0 and low.preemption_count == 1 and low.last_preempted_by == "high"
    pre = [e for e in s.events if e[1] == "preempt"][0]
    assert pre[3]["by"] == "high" and "P0 > P2" in pre[3]["reason"]
    for _ in range(10):
        s.advance(100)
        s.cycle()
    assert s.done == {"high": "succeeded", "low": "succeeded"}


def test_site_defined_priority_classes() -> None:
    """Classes are a table: a site's 'batch' (value 50, preemptible) yields to
    P2; its 'system' class (value 2000, non-preemptible) is never a victim."""
    from dataclasses import replace

    batch = replace(job("batch", prio="P2", gpus=4), priority="batch", priority_value=50)
    system = replace(job("sys", prio="P0", gpus=4), priority="system", priority_value=2000)
    snap = one_node_full(
        (batch, (0, 1, 2, 3), 0.0), (system, (4, 5, 6, 7), 0.0),
        pending=[job("p2", prio="P2", gpus=4)],
    )
    res = schedule(snap)
    assert victims(res) == ["batch"]
    snap = one_node_full(
        (system, tuple(range(4)), 0.0), (batch, (4, 5, 6, 7), 0.0),
        pending=[job("p0", prio="P0", gpus=8)],
    )
    assert schedule(snap).preemptions == []  # would need the system job: nobody moves

"""Pool accounting: guarantee, shared capacity by weight, borrowing with leases."""

from app.scheduling.engine import schedule
from app.scheduling.model import LeaseInfo, PoolInfo
from app.scheduling.pools import Charge, PoolLedger
from tests.unit.quota_sim import job, node, running, snapshot

A = [node("a0", "a100", 8), node("a1", "a100", 8)]  # 160 CU of a100


def ledger(pools, run=(), pending=()) -> PoolLedger:
    return PoolLedger.from_snapshot(snapshot(A, pools, pending, run))


def test_within_guarantee_no_lease() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}), PoolInfo("q", guaranteed={"a100": 80})]
    res = schedule(snapshot(A, pools, [job("x", gpus=8)]))
    assert [a.job_id for a in res.admissions] == ["x"]
    assert res.admissions[0].leases == ()


def test_lease_created_above_guarantee_names_lender() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}), PoolInfo("q", guaranteed={"a100": 80})]
    x = job("x", gpus=8)
    full = [running(x, "a0", "a100", tuple(range(8)))]
    res = schedule(snapshot(A, pools, [job("y", gpus=2)], full, now=100))
    (adm,) = res.admissions
    (lease,) = adm.leases
    assert (lease.borrower, lease.lender, lease.gpu_type, lease.units) == ("p", "q", "a100", 20)
    assert lease.expires_at == 100 + 1800


def test_lease_expiry_is_stricter_of_both_pools() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}, max_borrow_seconds=3000),
             PoolInfo("q", guaranteed={"a100": 80}, max_borrow_seconds=600)]
    x = job("x", gpus=8)
    full = [running(x, "a0", "a100", tuple(range(8)))]
    res = schedule(snapshot(A, pools, [job("y", gpus=1)], full))
    assert res.admissions[0].leases[0].expires_at == 600


def test_unguaranteed_capacity_shared_without_lease() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 40}), PoolInfo("q")]
    res = schedule(snapshot(A, pools, [job("x", gpus=8, pool="q")]))
    assert res.admissions[0].leases == ()


def test_shared_capacity_split_by_weight_among_active_pools() -> None:
    pools = [PoolInfo("p", weight=3), PoolInfo("q", weight=1)]
    lg = ledger(pools, pending=[job("a", pool="p"), job("b", pool="q")])
    assert lg.shared_limit("p", "a100") == 120
    assert lg.shared_limit("q", "a100") == 40
    # a pool alone gets all of it (work-conserving)
    assert ledger(pools, pending=[job("a", pool="q")]).shared_limit("q", "a100") == 160
    # a pool that wants another type does not take a share of this one
    lg = ledger(pools, pending=[job("a", pool="p", gpu_types=("v100",)), job("b", pool="q")])
    assert lg.shared_limit("q", "a100") == 160


def test_a_gang_larger_than_its_pools_share_starts_from_idle_shared_capacity() -> None:
    """Two pools without a guarantee, each with a gang of the whole type: each was capped
    at half (its weighted share), neither ever started and every card stayed idle."""
    pools = [PoolInfo("p"), PoolInfo("q")]
    gang = dict(gpus=8, replicas=2, min_available=2)
    pending = [job("x", pool="p", **gang), job("y", pool="q", submitted_at=1.0, **gang)]
    res = schedule(snapshot(A, pools, pending))
    assert [a.job_id for a in res.admissions] == ["x"]  # the first in the order, whole
    assert "y" in res.reasons  # the other waits for the cards, not for a share it cannot get
    # once x holds the type, y does not start beside it, and p takes nothing more
    full = [running(x, n.name, "a100", tuple(range(8)))
            for x, n in zip((pending[0], pending[0]), A, strict=True)]
    res = schedule(snapshot(A, pools, [pending[1], job("z", pool="p", gpus=1)], full, now=5))
    assert res.admissions == []
    # a pool at or above its share (p: weight 1 of 4, 40 CU) does not pass it with a job
    # larger than the share, although the cards are free; below it, it may
    pools = [PoolInfo("p", weight=1), PoolInfo("q", weight=3)]
    w = job("w", pool="p", gpus=4, replicas=2, min_available=2)  # 80 CU
    v = job("v", pool="q", gpus=1, submitted_at=2.0)
    held = [running(job("h", pool="p", gpus=4), "a0", "a100", (0, 1, 2, 3))]  # 40 CU
    res = schedule(snapshot(A, pools, [w, v], held, now=5))
    assert [a.job_id for a in res.admissions] == ["v"]
    res = schedule(snapshot(A, pools, [w, v], now=5))
    assert sorted(a.job_id for a in res.admissions) == ["v", "w"]


def test_lend_limit_caps_lending() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}),
             PoolInfo("q", guaranteed={"a100": 80}, lend_limit={"a100": 20})]
    x = job("x", gpus=8)
    lg = ledger(pools, run=[running(x, "a0", "a100", tuple(range(8)))])
    assert lg.lendable("q", "a100") == 20
    assert isinstance(lg.plan(job("y", gpus=2), {"a100": 20}), Charge)
    why = lg.plan(job("y", gpus=3), {"a100": 30})
    assert isinstance(why, str) and "20 borrowable" in why


def test_borrow_limit_caps_borrowing() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}, borrow_limit=10),
             PoolInfo("q", guaranteed={"a100": 80})]
    x = job("x", gpus=8)
    lg = ledger(pools, run=[running(x, "a0", "a100", tuple(range(8)))])
    assert isinstance(lg.plan(job("y"), {"a100": 10}), Charge)
    assert isinstance(lg.plan(job("y", gpus=2), {"a100": 20}), str)


def test_non_preemptible_jobs_never_borrow() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}), PoolInfo("q", guaranteed={"a100": 80})]
    x = job("x", gpus=8)
    lg = ledger(pools, run=[running(x, "a0", "a100", tuple(range(8)))])
    why = lg.plan(job("y", prio="P0"), {"a100": 10})
    assert isinstance(why, str) and "non-preemptible" in why


def test_usage_borrowed_and_lent() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 80}), PoolInfo("q", guaranteed={"a100": 80})]
    x = job("x", gpus=8)
    y = job("y", gpus=2)
    lease = LeaseInfo("L1", "p", "q", "a100", 20, "y", 0, 1800)
    lg = ledger(pools, run=[running(x, "a0", "a100", tuple(range(8))),
                            running(y, "a1", "a100", (0, 1), leases=(lease,))])
    p, q = lg.usage("p")["a100"], lg.usage("q")["a100"]
    assert (p.guaranteed, p.used, p.borrowed, p.lent, p.idle) == (80, 100, 20, 0, 0)
    assert (q.guaranteed, q.used, q.borrowed, q.lent, q.idle) == (80, 0, 0, 20, 60)


def test_oversubscribed_guarantees_scaled_to_capacity() -> None:
    pools = [PoolInfo("p", guaranteed={"a100": 200}), PoolInfo("q", guaranteed={"a100": 120})]
    lg = ledger(pools)
    assert lg.guarantee("p", "a100") + lg.guarantee("q", "a100") <= 160 + 1e-9
    assert lg.shared_total("a100") == 0

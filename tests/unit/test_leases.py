"""Leases on a controllable clock: creation, reclaim at expiry, when_needed,
the lender's wait bound, and the outlast warning."""

from app.scheduling.model import PoolInfo
from tests.unit.quota_sim import Sim, job, node


def borrowing_sim(reclaim: str = "always", max_s: float = 1800) -> Sim:
    """p (guarantee 80) runs 8 cards on its guarantee, then y borrows 2 from q."""
    s = Sim(
        nodes=[node("a0", "a100", 8), node("a1", "a100", 8)],
        pools=[PoolInfo("p", guaranteed={"a100": 80}, reclaim=reclaim, max_borrow_seconds=max_s),
               PoolInfo("q", guaranteed={"a100": 80}, reclaim=reclaim, max_borrow_seconds=max_s)],
    )
    s.submit(job("x", gpus=8))
    s.cycle()
    s.submit(job("y", gpus=2))
    s.cycle()
    return s


def test_lease_created_above_guarantee() -> None:
    s = borrowing_sim()
    assert "x" in s.running and s.running["x"].leases == ()
    (lease,) = s.running["y"].leases
    assert (lease.borrower, lease.lender, lease.units, lease.expires_at) == ("p", "q", 20, 1800)
    assert s.kinds("y") == ["lease_start", "admit"]


def test_reclaimed_at_exactly_max_borrow_seconds_under_always() -> None:
    s = borrowing_sim("always")
    s.advance(1799.0)
    s.cycle()
    assert "y" in s.running
    s.advance(1.0)
    res = s.cycle()
    assert [(p.job_id, p.kind) for p in res.preemptions] == [("y", "reclaim")]
    assert [e[:3] for e in s.events[-2:]] == [(1800.0, "lease_end", "y"), (1800.0, "reclaim", "y")]
    # y requeued with its original submit time and one more preemption
    assert s.pending["y"].submitted_at == 0 and s.pending["y"].preemption_count == 1
    assert "x" in s.running  # x never borrowed


def test_when_needed_not_reclaimed_while_nobody_waits() -> None:
    s = borrowing_sim("when_needed")
    for _ in range(5):
        s.advance(1800.0)
        res = s.cycle()
        assert res.preemptions == []
    assert "y" in s.running


def test_when_needed_reclaimed_once_the_lender_submits() -> None:
    s = borrowing_sim("when_needed")
    s.advance(4000.0)
    s.cycle()
    s.submit(job("z", pool="q", gpus=8))
    res = s.cycle()
    assert [(p.job_id, p.kind, p.by_job) for p in res.preemptions] == [("y", "reclaim", "z")]
    assert "z" in s.running


def test_when_needed_not_reclaimed_for_a_job_it_would_not_admit() -> None:
    s = borrowing_sim("when_needed")
    s.advance(4000.0)
    s.submit(job("huge", pool="q", gpus=8, replicas=3, min_available=3))  # 24 cards > 16
    res = s.cycle()
    assert res.preemptions == [] and "y" in s.running


def test_lender_waits_at_most_until_expiry() -> None:
    """The documented bound: a lender job needing lent capacity starts no later
    than the lease's expiry (here reclaim: always, max 1800 s)."""
    s = borrowing_sim("always")
    s.advance(100.0)
    s.submit(job("z", pool="q", gpus=8))
    s.cycle()
    assert "z" in s.pending  # same priority as the borrower: waits for the lease
    for _ in range(17):
        s.advance(100.0)
        s.cycle()
    assert s.now == 1800.0
    assert "z" in s.running and s.running["z"].started_at <= 1800.0


def test_lender_wait_bound_when_needed() -> None:
    s = borrowing_sim("when_needed")
    s.advance(1000.0)
    s.submit(job("z", pool="q", gpus=8))
    s.cycle()
    assert "z" in s.pending
    s.advance(800.0)
    s.cycle()
    assert "z" in s.running and s.running["z"].started_at == 1800.0


def test_job_told_when_it_outlasts_its_lease() -> None:
    s = borrowing_sim()
    s.submit(job("w", gpus=1, duration_estimate_s=7200))
    s.cycle()
    admit = [e for e in s.events if e[1] == "admit" and e[2] == "w"][0]
    assert any("outlasts its lease" in n for n in admit[3]["notes"])
    s.submit(job("v", gpus=1, duration_estimate_s=60))
    s.cycle()
    admit = [e for e in s.events if e[1] == "admit" and e[2] == "v"][0]
    assert admit[3]["notes"] == ()


def test_lease_returned_when_job_ends_and_reclaimed_job_finishes_later() -> None:
    s = borrowing_sim("always")
    s.runtime["x"] = 2000.0
    s.advance(1800.0)
    s.cycle()  # y reclaimed, requeued
    assert "y" in s.pending
    s.advance(200.0)  # x finishes: p is below its guarantee again
    s.runtime["y"] = 50.0
    s.cycle()
    assert "y" in s.running and s.running["y"].leases == ()  # on own guarantee now
    s.advance(50.0)
    assert s.done["y"] == "succeeded"


def test_reclaimed_job_does_not_reborrow_within_thrash_window() -> None:
    s = borrowing_sim("always")
    s.config = {"thrash_window_s": 600}
    s.advance(1800.0)
    s.cycle()  # reclaimed
    s.advance(1.0)
    res = s.cycle()
    assert "y" in s.pending
    assert res.reasons["y"].endswith("(its lease was reclaimed: it may borrow again in 599 s)")
    s.advance(599.0)
    res = s.cycle()
    # past the window it is still not lent again: it ran 1800 s without finishing,
    # so a lease of 1800 s could only end in another reclaim
    assert "y" in s.pending
    assert res.reasons["y"].startswith(
        "needs 1800 s or more (a run was stopped unfinished after 1800 s) but leases last"
        " 1800 s: waits for pool p's own guarantee")


def test_when_needed_pool_at_its_guarantee_is_not_entitled_to_reclaim() -> None:
    """r is guaranteed a100 too, but already runs its whole guarantee: its
    extra job may not take back the lease q gave p (only the lender, or a pool
    below its guarantee, may)."""
    from app.scheduling.leases import entitled
    from app.scheduling.model import LeaseInfo

    pools = [PoolInfo(n, guaranteed={"a100": 40}, reclaim="when_needed") for n in "pqr"]
    s = Sim(nodes=[node("a0", "a100", 8), node("a1", "a100", 4)], pools=pools)
    s.submit(job("x", gpus=4))
    s.submit(job("rr", pool="r", gpus=4))
    s.cycle()
    s.submit(job("y", gpus=2))
    s.cycle()
    assert s.running["y"].leases[0].lender == "q"
    s.advance(4000.0)
    s.submit(job("more", pool="r", gpus=4))
    res = s.cycle()
    assert res.preemptions == [] and "y" in s.running and "more" in s.pending
    lease = LeaseInfo("L", "p", "q", "a100", 20, "y", 0, 1)
    pmap = {p.name: p for p in pools}
    assert entitled(job("z", pool="q"), lease, pmap, below=set())
    assert entitled(job("z", pool="r"), lease, pmap, below={("r", "a100")})
    assert not entitled(job("z", pool="r"), lease, pmap, below=set())

"""Leases at their edges through the live dispatcher, REST and PostgreSQL on a
manual clock (the demo config: training's 100 CU
A100 guarantee, 10 CU shared, a 10 CU lease from mixed)."""

from __future__ import annotations

from sqlalchemy import select

from app.dispatch.lease_reaper import LeaseReaper
from app.store.orm import JobRow
from tests.integration.test_leases_preemption import borrow_setup, events, job, leases


def test_lease_returned_when_own_guarantee_frees_up(client, admin, dispatcher, clock):
    a, b = borrow_setup(client, admin, dispatcher)
    (lease,) = leases(client, admin)
    clock.advance(600)
    r = client.post(f"/v1/jobs/{a}/cancel", headers=admin)  # frees 80 CU of training's own
    assert r.status_code == 200, r.text
    dispatcher.run_once()
    assert job(client, admin, b)["status"] == "running"
    assert job(client, admin, b)["lease"]["state"] == "returned"  # its last lease
    assert leases(client, admin) == []
    (ret,) = leases(client, admin, "returned")
    assert ret["id"] == lease["id"]
    (ev,) = [e for e in events(client, admin, b) if e["type"] == "lease_returned"]
    assert "own guarantee" in ev["reason"] and ev["data"]["lender"] == "mixed"
    usage = client.get("/v1/pools/training/usage", headers=admin).json()["gpu_types"]["a100-80g"]
    assert (usage["used"], usage["borrowed"]) == (40, 0)
    assert client.get("/v1/pools/mixed/usage", headers=admin).json()[
        "gpu_types"]["a100-80g"]["lent"] == 0
    # past the old expiry: neither the cycle nor the reaper reclaims anything
    clock.advance(1500)
    dispatcher.run_once()
    LeaseReaper(dispatcher).run_once()
    bj = job(client, admin, b)
    assert bj["status"] == "running" and bj["preemption_count"] == 0
    assert not [e for e in events(client, admin, b) if e["type"] == "reclaimed"]


def test_reclaimed_job_waits_for_own_guarantee_with_a_true_reason(
    client, admin, dispatcher, clock, session_factory
):
    a, b = borrow_setup(client, admin, dispatcher)
    clock.advance(1800)
    dispatcher.run_once()  # the lease expires: reclaimed (reclaim: always)
    bj = job(client, admin, b)
    assert bj["status"] == "pending" and bj["preemption_count"] == 1
    with session_factory() as s:
        bound = s.scalar(select(JobRow.longest_attempt_s).where(JobRow.id == int(b)))
    assert bound == 1800.0  # it ran 1800 s without finishing
    for _ in range(6):  # an hour: the thrash window (600 s) lapses several times
        clock.advance(600)
        dispatcher.run_once()
        bj = job(client, admin, b)
        assert bj["status"] == "pending", bj
    assert bj["reason"].startswith(
        "needs 3600 s or more (a run was stopped unfinished after 1800 s) but leases last"
        " 1800 s: waits for pool training's own guarantee"), bj
    assert [e["type"] for e in events(client, admin, b)].count("admitted") == 1
    # training's own job ends: the job runs on the pool's own guarantee, no lease
    client.post(f"/v1/jobs/{a}/cancel", headers=admin)
    dispatcher.run_once()
    bj = job(client, admin, b)
    assert bj["status"] == "running" and bj["lease"]["state"] == "reclaimed"  # the old one
    assert leases(client, admin) == []  # no new lease

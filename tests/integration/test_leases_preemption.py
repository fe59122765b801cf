"""Leases and preemption end to end: REST, the dispatcher, PostgreSQL and the
simulated cluster on a manual clock (the demo config: a100-1 has 8 whole
cards, a100-0 has 7 plus one MIG-cut card; a100 guarantees training 100,
inference 20, mixed 30 of 160 CU, so 10 CU are shared)."""

from __future__ import annotations

from app.clock import to_epoch
from app.dispatch.descheduler_step import Descheduler
from app.dispatch.lease_reaper import LeaseReaper
from app.store.snapshot import build_snapshot
from tests.integration.conftest import job_body

A100 = {"gpu_types": ["a100-80g"]}


def submit(client, admin, name, team, gpus, duration, **kw) -> str:
    body = job_body(name=name, team=team, resources={"gpus": gpus, **A100},
                    duration_estimate_s=duration, **kw)
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def job(client, admin, jid):
    return client.get(f"/v1/jobs/{jid}", headers=admin).json()


def events(client, admin, jid):
    return client.get(f"/v1/jobs/{jid}/events", headers=admin).json()


def leases(client, admin, state="active"):
    r = client.get(f"/v1/leases?state={state}", headers=admin)
    assert r.status_code == 200, r.text
    return r.json()


def borrow_setup(client, admin, dispatcher):
    """nlp (training) fills its 100 CU guarantee, takes the 10 shared CU and
    borrows 10 more from an idle guarantee: one lease."""
    a = submit(client, admin, "base", "nlp", 8, 100_000)
    dispatcher.run_once()
    b = submit(client, admin, "borrow", "nlp", 4, 3600)
    dispatcher.run_once()
    assert job(client, admin, a)["status"] == "running"
    assert job(client, admin, b)["status"] == "running"
    return a, b


def test_lease_visible_in_leases_usage_and_events(client, admin, dispatcher):
    a, b = borrow_setup(client, admin, dispatcher)
    (lease,) = leases(client, admin)
    assert lease["borrower"] == "training" and lease["lender"] == "mixed"
    assert lease["units"] == 10 and str(lease["job_id"]) == b
    assert job(client, admin, b)["lease"] is not None
    assert job(client, admin, a)["lease"] is None
    usage = client.get("/v1/pools/training/usage", headers=admin).json()
    row = usage["gpu_types"]["a100-80g"]
    assert (row["guaranteed"], row["used"], row["borrowed"], row["shared"]) == (100, 120, 10, 10)
    lender = client.get("/v1/pools/mixed/usage", headers=admin).json()["gpu_types"]["a100-80g"]
    assert lender["lent"] == 10 and lender["idle"] == 20
    assert [x["id"] for x in usage["leases"]] == [lease["id"]]
    # the job is told that its estimate outlasts the lease (3600 s > 1800 s)
    warn = [e for e in events(client, admin, b) if e["type"] == "lease_warning"]
    assert warn and "outlasts its lease" in warn[0]["reason"]


def test_p0_preempts_p2_borrower_and_lease_reclaimed_at_expiry(
    client, admin, dispatcher, clock, session_factory
):
    a, b = borrow_setup(client, admin, dispatcher)
    c = submit(client, admin, "scavenge", "research", 3, 100_000, priority="P2")
    dispatcher.run_once()
    assert job(client, admin, c)["status"] == "running"
    clock.advance(120)  # past the minimum run time
    p = submit(client, admin, "online", "recsys", 2, 100_000, priority="P0")
    dispatcher.run_once()
    assert job(client, admin, p)["status"] == "running"
    cj = job(client, admin, c)
    assert cj["status"] == "pending" and cj["preemption_count"] == 1
    pre = [e for e in events(client, admin, c) if e["type"] == "preempted"]
    assert pre and pre[0]["data"]["by_job"] == p and "P0 > P2" in pre[0]["reason"]
    assert job(client, admin, a)["status"] == "running"  # P1 on its guarantee untouched
    # the thrash guard sees who preempted it (from the job's events)
    with session_factory() as s:
        snap = build_snapshot(s, clock()).snapshot
    (req,) = [r for r in snap.pending if r.id == c]
    assert req.last_preempted_by == p and req.last_preempted_at == to_epoch(clock())
    assert req.last_reclaimed_at is None
    # the borrow lease expires 1800 s after it started: reclaimed exactly then
    clock.advance(1800 - 120 - 1)
    dispatcher.run_once()
    assert job(client, admin, b)["status"] == "running"
    clock.advance(1)
    dispatcher.run_once()
    bj = job(client, admin, b)
    assert bj["status"] == "pending" and bj["preemption_count"] == 1
    assert any(e["type"] == "reclaimed" for e in events(client, admin, b))
    (gone,) = leases(client, admin, "reclaimed")
    assert str(gone["job_id"]) == b
    # the preempted P2 job is still queued, never lost
    assert job(client, admin, c)["status"] in ("pending", "running")


def test_lease_reaper_reclaims_without_a_dispatch_cycle(client, admin, dispatcher, clock):
    _, b = borrow_setup(client, admin, dispatcher)
    clock.advance(1800)
    LeaseReaper(dispatcher).run_once()
    assert job(client, admin, b)["status"] == "pending"
    assert leases(client, admin) == []


def test_descheduler_makes_room_for_p0(client, admin, dispatcher, clock):
    a, b = borrow_setup(client, admin, dispatcher)  # a100-1 full, 4 of 7 on a100-0
    c = submit(client, admin, "scavenge", "research", 3, 100_000, priority="P2")
    dispatcher.run_once()  # a100 now full
    clock.advance(120)
    p = submit(client, admin, "online", "recsys", 2, 100_000, priority="P0")
    # the descheduler loop alone (no dispatcher pass) evicts P2 (not P1) for P0
    Descheduler(dispatcher).run_once()
    assert job(client, admin, p)["status"] in ("admitted", "running")
    assert job(client, admin, c)["status"] == "pending"
    assert job(client, admin, a)["status"] == job(client, admin, b)["status"] == "running"
    (ev,) = [e for e in events(client, admin, c) if e["type"] == "preempted"]
    assert ev["reason"] == f"descheduler (room for P0): preempted by job {p} (P0 > P2)"
    assert ev["data"]["by_job"] == p


def test_team_quota_lowered_below_use_blocks_new_work_never_kills(
    client, admin, dispatcher
):
    a, b = borrow_setup(client, admin, dispatcher)
    r = client.put(
        "/v1/teams/nlp/quota", json={"quota_units": 50, "quota_by_type": {}}, headers=admin
    )
    assert r.status_code == 200, r.text
    n = submit(client, admin, "more", "nlp", 1, 100)
    dispatcher.run_once()
    assert job(client, admin, a)["status"] == "running"
    assert job(client, admin, b)["status"] == "running"
    nj = job(client, admin, n)
    assert nj["status"] == "pending" and "quota" in nj["reason"]
    bad = client.put(
        "/v1/teams/nlp/quota", json={"quota_units": -1, "quota_by_type": {}}, headers=admin
    )
    assert bad.status_code == 422 and "quota_units" in str(bad.json()["detail"])


def test_descheduler_defragments_through_the_dispatch_path(client, admin, dispatcher, clock,
                                                           cluster):
    v100 = {"gpu_types": ["v100-16g"]}
    small = []
    for i in range(2):  # spread: one small job on each V100 node
        body = job_body(name=f"small-{i}", team="research", priority="P2", placement="spread",
                        resources={"gpus": 1, **v100}, duration_estimate_s=100_000)
        small.append(client.post("/v1/jobs", json=body, headers=admin).json()["id"])
        dispatcher.run_once()
    nodes = {job(client, admin, s)["allocations"][0]["node"] for s in small}
    assert len(nodes) == 2
    clock.advance(120)
    body = job_body(name="whole-node", team="nlp", resources={"gpus": 8, **v100},
                    duration_estimate_s=100_000)
    big = client.post("/v1/jobs", json=body, headers=admin).json()["id"]
    Descheduler(dispatcher).run_once()
    bj = job(client, admin, big)
    assert bj["status"] in ("admitted", "running")
    (freed,) = {a["node"] for a in bj["allocations"]}
    moved = [s for s in small if any(e["type"] == "preempted" for e in events(client, admin, s))]
    assert len(moved) == 1
    mj = job(client, admin, moved[0])
    # moved at once: running again elsewhere, counted as one preemption, nothing lost
    assert mj["status"] in ("admitted", "running") and mj["preemption_count"] == 1
    assert mj["allocations"][0]["node"] != freed
    assert cluster.running_job_ids() >= {big, *small}


def test_tiers_config_holds_p0_reservation_through_the_dispatcher(session_factory, clock):
    """app/config/tiers.yaml loaded into PostgreSQL: P1 fills every A100 (borrowing
    the idle P0 reservation), then P0 asks for its 30% and gets it in one pass."""
    from importlib.resources import files

    from sqlalchemy import select

    from app.cluster.simulated import SimulatedCluster
    from app.dispatch.dispatcher import Dispatcher
    from app.domain.config import load_config_text
    from app.domain.spec import JobSpec
    from app.store.config_loader import apply_config, ensure_priority_classes
    from app.store.convert import node_info
    from app.store.jobs import submit_job
    from app.store.orm import JobRow, LeaseRow, NodeRow

    cfg = load_config_text((files("app") / "config" / "tiers.yaml").read_text())
    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, cfg)
        s.commit()
        nodes = [node_info(r) for r in s.scalars(select(NodeRow))]
    d = Dispatcher(session_factory, SimulatedCluster(nodes=nodes, clock=clock), clock=clock)

    def submit(name, team, gpus):
        spec = JobSpec.model_validate({"name": name, "team": team, "duration_estimate_s": 10**6,
                                       "resources": {"gpus": gpus, "gpu_types": ["a100-80g"]}})
        with session_factory() as s:
            jid = submit_job(s, spec, now=clock()).job.id
            s.commit()
        return jid

    for i in range(40):
        submit(f"ft{i}", "llm", 1)
    d.run_once()
    with session_factory() as s:
        assert s.scalar(select(JobRow).where(JobRow.status == "pending").limit(1)) is None
        assert len(list(s.scalars(select(LeaseRow).where(LeaseRow.state == "active")))) == 12
    clock.advance(120)
    p0 = [submit(f"rec{i}", "recsys", 4) for i in range(3)]
    d.run_once()
    with session_factory() as s:
        rows = {r.id: r for r in s.scalars(select(JobRow))}
        assert all(rows[j].status == "running" and rows[j].priority == "P0" for j in p0)
        preempted = [r for r in rows.values() if r.preemption_count == 1]
        assert len(preempted) == 12 and all(r.team == "llm" for r in preempted)
        assert len(list(s.scalars(select(LeaseRow).where(LeaseRow.state == "active")))) == 0


def test_reaper_closes_leases_left_on_jobs_that_stopped(client, admin, dispatcher, clock,
                                                         session_factory):
    from datetime import timedelta

    from sqlalchemy import select

    from app.store.orm import LeaseRow

    a = submit(client, admin, "short", "nlp", 1, 10)
    dispatcher.run_once()
    clock.advance(10)
    dispatcher.run_once()
    assert job(client, admin, a)["status"] == "succeeded"
    with session_factory() as s:  # a lease row nobody ended (e.g. written by hand)
        s.add(LeaseRow(borrower="training", lender="mixed", gpu_type="a100-80g", units=10,
                       job_id=int(a), started_at=clock(),
                       expires_at=clock() + timedelta(seconds=1800), state="active"))
        s.commit()
    assert LeaseReaper(dispatcher).close_orphans() == 1
    with session_factory() as s:
        (row,) = s.scalars(select(LeaseRow))
        assert row.state == "returned" and row.ended_at is not None

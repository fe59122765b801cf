"""The dispatcher against real PostgreSQL and the simulated cluster.

Time is a manual clock shared by the dispatcher and the cluster, so a job
"runs" exactly as long as the test says; no test waits on the wall clock.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from app.clock import to_epoch
from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import ADVISORY_LOCK_KEY, Dispatcher
from app.scheduling.model import (
    Admission,
    CycleResult,
    LeaseGrant,
    Preemption,
    ReplicaPlacement,
)
from app.simulate import all_policies
from app.store.orm import AllocationRow, JobRow, LeaseRow
from tests.integration.conftest import job_body, submit_before_shrink


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _job(client, admin, job_id):
    return client.get(f"/v1/jobs/{job_id}", headers=admin).json()


def _events(client, admin, job_id):
    return [e["type"] for e in client.get(f"/v1/jobs/{job_id}/events", headers=admin).json()]


def _alloc_count(session_factory) -> int:
    with session_factory() as s:
        return s.scalar(select(func.count()).select_from(AllocationRow))


def test_job_runs_pending_admitted_running_succeeded(client, admin, dispatcher, clock, cluster):
    jid = _submit(client, admin)
    clock.advance(3)
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "running"
    assert j["wait_seconds"] == 3.0
    assert j["admitted_at"] is not None and j["started_at"] is not None
    [a] = j["allocations"]
    assert a["gpu_type"] == "a100-80g" and len(a["gpus"]) == 2 and a["units"] == 20.0
    assert a["node"] in {"a100-0", "a100-1"} and a["replica"] == 0
    assert j["units"] == 20.0
    assert cluster.running_job_ids() == {jid}
    clock.advance(99)
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "running"
    clock.advance(1)
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "succeeded" and j["finished_at"] is not None
    assert j["wait_seconds"] == 3.0
    # what it held is still shown, marked as given back
    [held] = j["allocations"]
    assert held["released"] is True and held["gpus"] == a["gpus"] and held["node"] == a["node"]
    assert _events(client, admin, jid) == ["submitted", "admitted", "running", "succeeded"]
    admitted = client.get(f"/v1/jobs/{jid}/events", headers=admin).json()[1]
    assert admitted["data"]["placements"][0]["gpus"] == a["gpus"]
    assert cluster.running_job_ids() == set()


def test_sim_speed_scales_run_time(client, admin, session_factory, clock, cluster):
    cluster.speed = 10
    d = Dispatcher(session_factory, cluster, clock=clock)
    jid = _submit(client, admin)
    d.run_once()
    clock.advance(10)  # 100 s estimate / speed 10
    d.run_once()
    assert _job(client, admin, jid)["status"] == "succeeded"


def test_injected_failure_ends_failed_and_frees_capacity(
    client, admin, dispatcher, clock, cluster, session_factory
):
    jid = _submit(client, admin)
    dispatcher.run_once()
    cluster.fail_job(jid, "CUDA error: out of memory")
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "failed" and "out of memory" in j["reason"]
    assert _alloc_count(session_factory) == 0


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        ({"gpus": 9}, "node"),
        ({"gpus": 1, "min_gpu_memory_gb": 100, "gpu_types": ["a100-80g"]}, "memory"),
    ],
)
def test_job_no_node_could_ever_hold_is_unschedulable(client, admin, dispatcher, resources, words):
    jid = submit_before_shrink(client, admin, job_body(resources=resources))
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "unschedulable"
    assert words in j["reason"]
    assert _events(client, admin, jid)[-1] == "unschedulable"
    # it no longer takes part in cycles
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "unschedulable"


def test_waiting_job_gets_a_reason(client, admin, dispatcher):
    ids = [
        _submit(client, admin, name=f"big{i}", resources={"gpus": 8, "gpu_types": ["v100-16g"]})
        for i in range(3)
    ]
    dispatcher.run_once()
    states = [_job(client, admin, i)["status"] for i in ids]
    assert states == ["running", "running", "pending"]
    waiting = _job(client, admin, ids[2])
    assert waiting["reason"] and waiting["queue_position"] == 1


class Killed(BaseException):
    """Stands for the process dying (not an Exception: nothing catches it)."""


class DiesBeforeBind:
    """A cluster whose first bind kills the dispatcher before the call reaches it."""

    def __init__(self, inner: SimulatedCluster) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def bind(self, req):
        raise Killed()


def test_crash_between_commit_and_bind_neither_loses_nor_doubles_the_job(
    client, admin, session_factory, cluster, clock
):
    jid = _submit(client, admin, resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    with pytest.raises(Killed):
        Dispatcher(session_factory, DiesBeforeBind(cluster), clock=clock).run_once()
    # the decision is committed, the cluster never heard of it
    j = _job(client, admin, jid)
    assert j["status"] == "admitted" and len(j["allocations"]) == 1
    assert cluster.running_job_ids() == set()
    # a new dispatcher process starts and reconciles
    restarted = Dispatcher(session_factory, cluster, clock=clock)
    restarted.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "running"
    assert cluster.bind_calls[jid] == 1
    assert _alloc_count(session_factory) == 1
    # the capacity it holds is not handed out again
    other = _submit(client, admin, name="other", resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    restarted.run_once()
    restarted.run_once()
    assert _job(client, admin, other)["status"] == "pending"
    assert cluster.bind_calls[jid] == 1 and cluster.running_job_ids() == {jid}
    assert _events(client, admin, jid) == ["submitted", "admitted", "running"]


def test_cancel_running_job_stops_pods_and_frees(
    client, admin, dispatcher, cluster, session_factory
):
    jid = _submit(client, admin)
    dispatcher.run_once()
    r = client.post(f"/v1/jobs/{jid}/cancel", headers=admin)
    assert r.json()["status"] == "cancelled" and r.json()["allocations"] == []
    # the row stays, releasing, until the dispatcher has stopped the pods
    assert _alloc_count(session_factory) == 1
    dispatcher.run_once()
    assert cluster.stop_calls[jid] == 1 and cluster.running_job_ids() == set()
    assert _alloc_count(session_factory) == 0
    assert _job(client, admin, jid)["status"] == "cancelled"


def test_a_run_that_reaches_its_time_limit_is_stopped_and_the_job_fails(
    client, admin, dispatcher, clock, cluster, session_factory
):
    """A job with ``time_limit_s`` 30 whose run would take 60 s (the simulated cluster's
    default, no estimate given): at 30 s the dispatcher stops it and the job ends
    ``failed`` with reason ``time limit``, not retried although its failure policy
    restarts; what it held is released once the Pods are gone, and the next job gets it."""
    jid = _submit(client, admin, duration_estimate_s=None, time_limit_s=30,
                  resources={"gpus": 8, "gpu_types": ["a100-80g"]},
                  failure_policy={"action": "restart", "max_restarts": 3})
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "running"
    # the team's quota (150 CU) holds one 8-card job at a time: the next one waits for it
    nxt = _submit(client, admin, name="next", resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    dispatcher.run_once()
    clock.advance(29)
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "running"
    assert _job(client, admin, nxt)["status"] == "pending"
    clock.advance(1)
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "failed", j
    assert j["reason"] == "time limit: stopped after running 30 s (time_limit_s)"
    assert cluster.stop_calls[jid] == 1 and jid not in cluster.running_job_ids()
    assert _events(client, admin, jid)[-1] == "failed"
    dispatcher.run_once()
    assert _job(client, admin, nxt)["status"] == "running"
    clock.advance(3600)
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "failed"  # never run again


def test_a_time_limit_is_stored_with_the_spec(client, admin):
    r = client.post("/v1/jobs", json=job_body(duration_estimate_s=600, time_limit_s=300),
                    headers=admin)
    assert r.status_code == 201 and r.json()["spec"]["time_limit_s"] == 300, r.text
    r = client.post("/v1/jobs", json=job_body(name="b", time_limit_s=0), headers=admin)
    assert r.status_code == 422 and "time_limit_s" in str(r.json()["detail"]), r.text


def test_failed_bind_is_undone_and_retried(client, admin, dispatcher, cluster, session_factory):
    jid = _submit(client, admin)
    cluster.fail_bind(jid, "node refused")
    dispatcher.run_once()
    j = _job(client, admin, jid)
    assert j["status"] == "pending" and "node refused" in j["reason"]
    assert _alloc_count(session_factory) == 0
    dispatcher.run_once()  # held out of the plan (backoff): no second try yet
    assert _job(client, admin, jid)["status"] == "pending"
    dispatcher.binder.holds.clock = lambda: time.monotonic() + 3600  # the hold is over
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "running"
    assert _events(client, admin, jid) == [
        "submitted",
        "admitted",
        "bind_failed",
        "admitted",
        "running",
    ]


def test_running_job_whose_pods_vanished_is_requeued(
    client, admin, session_factory, dispatcher, clock, cluster
):
    jid = _submit(client, admin)
    dispatcher.run_once()
    fresh = SimulatedCluster(nodes=cluster.nodes, clock=clock)  # e.g. serve restarted
    d2 = Dispatcher(session_factory, fresh, clock=clock)
    d2.run_once()
    j = _job(client, admin, jid)
    assert "requeued" in _events(client, admin, jid)
    assert j["status"] == "running"  # requeued and placed again in the same pass
    assert fresh.running_job_ids() == {jid}


def test_only_the_lock_holder_dispatches(client, admin, dispatcher, engine):
    jid = _submit(client, admin)
    with engine.connect() as other:
        assert other.scalar(text(f"SELECT pg_try_advisory_lock({ADVISORY_LOCK_KEY})"))
        dispatcher.run_once()
        assert _job(client, admin, jid)["status"] == "pending"
        other.execute(text(f"SELECT pg_advisory_unlock({ADVISORY_LOCK_KEY})"))
    dispatcher.run_once()
    assert _job(client, admin, jid)["status"] == "running"


class Scripted:
    """A policy that returns prepared decisions, to check that every field of
    CycleResult is persisted (the real core is tested on its own)."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, snap):
        self.last_snapshot = snap
        return self.results.pop(0)(snap) if self.results else CycleResult()


@pytest.fixture
def scripted(monkeypatch):
    policy = Scripted()
    monkeypatch.setitem(all_policies.POLICIES, "scripted", policy)
    return policy


def test_every_cycle_result_field_is_persisted(
    client, admin, session_factory, cluster, clock, scripted
):
    d = Dispatcher(session_factory, cluster, clock=clock, policy="scripted")
    a = _submit(client, admin, name="borrower", priority="P2")
    clock.advance(10)
    t_admit = clock()
    scripted.results.append(
        lambda snap: CycleResult(
            admissions=[
                Admission(
                    job_id=a,
                    placements=(
                        ReplicaPlacement(
                            replica=0,
                            node="a100-0",
                            gpu_type="a100-80g",
                            devices=(0,),
                            mig=((0, 1, "2g.20gb"),),
                            units=2.857,
                            cpu=4,
                            memory_gb=32,
                        ),
                    ),
                    leases=(LeaseGrant("training", "mixed", "a100-80g", 2.857, snap.now + 1800),),
                )
            ],
            order=[a],
        )
    )
    d.run_once()
    with session_factory() as s:
        [alloc] = s.scalars(select(AllocationRow)).all()
        assert (alloc.node, alloc.mig, alloc.cpu, alloc.memory_gb, alloc.pool) == (
            "a100-0",
            [[0, 1, "2g.20gb"]],
            4,
            32,
            "training",
        )
        [lease] = s.scalars(select(LeaseRow)).all()
        assert lease.state == "active" and lease.started_at == t_admit
        assert lease.expires_at == t_admit + timedelta(seconds=1800)
    j = _job(client, admin, a)
    assert j["allocations"][0]["mig"] == [[0, 1, "2g.20gb"]]
    assert j["lease"]["state"] == "active" and j["lease"]["borrower"] == "training"

    # the snapshot of the next cycle shows the running job with placements and lease
    b = _submit(client, admin, name="owner", team="research", priority="P1")
    c = _submit(client, admin, name="waiter", team="research")
    n = _submit(client, admin, name="never", team="research")
    clock.advance(20)
    scripted.results.append(
        lambda snap: CycleResult(
            preemptions=[Preemption(a, "lease expired", by_job=b, kind="reclaim")],
            admissions=[
                Admission(b, (ReplicaPlacement(0, "a100-1", "a100-80g", (0, 1), units=20),))
            ],
            reasons={c: "team research at quota"},
            unschedulable={n: "needs 99 GPUs"},
            order=[c, b],
        )
    )
    d.run_once()
    snap = scripted.last_snapshot
    [running] = snap.running
    assert running.request.id == a and running.placements[0].mig == ((0, 1, "2g.20gb"),)
    assert running.leases[0].lender == "mixed" and running.started_at == to_epoch(t_admit)
    assert snap.now == to_epoch(clock())

    ja = _job(client, admin, a)
    assert ja["status"] == "pending" and ja["preemption_count"] == 1
    assert ja["submitted_at"] == client.get(f"/v1/jobs/{a}/events", headers=admin).json()[0]["at"]
    assert ja["allocations"] == [] and ja["lease"]["state"] == "reclaimed"
    ev = client.get(f"/v1/jobs/{a}/events", headers=admin).json()[-1]
    assert ev["type"] == "reclaimed" and ev["data"]["by_job"] == b
    assert "lease expired" in ev["reason"] and b in ev["reason"]
    assert cluster.stop_calls[a] == 1
    assert _job(client, admin, b)["status"] == "running"
    jc = _job(client, admin, c)
    assert jc["reason"] == "team research at quota" and jc["queue_position"] == 1
    assert _job(client, admin, n)["status"] == "unschedulable"
    queue = client.get("/v1/queue", headers=admin).json()
    assert [q["id"] for q in queue][:1] == [c]

    # wait_seconds counts both pending periods: 10 s before admission, 7 s after requeue
    clock.advance(7)
    assert _job(client, admin, a)["wait_seconds"] == 17.0


def test_finished_job_returns_its_leases(client, admin, session_factory, cluster, clock, scripted):
    d = Dispatcher(session_factory, cluster, clock=clock, policy="scripted")
    a = _submit(client, admin)
    scripted.results.append(
        lambda snap: CycleResult(
            admissions=[
                Admission(
                    a,
                    (ReplicaPlacement(0, "a100-1", "a100-80g", (3,), units=10),),
                    leases=(LeaseGrant("training", "mixed", "a100-80g", 10, snap.now + 60),),
                )
            ]
        )
    )
    d.run_once()
    clock.advance(100)
    d.run_once()
    j = _job(client, admin, a)
    assert j["status"] == "succeeded" and j["lease"]["state"] == "returned"


def test_cycle_skips_job_cancelled_after_the_snapshot(
    client, admin, session_factory, cluster, clock, scripted
):
    d = Dispatcher(session_factory, cluster, clock=clock, policy="scripted")
    a = _submit(client, admin)

    def cancel_then_admit(snap):
        client.post(f"/v1/jobs/{a}/cancel", headers=admin)  # races the cycle
        return CycleResult(
            admissions=[Admission(a, (ReplicaPlacement(0, "a100-1", "a100-80g", (0,), units=10),))]
        )

    scripted.results.append(cancel_then_admit)
    d.run_once()
    assert _job(client, admin, a)["status"] == "cancelled"
    assert _alloc_count(session_factory) == 0 and cluster.running_job_ids() == set()


def test_revision_grows_with_every_change(client, admin, dispatcher, session_factory, clock):
    jid = _submit(client, admin)
    with session_factory() as s:
        r0 = s.get(JobRow, int(jid)).revision
    dispatcher.run_once()
    with session_factory() as s:
        r1 = s.get(JobRow, int(jid)).revision
    clock.advance(100)
    dispatcher.run_once()
    with session_factory() as s:
        r2 = s.get(JobRow, int(jid)).revision
    assert r0 < r1 < r2

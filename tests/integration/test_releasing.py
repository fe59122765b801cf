"""A stopped job's capacity is released only when its pods are gone (simulated
cluster, real PostgreSQL, manual clock).

``SimulatedCluster.stop_delay_s`` keeps a stopped job's pods on their devices
for a while, like evicted Pods in their grace period; the simulated cluster
refuses a bind onto a device such a pod still holds, so a premature release
would show up as a ``bind_failed`` event.
"""

from __future__ import annotations

from sqlalchemy import select

from app.dispatch.dispatcher import Dispatcher
from app.dispatch.metrics_loop import MetricsLoop
from app.dispatch.picture import QueuePicture
from app.metrics import GpuqMetrics
from app.scheduling.model import Admission, CycleResult, Preemption
from app.store.orm import AllocationRow
from app.store.releasing_rows import releasing_units
from app.store.snapshot import build_snapshot
from tests.integration.conftest import job_body

A100 = {"gpu_types": ["a100-80g"]}


class Killed(BaseException):
    """Stands for the process dying (not an Exception: nothing catches it)."""


class DiesAtStop:
    """A cluster whose stop kills the dispatcher before (or just after) the call."""

    def __init__(self, inner, *, after: bool = False) -> None:
        self.inner = inner
        self.after = after

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stop(self, job_id, reason, grace_seconds=30.0):
        if self.after:
            self.inner.stop(job_id, reason, grace_seconds)
        raise Killed()


def _submit(client, admin, name, gpus=8, **kw) -> str:
    body = job_body(name=name, resources={"gpus": gpus, **A100}, duration_estimate_s=10_000, **kw)
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _job(client, admin, jid):
    return client.get(f"/v1/jobs/{jid}", headers=admin).json()


def _types(client, admin, jid):
    return [e["type"] for e in client.get(f"/v1/jobs/{jid}/events", headers=admin).json()]


def _rows(session_factory) -> list[tuple[str, str, tuple, bool]]:
    with session_factory() as s:
        return sorted(
            (str(r.job_id), r.node, tuple(r.devices), r.releasing_since is not None)
            for r in s.scalars(select(AllocationRow))
        )


def _preempt_for(victim: str, winner: str):
    """A cycle that preempts ``victim`` and admits ``winner`` onto its exact cards."""

    def decide(snap):
        (held,) = [j for j in snap.running if j.request.id == victim]
        return CycleResult(
            preemptions=[Preemption(victim, "test", by_job=winner)],
            admissions=[Admission(winner, held.placements)],
        )

    return decide


def test_cancelled_job_keeps_its_gpus_until_its_pods_stop(
    client, admin, dispatcher, cluster, clock, session_factory
):
    cluster.stop_delay_s = 30
    a = _submit(client, admin, "first")
    dispatcher.run_once()
    assert _job(client, admin, a)["status"] == "running"
    node = _job(client, admin, a)["allocations"][0]["node"]
    client.post(f"/v1/jobs/{a}/cancel", headers=admin)
    b = _submit(client, admin, "second")
    # the snapshot counts the releasing cards as used, held by no running job
    with session_factory() as s:
        snap = build_snapshot(s, clock()).snapshot
    assert snap.running == []
    (n,) = [x for x in snap.nodes if x.name == node]
    assert all(d.whole_used for d in n.devices)
    dispatcher.run_once()  # stops the pods; they take 30 s to go
    assert cluster.stop_calls[a] == 1 and a in cluster.draining_job_ids()
    clock.advance(20)
    dispatcher.run_once()
    assert _job(client, admin, b)["status"] == "pending"
    assert [r[3] for r in _rows(session_factory)] == [True]
    # the metrics loop's incremental picture (utilization, gauges) marks the releasing
    # capacity once, as the full snapshot does (it once added its CPU and memory twice)
    loop = MetricsLoop(session_factory, GpuqMetrics(), clock=clock)
    with session_factory() as s:
        full = build_snapshot(s, clock()).snapshot.nodes
    assert [x for x in full if x.name == node][0].cpu_used > 0
    assert loop.snapshot(clock()).nodes == full
    # the cancelled job's GET still shows what it held
    (held,) = _job(client, admin, a)["allocations"]
    assert held["released"] is True and held["node"] == node
    clock.advance(15)  # the pods are gone now
    dispatcher.run_once()
    jb = _job(client, admin, b)
    assert jb["status"] == "running" and jb["allocations"][0]["node"] == node
    assert "bind_failed" not in _types(client, admin, b)
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(b, False)]


def test_preemptor_is_admitted_but_bound_only_after_the_victims_pods_stop(
    client, admin, cluster, clock, session_factory
):
    cluster.stop_delay_s = 30
    d = Dispatcher(session_factory, cluster, clock=clock)
    low = _submit(client, admin, "low", priority="P2")
    d.run_once()
    high = _submit(client, admin, "high", priority="P0")
    d.run_with(_preempt_for(low, high))
    assert _job(client, admin, low)["status"] == "pending"
    assert _job(client, admin, high)["status"] == "admitted"
    assert cluster.bind_calls[high] == 0  # its cards are still held by the victim's pods
    rows = _rows(session_factory)
    assert [(r[0], r[3]) for r in rows] == sorted([(low, True), (high, False)])
    assert rows[0][1:3] == rows[1][1:3]  # the same node and cards
    # the requeued job shows what it still holds; the node shows both, nothing free
    (was,) = _job(client, admin, low)["allocations"]
    assert was["released"] is True and was["node"] == rows[0][1]
    n = client.get(f"/v1/nodes/{rows[0][1]}", headers=admin).json()
    assert sorted((a["job_id"], a["releasing"]) for a in n["allocations"]) == sorted(
        [(low, True), (high, False)]
    )
    assert n["free"]["gpus"] == 0
    with session_factory() as s:
        assert releasing_units(s) == {"a100-80g": 80.0}
    # the full reload (reports) and the dispatcher's picture hold the same capacity
    with session_factory() as s:
        full = build_snapshot(s, clock()).snapshot.nodes
        s.rollback()
    with session_factory() as s:
        assert QueuePicture().refresh(s, clock()).snapshot.nodes == full
    clock.advance(10)
    d.run_once()
    assert cluster.bind_calls[high] == 0 and _job(client, admin, low)["status"] == "pending"
    clock.advance(25)
    d.run_once()  # released, then bound by the reconcile step
    assert cluster.bind_calls[high] == 1
    assert _job(client, admin, high)["status"] == "running"
    assert "bind_failed" not in _types(client, admin, high)
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(high, False)]


def test_synchronous_stop_releases_in_the_same_pass(client, admin, cluster, clock,
                                                    session_factory):
    """stop_delay_s = 0: the stop returns with the pods gone, so the preemptor
    binds in the pass that preempted."""
    d = Dispatcher(session_factory, cluster, clock=clock)
    low = _submit(client, admin, "low", priority="P2")
    d.run_once()
    high = _submit(client, admin, "high", priority="P0")
    d.run_with(_preempt_for(low, high))
    assert _job(client, admin, high)["status"] == "running"
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(high, False)]


def test_crash_between_preemption_and_stop(client, admin, cluster, clock, session_factory):
    """The preemption is committed, the process dies before stopping the pods:
    the capacity stays held; the next process stops them and releases it once."""
    low = _submit(client, admin, "low", priority="P2")
    Dispatcher(session_factory, cluster, clock=clock).run_once()
    high = _submit(client, admin, "high", priority="P0")
    dying = Dispatcher(session_factory, DiesAtStop(cluster), clock=clock)
    try:
        dying.run_with(_preempt_for(low, high))
        raise AssertionError("the dispatcher should have died")
    except Killed:
        pass
    # committed: the victim requeued, its rows releasing; its pods still run
    assert _job(client, admin, low)["status"] == "pending"
    assert cluster.running_job_ids() == {low} and cluster.stop_calls[low] == 0
    assert [(r[0], r[3]) for r in _rows(session_factory)] == sorted([(low, True), (high, False)])
    restarted = Dispatcher(session_factory, cluster, clock=clock)
    restarted.run_once()
    assert cluster.stop_calls[low] == 1
    assert _job(client, admin, high)["status"] == "running" and cluster.bind_calls[high] == 1
    assert "bind_failed" not in _types(client, admin, high)
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(high, False)]
    restarted.run_once()
    assert cluster.stop_calls[low] == 1 and cluster.bind_calls[high] == 1
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(high, False)]


def test_crash_after_stop_before_release(client, admin, cluster, clock, session_factory):
    """The pods were stopped but the process died before releasing: the next
    pass sees the pods gone and releases the rows (no second stop needed)."""
    cluster.stop_delay_s = 30
    a = _submit(client, admin, "first")
    Dispatcher(session_factory, cluster, clock=clock).run_once()
    client.post(f"/v1/jobs/{a}/cancel", headers=admin)
    try:
        Dispatcher(session_factory, DiesAtStop(cluster, after=True), clock=clock).run_once()
        raise AssertionError("the dispatcher should have died")
    except Killed:
        pass
    assert cluster.stop_calls[a] == 1 and a in cluster.draining_job_ids()
    b = _submit(client, admin, "second")
    restarted = Dispatcher(session_factory, cluster, clock=clock)
    restarted.run_once()
    assert _job(client, admin, b)["status"] == "pending"  # pods still stopping
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(a, True)]
    clock.advance(31)
    restarted.run_once()
    assert _job(client, admin, b)["status"] == "running"
    assert "bind_failed" not in _types(client, admin, b)
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(b, False)]


def test_requeued_job_is_not_readmitted_onto_its_own_releasing_cards(
    client, admin, cluster, clock, session_factory
):
    """A preempted job whose pods still stop cannot come back onto those cards."""
    cluster.stop_delay_s = 30
    d = Dispatcher(session_factory, cluster, clock=clock)
    a = _submit(client, admin, "a", priority="P2")
    d.run_once()
    d.run_with(
        lambda snap: CycleResult(preemptions=[Preemption(a, "test")])
    )
    assert _job(client, admin, a)["status"] == "pending"
    clock.advance(5)
    d.run_once()  # the real core: the only 8-card node is held by a's stopping pods
    assert _job(client, admin, a)["status"] == "pending"
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(a, True)]
    clock.advance(30)
    d.run_once()
    assert _job(client, admin, a)["status"] == "running"
    assert [(r[0], r[3]) for r in _rows(session_factory)] == [(a, False)]
    assert "bind_failed" not in _types(client, admin, a)


def test_a_job_requeued_while_its_pods_still_stop_keeps_their_cards(
    client, admin, dispatcher, cluster, clock, session_factory
):
    """A running job whose current Pods the cluster no longer shows is requeued by the
    reconcile step; Pods of the job it still shows (stopping, or of an attempt this
    process does not follow, as after a failover on the real control plane) keep the
    cards until they end. Before, the rows were deleted at once and another job was
    bound onto cards those Pods still held (the long real-control-plane fault run:
    'card held by jobs 13 and 27')."""
    cluster.stop_delay_s = 30
    a = _submit(client, admin, "first")
    dispatcher.run_once()
    assert _job(client, admin, a)["status"] == "running"
    node = _job(client, admin, a)["allocations"][0]["node"]
    cluster.stop(a, "stopped by someone else", 30)  # its Pods stop; gpuq was not told
    b = _submit(client, admin, "second", priority="P0")
    dispatcher.run_once()
    assert _job(client, admin, a)["status"] == "pending"
    assert [(r[0], r[1], r[3]) for r in _rows(session_factory)] == [(a, node, True)]
    clock.advance(20)
    dispatcher.run_once()  # the Pods still stop: nobody is bound onto their cards
    assert "bind_failed" not in _types(client, admin, a) + _types(client, admin, b)
    assert all(_job(client, admin, j)["status"] != "running" for j in (a, b))
    clock.advance(15)  # gone now
    dispatcher.run_once()
    dispatcher.run_once()
    assert _job(client, admin, b)["status"] == "running"
    assert "bind_failed" not in _types(client, admin, a) + _types(client, admin, b)

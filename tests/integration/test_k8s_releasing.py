"""Capacity of a stopped job is released only when its Pods are gone (Kubernetes).

The fake API server honours grace periods here: an eviction only marks the
Pod terminating, as a kubelet draining it would; the test decides when the
grace period is over. Until then no other job may be bound onto the cards
the terminating Pods hold (real PostgreSQL, the real dispatcher and core).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import func, select

from app.api.schemas import job_out
from app.clock import ManualClock
from app.cluster import k8s_labels as L
from app.cluster.interface import BindRequest
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.scheduling.model import Admission, CycleResult, Preemption, ReplicaPlacement
from app.store.jobs import cancel_job, released_placements, submit_job
from app.store.orm import AllocationRow, JobEventRow, JobRow
from tests.fakekube.fixtures import make_cluster, started_cluster, wait_until
from tests.fakekube.objects import article_a100

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g], guaranteed: {a100-80g: 80}}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
"""


@pytest.fixture
def env(kube, db_url, sf):  # noqa: F811
    """One A100 node (8 cards), a dispatcher on a manual clock, grace 30 s."""
    kube.honour_grace = True
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    clock = ManualClock()
    d = Dispatcher(sf, c, clock=clock, grace_seconds=30)
    try:
        yield sf, c, d, clock
    finally:
        c.close()


def _submit(sf, clock, name: str, priority: str = "P1") -> int:
    with sf() as s:
        spec = JobSpec.model_validate({
            "name": name, "team": "nlp", "priority": priority,
            "resources": {"gpus": 8, "gpu_types": ["a100-80g"], "cpu": 4, "memory_gb": 16},
        })
        job_id = submit_job(s, spec, now=clock()).job.id
        s.commit()
    return job_id


def _status(sf, job_id: int) -> str:
    with sf() as s:
        return s.get(JobRow, job_id).status


def _pods_of(kube, job_id: int) -> list[dict]:  # noqa: F811
    return [p for p in kube.gpuq_pods() if L.job_id_of(p) == str(job_id)]


def _rows(sf) -> list[tuple[int, bool]]:
    with sf() as s:
        return sorted(
            (r.job_id, r.releasing_since is not None) for r in s.scalars(select(AllocationRow))
        )


def _start_running(kube, sf, d, job_id):  # noqa: F811
    d.run_once()
    pods = _pods_of(kube, job_id)
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == "a100-0"
    kube.set_pod_phase("gpuq-jobs", pods[0]["metadata"]["name"], "Running")
    wait_until(lambda: d.run_once() or _status(sf, job_id) == "running")


def test_cancelled_job_holds_its_gpus_until_its_pod_is_deleted(kube, env):  # noqa: F811
    sf, c, d, clock = env
    a = _submit(sf, clock, "first")
    _start_running(kube, sf, d, a)
    with sf() as s:
        cancel_job(s, s.get(JobRow, a), now=clock(), by="test")
        s.commit()
    b = _submit(sf, clock, "second")
    d.run_once()  # reconcile evicts the cancelled job's Pod, with the grace period
    (pod,) = _pods_of(kube, a)
    assert pod["metadata"].get("deletionTimestamp")
    assert [g for (_, _, g) in kube.evictions] == [30]
    wait_until(lambda: str(a) in c.draining_job_ids())
    for _ in range(3):
        d.run_once()
        clock.advance(5)
    # the terminating Pod still holds all 8 cards: nothing else is bound there
    assert _status(sf, b) == "pending" and _pods_of(kube, b) == []
    assert _rows(sf) == [(a, True)]
    # the job's GET still shows what it held (released: true)

    with sf() as s:
        job = s.get(JobRow, a)
        out = job_out(job, clock(), None, released_placements(s, job))
    assert [(x.node, x.released) for x in out.allocations] == [("a100-0", True)]

    kube.finish_terminating()  # the kubelet is done: the Pod is deleted
    wait_until(lambda: str(a) not in c.draining_job_ids())
    d.run_once()
    assert _status(sf, b) == "admitted"
    (pb,) = _pods_of(kube, b)
    assert pb["spec"]["nodeName"] == "a100-0"
    assert _rows(sf) == [(b, False)]


def test_preemptor_waits_for_the_victims_pod_then_binds(kube, env):  # noqa: F811
    sf, c, d, clock = env
    low = _submit(sf, clock, "low", priority="P2")
    _start_running(kube, sf, d, low)
    clock.advance(600)  # past the minimum run time before a job may be preempted
    high = _submit(sf, clock, "high", priority="P0")
    d.run_once()
    # the core preempted the P2 job for the P0 one and admitted it onto those cards...
    assert _status(sf, low) == "pending" and _status(sf, high) == "admitted"
    assert _rows(sf) == sorted([(low, True), (high, False)])
    # ...but it is not bound while the victim's Pod terminates
    (victim,) = _pods_of(kube, low)
    assert victim["metadata"].get("deletionTimestamp")
    assert _pods_of(kube, high) == []
    wait_until(lambda: str(low) in c.draining_job_ids())
    for _ in range(3):
        d.run_once()
        clock.advance(5)
    assert _pods_of(kube, high) == [] and _status(sf, high) == "admitted"
    assert _status(sf, low) == "pending"  # not re-admitted onto the held cards
    with sf() as s:
        preemptions = s.scalar(
            select(func.count()).select_from(JobEventRow).where(JobEventRow.type == "preempted")
        )
    assert preemptions == 1  # the held capacity caused no further preemption

    kube.finish_terminating()
    wait_until(lambda: str(low) not in c.draining_job_ids())
    d.run_once()
    (pod,) = _pods_of(kube, high)
    assert pod["spec"]["nodeName"] == "a100-0"
    assert _rows(sf) == [(high, False)]
    assert not pod["metadata"].get("deletionTimestamp")


class _Killed(BaseException):
    """Stands for the process dying (not an Exception: nothing catches it)."""


class _DiesAtStop:
    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stop(self, job_id, reason, grace_seconds=30.0):
        raise _Killed()


def test_crash_after_a_move_before_the_old_pods_stop(kube, db_url, sf):  # noqa: F811
    """The descheduler moved a job (preempted and admitted anew elsewhere in one
    cycle), and the process died before stopping the old Pods. The next leader
    must not adopt them as the job's current attempt: it evicts them (grace
    period), binds the new placement, and keeps the old cards held until the
    old Pods are deleted."""

    kube.honour_grace = True
    kube.add_node(article_a100("a100-0"))
    kube.add_node(article_a100("a100-1"))
    clock = ManualClock()
    c1 = started_cluster(kube, sf)
    c2 = None
    try:
        d1 = Dispatcher(sf, c1, clock=clock, grace_seconds=30)
        j = _submit(sf, clock, "moved")
        d1.run_once()
        (old,) = _pods_of(kube, j)
        src = old["spec"]["nodeName"]
        dst = "a100-1" if src == "a100-0" else "a100-0"
        kube.set_pod_phase("gpuq-jobs", old["metadata"]["name"], "Running")
        wait_until(lambda: d1.run_once() or _status(sf, j) == "running")

        def move(snap):
            (held,) = [r for r in snap.running if r.request.id == str(j)]
            there = tuple(replace(p, node=dst) for p in held.placements)
            return CycleResult(
                preemptions=[Preemption(str(j), "defragment")],
                admissions=[Admission(str(j), there)],
            )

        dying = Dispatcher(sf, _DiesAtStop(c1), clock=clock, grace_seconds=30)
        with pytest.raises(_Killed):
            dying.run_with(move)
        c1.close()
        with sf() as s:
            rows = sorted((r.node, r.releasing_since is not None)
                          for r in s.scalars(select(AllocationRow)))
        assert rows == sorted([(src, True), (dst, False)])

        c2 = started_cluster(kube, sf)
        d2 = Dispatcher(sf, c2, clock=clock, grace_seconds=30)
        d2.run_once()
        # the old Pod is evicted with the grace period, the new placement bound
        assert (old["metadata"]["name"], 30) in [(n, g) for (_, n, g) in kube.evictions]
        by_node = {p["spec"]["nodeName"]: p for p in _pods_of(kube, j)}
        assert set(by_node) == {src, dst}
        assert by_node[src]["metadata"].get("deletionTimestamp")
        assert not by_node[dst]["metadata"].get("deletionTimestamp")
        # the old Pod's "running" (reported when the new leader's watch found it) does not
        # count for the new admission: the job was not requeued as lost
        with sf() as s:
            types = [e.type for e in s.scalars(select(JobEventRow).where(
                JobEventRow.job_id == j).order_by(JobEventRow.id))]
        assert types[types.index("preempted"):] == ["preempted", "admitted"], types
        # the old cards stay held while the old Pod terminates
        other = _submit(sf, clock, "other")
        wait_until(lambda: str(j) in c2.draining_job_ids())
        d2.run_once()
        assert _status(sf, other) == "pending" and _pods_of(kube, other) == []
        kube.finish_terminating()
        wait_until(lambda: str(j) not in c2.draining_job_ids())
        d2.run_once()
        (po,) = _pods_of(kube, other)
        assert po["spec"]["nodeName"] == src
        with sf() as s:
            rows = sorted((r.job_id, r.node, r.releasing_since is not None)
                          for r in s.scalars(select(AllocationRow)))
        assert rows == sorted([(j, dst, False), (other, src, False)])
    finally:
        c1.close()
        if c2 is not None:
            c2.close()


def test_a_stop_before_the_watch_shows_the_pods_still_counts_as_draining(kube):  # noqa: F811
    """Stopped in the instant between bind and the watch: the cache has no Pod
    yet, but the server does; the capacity is not released until the watch
    shows the Pod deleted."""

    kube.honour_grace = True
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube)  # informers driven by hand: the Pod watch lags
    try:
        c.nodes.step()
        place = ReplicaPlacement(0, "a100-0", "a100-80g", (0, 1), units=20, cpu=1, memory_gb=1)
        c.bind(BindRequest("7", "j", "nlp", "training", "P1", [place]))
        assert "7" in c.live_job_ids() and "7" not in c.draining_job_ids()
        c.stop("7", "cancelled", 30)
        assert kube.terminating()  # evicted on the server, found by a direct list
        assert "7" in c.draining_job_ids() and "7" not in c.live_job_ids()
        c.pods.step()  # the watch catches up: a terminating Pod
        assert "7" in c.draining_job_ids()
        kube.finish_terminating()
        wait_until(lambda: c.pods.step() or "7" not in c.draining_job_ids())
        assert "7" not in c.running_job_ids()
    finally:
        c.close()

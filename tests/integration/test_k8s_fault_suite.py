"""Leader kills with two dispatcher replicas on the fake Kubernetes API server,
a fake kubelet running and finishing the Pods (issue 12, fault suite), and the same
on the real control plane (tests/realkube: kwok's kubelets, the real apiserver's
graceful deletion and eviction).

The leader is killed repeatedly (its database session is terminated, which
frees the leader lock, and its process -- cluster watch included -- is gone);
a new replica takes its place. After each kill the invariants hold, and at
the end every job has run exactly to its end: nothing stuck ``running`` with
finished Pods, nothing run twice at once, no card double-booked.
"""

from __future__ import annotations

import random
import time
import uuid

import psycopg
import pytest
from sqlalchemy import select

from gpuq.clock import utcnow
from gpuq.dispatch.dispatcher import Dispatcher
from gpuq.dispatch.leader import libpq_dsn
from gpuq.domain.spec import JobSpec
from gpuq.domain.states import TERMINAL
from gpuq.store.jobs import submit_job
from gpuq.store.node_rows import gpu_type_configs
from gpuq.store.orm import JobRow
from tests.fakekube.fixtures import elector, make_cluster, started_cluster
from tests.fakekube.objects import article_a100
from tests.fakekube.server import FakeKube
from tests.invariants import check_cluster, check_database
from tests.realkube.both import BOTH, kube
from tests.realkube.fixtures import FinishingKubelet, KubeletThread

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g], guaranteed: {a100-80g: 160}}
teams:
  - {name: nlp, pool: training, quota_units: 120}
  - {name: cv, pool: training, quota_units: 120}
"""


class FakeKubelet(KubeletThread):
    """Runs bound Pods (Pending -> Running), finishes them after ``run_s``
    (Running -> Succeeded) and ends grace periods, on its own thread."""

    period_s = 0.05

    def step(self, now: float) -> None:
        self.kube.finish_terminating()
        for pod in self.kube.gpuq_pods():
            meta, phase = pod["metadata"], pod["status"].get("phase")
            if not pod["spec"].get("nodeName") or meta.get("deletionTimestamp"):
                continue
            name = meta["name"]
            try:
                if phase == "Pending":
                    self.kube.set_pod_phase(meta["namespace"], name, "Running")
                    self.started[name] = now
                elif phase == "Running" and now - self.started.get(name, now) > self.run_s:
                    self.kube.set_pod_phase(meta["namespace"], name, "Succeeded")
            except KeyError:
                pass  # deleted meanwhile


def _pods_by_job(kube: FakeKube) -> dict[str, set]:
    """Job -> bind attempts whose Pods hold resources (not finished, not terminating)."""
    out: dict[str, set] = {}
    for p in kube.gpuq_pods():
        if p["metadata"].get("deletionTimestamp"):
            continue
        if p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        labels = p["metadata"]["labels"]
        out.setdefault(labels["gpuq.io/job-id"], set()).add(labels["gpuq.io/bind-id"])
    return out


@BOTH
def test_leader_kills_keep_every_invariant(kube, db_url, sf):  # noqa: F811
    rng = random.Random(12)
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}"))
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"

    def replica() -> tuple[Dispatcher, object]:
        c = started_cluster(kube, sf)
        return Dispatcher(sf, c, elector=elector(db_url, lock), grace_seconds=1), c

    replicas = [replica(), replica()]
    accepted: list[str] = []
    kills = 0
    try:
        kubelet = FakeKubelet(kube) if isinstance(kube, FakeKube) else FinishingKubelet(kube)
        with kubelet:
            with sf() as s:
                for i in range(24):
                    spec = JobSpec.model_validate({
                        "name": f"k{i}", "team": rng.choice(["nlp", "cv"]),
                        "priority": rng.choice(["P1", "P2"]),
                        "resources": {"gpus": rng.choice([1, 2, 4, 8]),
                                      "gpu_types": ["a100-80g"]},
                    })
                    accepted.append(str(submit_job(s, spec, now=utcnow()).job.id))
                    s.commit()
            deadline = time.monotonic() + 90
            rounds = 0
            while time.monotonic() < deadline:
                rounds += 1
                kill_now = rounds % 6 == 0 and kills < 6
                order = list(range(len(replicas)))
                rng.shuffle(order)
                for i in order:
                    d, c = replicas[i]
                    if kill_now and d.elector.is_leader:
                        # the leader dies (at whatever point the standby had reached):
                        # its session and lock go, and its process with its watch
                        with psycopg.connect(libpq_dsn(db_url), autocommit=True) as conn:
                            conn.execute("SELECT pg_terminate_backend(%s, 10000)",
                                         (d.elector.backend_pid,))
                        c.close()
                        replicas[i] = replica()
                        kills += 1
                        continue
                    d.run_once()
                found = check_database(sf, accepted)
                assert not found, found
                with sf() as s:
                    left = s.scalar(select(JobRow.id).where(JobRow.status.not_in(TERMINAL))
                                    .limit(1))
                if left is None and kills >= 6:
                    break
                time.sleep(0.05)
            # one more pass of the leader so stopped Pods are judged, then the cluster
            for d, _c in replicas:
                d.run_once()
            found = check_database(sf, accepted) + check_cluster(sf, _pods_by_job(kube))
            assert not found, found
            with sf() as s:
                statuses = {str(j.id): j.status for j in s.scalars(select(JobRow))}
            assert kills >= 6
            assert set(statuses.values()) == {"succeeded"}, statuses
    finally:
        for d, c in replicas:
            d.elector.release()
            c.close()


def _fenced_replica(kube: FakeKube, sf, db_url: str, lock: str) -> tuple[Dispatcher, object]:
    """A dispatcher replica whose API calls give up after 0.5 s (hangs are injected)."""
    with sf() as s:
        types = gpu_type_configs(s)
    c = make_cluster(kube, request_timeout_s=0.5, watch_idle_timeout_s=1.0)
    c.set_gpu_types(types)
    c.start(wait_s=10)
    return Dispatcher(sf, c, elector=elector(db_url, lock), grace_seconds=1), c


SEQUENCES = ("disruption", "pressure", "hang", "gone", "deposed")


@pytest.mark.parametrize(("repeats", "jobs"), [
    (1, 24), pytest.param(4, 60, marks=pytest.mark.long_faults, id="long")])
def test_kubernetes_fault_sequences_keep_every_invariant(db_url, sf, repeats, jobs):
    """The real control plane's sequences, injected where the fake can do them on
    demand, one kind after another while 24 jobs run: a graceful deletion with
    DisruptionTarget (drain, taint manager: requeued, no retry spent), a node-pressure
    eviction (Failed/Evicted), an apiserver that stops answering creates and deletes
    for a few passes, history compacted under the watches (410 Gone, relist), and a
    deposed leader performing the plan it committed before its session died. After
    each: no job lost, none with two Pod sets, no card double-booked; at the end every
    job succeeded and no finished job holds capacity. The long variant (``-m
    long_faults``) runs each kind 4 times over 60 jobs."""
    rng = random.Random(23)
    kube = FakeKube(watch_timeout_s=2)
    kube.start()
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}"))
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"
    replicas = [_fenced_replica(kube, sf, db_url, lock) for _ in range(2)]
    accepted: list[str] = []
    done: dict[str, int] = dict.fromkeys(SEQUENCES, 0)
    disrupted: set[str] = set()  # jobs whose Pod the test took away: rightly requeued
    try:
        with FakeKubelet(kube, run_s=0.6) as _kubelet:
            with sf() as s:
                for i in range(jobs):
                    spec = JobSpec.model_validate({
                        "name": f"f{i}", "team": rng.choice(["nlp", "cv"]),
                        "priority": rng.choice(["P1", "P2"]),
                        "resources": {"gpus": rng.choice([1, 2, 4, 8]),
                                      "gpu_types": ["a100-80g"]}})
                    accepted.append(str(submit_job(s, spec, now=utcnow()).job.id))
                    s.commit()
            deadline = time.monotonic() + 150 * repeats
            rounds, hang_left, step = 0, 0, 0
            while time.monotonic() < deadline:
                rounds += 1
                if hang_left and not (hang_left := hang_left - 1):
                    kube.unhang()
                if rounds % 4 == 0 and step < len(SEQUENCES) * repeats:
                    # the next kind in turn; one that finds nothing to act on (no Pod
                    # running yet) is tried again on the next fault round
                    kind = SEQUENCES[step % len(SEQUENCES)]
                    before = done[kind]
                    running = [p for p in kube.gpuq_pods()
                               if p["status"].get("phase") == "Running"
                               and not p["metadata"].get("deletionTimestamp")]
                    if kind in ("disruption", "pressure") and running:
                        meta = rng.choice(running)["metadata"]
                        disrupted.add(meta["labels"]["gpuq.io/job-id"])
                        if kind == "disruption":
                            kube.disrupt(meta["namespace"], meta["name"],
                                         rng.choice(["EvictionByEvictionAPI",
                                                     "DeletionByTaintManager"]))
                        else:
                            kube.evict_for_pressure(meta["namespace"], meta["name"])
                        done[kind] += 1
                    elif kind == "hang":
                        kube.hang(r"^(POST|DELETE) ")
                        hang_left = 3
                        done[kind] += 1
                    elif kind == "gone":
                        kube.compact()
                        done[kind] += 1
                    elif kind == "deposed":
                        i = next((k for k, (d, _c) in enumerate(replicas)
                                  if d.elector.is_leader), None)
                        if i is not None:
                            d, c = replicas[i]
                            d.sync_cluster()
                            plan = d.reconcile()
                            plan.extend(d.plan_and_commit())
                            with psycopg.connect(libpq_dsn(db_url), autocommit=True) as conn:
                                conn.execute("SELECT pg_terminate_backend(%s, 10000)",
                                             (d.elector.backend_pid,))
                            replicas[1 - i][0].run_once()  # the standby leads
                            d.perform(plan)  # the deposed one carries on: fenced
                            c.close()
                            replicas[i] = _fenced_replica(kube, sf, db_url, lock)
                            done[kind] += 1
                    step += done[kind] > before
                for d, _c in replicas:
                    d.run_once()
                found = check_database(sf, accepted, disrupted) + [
                    f"job {j} runs {len(a)} sets of Pods" for j, a in _pods_by_job(kube).items()
                    if len(a) > 1]
                assert not found, (rounds, found)
                with sf() as s:
                    left = s.scalar(select(JobRow.id).where(JobRow.status.not_in(TERMINAL))
                                    .limit(1))
                if left is None:
                    if min(done.values()) >= repeats:
                        break
                    with sf() as s:  # faults still to inject: keep work on the cluster
                        spec = JobSpec.model_validate({
                            "name": f"more{rounds}", "team": "nlp",
                            "resources": {"gpus": 8, "gpu_types": ["a100-80g"]}})
                        accepted.append(str(submit_job(s, spec, now=utcnow()).job.id))
                        s.commit()
                time.sleep(0.05)
            kube.unhang()
            for d, _c in replicas:
                d.run_once()
            found = check_database(sf, accepted, disrupted) + check_cluster(
                sf, _pods_by_job(kube))
            assert not found, found
            with sf() as s:
                statuses = {str(j.id): j.status for j in s.scalars(select(JobRow))}
            print(f"kubernetes fault sequences: {done} in {rounds} rounds, "
                  f"{len(accepted)} jobs, 0 violations")
            assert min(done.values()) >= repeats, done
            assert set(statuses.values()) == {"succeeded"}, statuses
    finally:
        kube.unhang()
        for d, c in replicas:
            d.elector.release()
            c.close()
        kube.stop()

"""The Kubernetes backend's fault suite: two dispatcher replicas on one leader lock while
a kubelet runs and finishes the Pods, on the fake API server and on the real control plane
(tests/realkube: kube-apiserver, etcd, kube-controller-manager, kwok's kubelets).

* Leader kills: the leader's database session is terminated (which frees the lock) and its
  process -- cluster watch included -- is gone; a new replica takes its place.
* Kubernetes sequences, one kind after another: disruptions, evictions, plain deletes, node
  loss, hung and slow apiserver answers, 410s (compaction, the watch cache's window), a
  deposed leader; the real control plane produces those it can on demand.

After each pass the invariants hold (tests/invariants.py, and no card held by two jobs'
Pods, Terminating ones included), and at the end every job has run exactly to its end:
nothing stuck ``running`` with finished Pods, nothing run twice at once, no card
double-booked, no finished job holding capacity.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid

import psycopg
import pytest
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import libpq_dsn
from app.domain.spec import JobSpec
from app.domain.states import TERMINAL
from app.store.jobs import submit_job
from app.store.node_rows import gpu_type_configs
from app.store.orm import JobRow
from tests.fakekube import controllers
from tests.fakekube.fixtures import elector, make_cluster, started_cluster
from tests.fakekube.objects import article_a100
from tests.fakekube.server import FakeKube
from tests.invariants import check_cluster, check_database
from tests.realkube.both import BOTH, kube
from tests.realkube.control_plane import KWOK_NODE_LABEL, LOSS_PATIENCE_S
from tests.realkube.fixtures import OUTCOME_END, FinishingKubelet, KubeletThread, raw

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
            if (not pod["spec"].get("nodeName") or meta.get("deletionTimestamp")
                    or pod["spec"]["nodeName"] in self.kube._lost):
                continue  # (no kubelet runs on a lost node)
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


def _fenced_replica(kube, sf, db_url: str, lock: str) -> tuple[Dispatcher, object]:
    """A dispatcher replica whose API calls give up after 0.5 s (hangs are injected)."""
    with sf() as s:
        types = gpu_type_configs(s)
    c = make_cluster(kube, request_timeout_s=0.5 if isinstance(kube, FakeKube) else 5.0,
                     watch_idle_timeout_s=1.0 if isinstance(kube, FakeKube) else 5.0)
    c.set_gpu_types(types)
    c.start(wait_s=20)
    return Dispatcher(sf, c, elector=elector(db_url, lock), grace_seconds=1), c


def _holding_pods(kube) -> list[dict]:
    """Every gpuq Pod that may hold its node's cards: bound, not finished, Terminating
    ones included (their processes run until a kubelet ends them)."""
    if isinstance(kube, FakeKube):
        pods = kube.gpuq_pods()
    else:
        pods = []
        for ns in (kube.namespace, *kube.extra_namespaces):
            pods += raw(kube.core.list_namespaced_pod(
                ns, label_selector="app.kubernetes.io/managed-by=gpuq",
                _preload_content=False))["items"]
    return [p for p in pods if p["spec"].get("nodeName")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]


def cards_double_booked(pods: list[dict]) -> list[str]:
    """A card two jobs' Pods hold at once, Terminating Pods included: the invariant as
    the nodes see it (the database's own is tests/invariants.py)."""
    owner: dict[tuple[str, str], tuple[str, str]] = {}
    out = []
    for p in pods:
        ann = p["metadata"].get("annotations") or {}
        job = p["metadata"]["labels"]["gpuq.io/job-id"]
        what = _pod_state(p)
        for d in filter(None, ann.get("gpuq.io/devices", "").split(",")):
            key = (p["spec"]["nodeName"], d)
            first = owner.setdefault(key, (job, what))
            if first[0] != job:
                out.append(f"card {key} held by jobs {first[0]} ({first[1]}) and {job} ({what})")
    return out


def _pod_state(p: dict) -> str:
    """A Pod's name, phase, and Terminating since when (a double-booking's evidence)."""
    meta = p["metadata"]
    gone = meta.get("deletionTimestamp")
    return (f"{meta['name']} {p['status'].get('phase')}"
            + (f", Terminating since {gone}" if gone else "")
            + f", created {meta.get('creationTimestamp')}")


#: the sequences the fake API server produces on demand
FAKE_SEQUENCES = ("disruption", "pressure", "node-loss", "hang", "slow", "gone", "window",
                  "deposed")
#: the sequences the real control plane produces (tests/realkube: the Eviction API, kwok's
#: kubelet stages, the node lifecycle and taint eviction controllers, a plain delete)
REAL_SEQUENCES = ("eviction", "pressure", "delete", "node-loss", "deposed")


class _Faults:
    """Injects one kind of fault at a time into ``kube`` while the suite's jobs run,
    and undoes the lasting ones (a hang, a lost node) a few rounds later."""

    def __init__(self, kube, rng: random.Random) -> None:
        self.kube = kube
        self.rng = rng
        self.fake = isinstance(kube, FakeKube)
        self.undo: list[tuple[int, object]] = []  # (rounds left, what to call)
        self.taken: set[str] = set()  # jobs whose Pods a fault took away: rightly requeued
        # nodes lost now: a Pod bound to one before the node lifecycle controller noticed
        # (the scheduler cannot know sooner) is taken away with the others
        self.lost: set[str] = set()
        self.evicted_on_lost_nodes = 0  # real: Pods the taint eviction controller deleted
        self.churn = 0  # other workloads' Pods added (the window kind)
        self.lost_at: dict[str, float] = {}  # real: when each node was lost (monotonic)
        self.loss_to_eviction_s: list[float] = []  # real: how long the controllers took
        self.not_evicted: list[str] = []  # real: what a node looked like when it came back

    def tick(self) -> None:
        if self.lost:
            for p in _holding_pods(self.kube):
                if p["spec"].get("nodeName") in self.lost:
                    self.taken.add(p["metadata"]["labels"]["gpuq.io/job-id"])
        left = []
        for n, fn in self.undo:
            # an undo answering False is not due yet (tried again next round; the real
            # node's recovery bounds its own wait in time, the loop's deadline the rest)
            if n > 1 or fn() is False:  # type: ignore[operator]
                left.append((n - 1, fn))
        self.undo = left

    def settle(self) -> None:
        for _n, fn in self.undo:
            fn()  # type: ignore[operator]
        self.undo = []

    def _recover_real(self, node: str) -> bool:
        """The lost node's kubelet comes back once the taint eviction controller has
        deleted its Pods (False until then). Past ``LOSS_PATIENCE_S`` it comes back
        anyway, with its Pods released from their hold so that they end and the run
        finishes; the test then fails on the eviction check, with what the node and the
        controller-manager showed."""
        on_node = [p for p in _holding_pods(self.kube) if p["spec"]["nodeName"] == node]
        waited = time.monotonic() - self.lost_at[node]
        if any(not p["metadata"].get("deletionTimestamp") for p in on_node):
            if waited < LOSS_PATIENCE_S:
                self.kube.heal_heartbeats()  # the other Nodes' kubelets must keep beating
                return False
            self.not_evicted.append(self._describe_lost(node, waited, on_node))
            for p in on_node:
                meta = p["metadata"]
                with contextlib.suppress(ApiException):  # gone or being ended meanwhile
                    self.kube.core.patch_namespaced_pod(meta["name"], meta["namespace"], {
                        "metadata": {"annotations": {OUTCOME_END: "Succeeded"}}})
        else:
            self.evicted_on_lost_nodes += len(on_node)
            self.loss_to_eviction_s.append(round(waited, 1))
        self.kube.update_node(node, lambda n: n["metadata"]["labels"].update(
            {KWOK_NODE_LABEL: "true"}))
        self.lost.discard(node)
        return True

    def _describe_lost(self, node: str, waited: float, on_node: list[dict]) -> str:
        """The evidence when a lost node's Pods were not evicted in time: how long ago it
        was lost, its Pods, and :meth:`RealKube.loss_evidence`."""
        return (f"node {node} lost {waited:.0f} s ago, Pods "
                f"{[(p['metadata']['name'], p['status'].get('phase')) for p in on_node]}; "
                + self.kube.loss_evidence(node))

    def _recover_fake(self, node: str) -> None:
        self.kube.recover_node(node)
        self.lost.discard(node)

    def _hold_pods_on(self, node: str) -> int:
        """Ask kwok to keep every running Pod on ``node`` running (the outcome annotation
        Hold), each on the version read, so that a Pod the test's kubelet is ending at the
        same moment ends rather than being held half-way; how many are held."""
        held = 0
        for p in self.kube.gpuq_pods():
            meta = p["metadata"]
            if (p["spec"].get("nodeName") != node or p["status"].get("phase") != "Running"
                    or OUTCOME_END in (meta.get("annotations") or {})):
                continue
            try:
                self.kube.core.patch_namespaced_pod(meta["name"], meta["namespace"], {
                    "metadata": {"resourceVersion": meta["resourceVersion"],
                                 "annotations": {OUTCOME_END: "Hold"}}})
                held += 1
            except ApiException as e:
                if e.status not in (404, 409):  # deleted or being ended meanwhile
                    raise
        return held

    def _running(self) -> list[dict]:
        return [p for p in self.kube.gpuq_pods() if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
                and p["spec"].get("nodeName") not in self.lost]

    def inject(self, kind: str) -> bool:
        """True once the fault happened (False: nothing to act on yet)."""
        kube, rng = self.kube, self.rng
        if kind in ("disruption", "eviction", "pressure", "delete", "node-loss"):
            running = self._running()
            if not running:
                return False
            pod = rng.choice(running)
            meta = pod["metadata"]
            ns, name = meta["namespace"], meta["name"]
            if kind == "node-loss":
                node = pod["spec"]["nodeName"]
                for p in kube.gpuq_pods():
                    if p["spec"].get("nodeName") == node:
                        self.taken.add(p["metadata"]["labels"]["gpuq.io/job-id"])
                if self.fake:
                    self.lost.add(node)
                    kube.lose_node(node)
                    kube.advance(controllers.NODE_MONITOR_GRACE_S
                                 + controllers.DEFAULT_TOLERATION_S)
                    self.undo.append((6, lambda: self._recover_fake(node)))
                elif not self._hold_pods_on(node):
                    return False  # they all ended meanwhile: nothing for the loss to evict
                else:
                    self.lost.add(node)
                    self.lost_at[node] = time.monotonic()
                    kube.update_node(node, lambda n: n["metadata"]["labels"].pop(
                        KWOK_NODE_LABEL, None))
                    self.undo.append((1, lambda: self._recover_real(node)))
                return True
            self.taken.add(meta["labels"]["gpuq.io/job-id"])
            try:
                if kind == "disruption":  # drain or taint manager: Terminating first
                    kube.disrupt(ns, name, rng.choice(["EvictionByEvictionAPI",
                                                        "DeletionByTaintManager"]),
                                 keep_terminating=True)
                elif kind == "eviction":
                    kube.core.create_namespaced_pod_eviction(name, ns, {
                        "metadata": {"name": name}}, _preload_content=False)
                elif kind == "delete":
                    kube.delete_pod(ns, name)
                elif self.fake:
                    kube.evict_for_pressure(ns, name)
                else:
                    kube.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {
                        OUTCOME_END: "Evicted"}}})
            except (KeyError, ApiException):
                return False  # it ended meanwhile
            return True
        if kind == "hang":
            kube.hang(r"^(POST|DELETE) ")
            self.undo.append((3, kube.unhang))
        elif kind == "slow":
            kube.slow(r"^(POST|DELETE|GET /api/v1/pods\?)", 0.3)  # under the 0.5 s bound
            self.undo.append((3, kube.unhang))
        elif kind == "gone":
            # the watches are cut, and etcd compacts its history meanwhile: resumed,
            # they are 410 Gone, and the informers relist
            kube.hang(r"watch=")
            self.undo.append((2, kube.compact))
            self.undo.append((3, kube.unhang))
        elif kind == "window":
            # the pods watches go silent while other workloads' Pods change more often
            # than the watch cache keeps: resumed, they are 410 Gone, and relist
            kube.watch_cache_size = 4
            kube.hang(r"^GET /api/v1/pods\?.*watch")
            for _ in range(6):
                self.churn += 1
                kube.add_pod({"metadata": {"name": f"churn-{self.churn}", "namespace": "other"},
                              "spec": {"containers": [{"name": "c", "image": "x:1"}]},
                              "status": {"phase": "Succeeded"}})
            self.undo.append((4, kube.unhang))
        return True


def _run_sequences(kube, sf, db_url: str, kinds: tuple[str, ...], repeats: int, jobs: int,
                   kubelet, seed: int = 23) -> dict[str, int]:
    rng = random.Random(seed)
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"
    replicas = [_fenced_replica(kube, sf, db_url, lock) for _ in range(2)]
    accepted: list[str] = []
    done: dict[str, int] = dict.fromkeys(kinds, 0)
    faults = _Faults(kube, rng)
    started = time.monotonic()
    try:
        with kubelet:
            with sf() as s:
                for i in range(jobs):
                    spec = JobSpec.model_validate({
                        "name": f"f{i}", "team": rng.choice(["nlp", "cv"]),
                        "priority": rng.choice(["P1", "P2"]),
                        "resources": {"gpus": rng.choice([1, 2, 4, 8]),
                                      "gpu_types": ["a100-80g"]}})
                    accepted.append(str(submit_job(s, spec, now=utcnow()).job.id))
                    s.commit()
            deadline = time.monotonic() + (150 if faults.fake else 300) * repeats
            rounds, step = 0, 0
            while time.monotonic() < deadline:
                rounds += 1
                faults.tick()
                if rounds % 4 == 0 and step < len(kinds) * repeats:
                    # the next kind in turn; one that finds nothing to act on (no Pod
                    # running yet) is tried again on the next fault round
                    kind = kinds[step % len(kinds)]
                    if kind == "deposed":
                        ok = _depose(replicas, kube, sf, db_url, lock)
                    else:
                        ok = faults.inject(kind)
                    done[kind] += ok
                    step += ok
                for d, _c in replicas:
                    d.run_once()
                found = check_database(sf, accepted, faults.taken) + [
                    f"job {j} runs {len(a)} sets of Pods" for j, a in _pods_by_job(kube).items()
                    if len(a) > 1] + cards_double_booked(_holding_pods(kube))
                assert not found, (rounds, done, found)
                with sf() as s:
                    left = s.scalar(select(JobRow.id).where(JobRow.status.not_in(TERMINAL))
                                    .limit(1))
                if left is None and not faults.undo:
                    if min(done.values()) >= repeats:
                        break
                    with sf() as s:  # faults still to inject: keep work on the cluster
                        spec = JobSpec.model_validate({
                            "name": f"more{rounds}", "team": "nlp",
                            "resources": {"gpus": 8, "gpu_types": ["a100-80g"]}})
                        accepted.append(str(submit_job(s, spec, now=utcnow()).job.id))
                        s.commit()
                time.sleep(0.05)
            faults.settle()
            for d, _c in replicas:
                d.run_once()
            found = check_database(sf, accepted, faults.taken) + check_cluster(
                sf, _pods_by_job(kube)) + cards_double_booked(_holding_pods(kube))
            assert not found, found
            with sf() as s:
                statuses = {str(j.id): j.status for j in s.scalars(select(JobRow))}
            print(f"kubernetes fault sequences ({'fake' if faults.fake else 'real'}): "
                  f"{done} = {sum(done.values())} faults in {rounds} rounds, "
                  f"{len(accepted)} jobs, 0 violations, {time.monotonic() - started:.0f} s"
                  + (f", {kube.gone_answers} watches answered 410" if faults.fake else
                     f", {faults.evicted_on_lost_nodes} Pods taint-evicted from lost nodes"
                     f" after {faults.loss_to_eviction_s} s"))
            assert not faults.not_evicted, "\n".join(faults.not_evicted)
            assert min(done.values()) >= repeats, done
            assert set(statuses.values()) == {"succeeded"}, statuses
            # the sequences did what they are for: watches were answered 410, lost nodes'
            # Pods were taint-evicted
            if faults.fake:
                assert kube.gone_answers >= 1, "no watch was answered 410"
            else:
                assert faults.evicted_on_lost_nodes >= done["node-loss"], faults.loss_to_eviction_s
            return done
    finally:
        faults.settle()
        for d, c in replicas:
            d.elector.release()
            c.close()


def _depose(replicas: list, kube, sf, db_url: str, lock: str) -> bool:
    """The leader's session dies after it committed a plan; the standby leads; the
    deposed one performs its plan anyway (fenced: nothing bound, nothing written)."""
    i = next((k for k, (d, _c) in enumerate(replicas) if d.elector.is_leader), None)
    if i is None:
        return False
    d, c = replicas[i]
    d.sync_cluster()
    plan = d.reconcile()
    plan.extend(d.plan_and_commit())
    with psycopg.connect(libpq_dsn(db_url), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s, 10000)", (d.elector.backend_pid,))
    replicas[1 - i][0].run_once()  # the standby leads
    d.perform(plan)  # the deposed one carries on: fenced
    c.close()
    replicas[i] = _fenced_replica(kube, sf, db_url, lock)
    return True


@pytest.mark.parametrize(("repeats", "jobs"), [
    (1, 24), pytest.param(4, 60, marks=pytest.mark.long_faults, id="long")])
def test_kubernetes_fault_sequences_keep_every_invariant(db_url, sf, repeats, jobs):
    """The control plane's sequences the fake API server produces on demand, one kind
    after another while the jobs run: a graceful deletion with DisruptionTarget whose
    Pod stays Terminating until its kubelet ends it (drain, taint manager: requeued, no
    retry spent), a node-pressure eviction (Failed/Evicted), node loss (Unknown, taint
    eviction after 300 s on the fake's clock, the Pods Terminating on the dead node until
    it comes back), an apiserver that answers no create or delete for three passes, one
    that answers them late (under the bound), history compacted under the watches (410
    Gone, relist), the pods watches silent while the watch cache's window moves past
    them (410, relist), and a deposed leader performing the plan it committed before its
    session died. After every pass: no job lost, none with two Pod sets, no card held by
    two jobs' Pods (Terminating ones included) or two allocations; at the end every job
    succeeded and no finished job holds capacity. The long variant (``-m long_faults``)
    runs each kind 4 times over 60 jobs."""
    kube = FakeKube(watch_timeout_s=2)
    kube.start()
    try:
        for i in range(3):
            kube.add_node(article_a100(f"a100-{i}"))
        _run_sequences(kube, sf, db_url, FAKE_SEQUENCES, repeats, jobs,
                       FakeKubelet(kube, run_s=0.6))
    finally:
        kube.unhang()
        kube.stop()


@pytest.mark.parametrize(("repeats", "jobs"), [
    (1, 16), pytest.param(3, 40, marks=pytest.mark.long_faults, id="long")])
def test_kubernetes_fault_sequences_on_the_real_control_plane(real_kube, db_url, sf, repeats,
                                                              jobs):
    """The same invariants on the real control plane (tests/realkube): a drain through
    the Eviction API (DisruptionTarget, kwok's kubelet ends the Pod, exit 143), a
    node-pressure eviction by the kubelet (Failed/Evicted), a plain delete by someone
    else (Failed 143, then gone), node loss (kwok stops renewing the node's lease: the
    node lifecycle controller marks it Unknown and taints it, the taint eviction
    controller deletes its Pods after their tolerationSeconds, which stay Terminating
    until the node's kubelet is back), and a deposed leader. Hangs and 410s at a chosen
    moment stay on the fake (the test above)."""
    for i in range(3):
        real_kube.add_node(article_a100(f"a100-{i}"))
    _run_sequences(real_kube, sf, db_url, REAL_SEQUENCES, repeats, jobs,
                   FinishingKubelet(real_kube, run_s=0.6))

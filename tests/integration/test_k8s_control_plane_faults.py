"""gpuq's dispatcher under what a real control plane does to running jobs, produced on
the fake API server where it takes minutes or cannot be had on demand
(tests/fakekube/controllers.py, containers.py): a graceful disruption whose Pod is
still Terminating, node loss (NotReady, taint eviction after 300 s, PodGC of a
deleted node), a kubelet restarting a container (CrashLoopBackOff), a watch that fell
out of the watch cache's window (410), slow and hung answers.

The rules: a job whose Pods are taken away is requeued without spending a retry, and
its cards are not handed to another job while its Pods may still run; a run the
kubelet restarts over gpuq's head has failed; a 410 relists and loses no outcome; a
slow or hung apiserver costs a pass its timeout, never the pass.
"""

from __future__ import annotations

import threading

from sqlalchemy import select

from app.clock import utcnow
from app.cluster.interface import BindRequest
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.scheduling.model import ReplicaPlacement
from app.store.jobs import submit_job
from app.store.orm import AllocationRow, JobEventRow, JobRow
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import (
    job_row,
    make_cluster,
    started_cluster,
    submit_a100_job,
    wait_until,
)
from tests.fakekube.objects import article_a100, pod

CONFIG = A100_TRAINING_CONFIG
NS = "gpuq-jobs"


def _status(sf, job_id: int) -> str:
    return job_row(sf, job_id).status


def _events(sf, job_id: int) -> list[str]:
    with sf() as s:
        return [e.type for e in s.scalars(select(JobEventRow).where(
            JobEventRow.job_id == job_id).order_by(JobEventRow.id))]


def _pods_of(kube, job_id: int) -> list[dict]:
    return [p for p in kube.gpuq_pods()
            if p["metadata"]["labels"]["gpuq.io/job-id"] == str(job_id)]


def _run_pods(kube) -> None:
    """The kubelets start every bound gpuq Pod not being deleted."""
    for p in kube.gpuq_pods():
        if (p["spec"].get("nodeName") and p["status"].get("phase") == "Pending"
                and not p["metadata"].get("deletionTimestamp")):
            kube.set_pod_phase(NS, p["metadata"]["name"], "Running")


def _until(d: Dispatcher, kube, pred, passes: int = 40) -> None:
    """Passes (the kubelets starting bound Pods between them) until ``pred()``."""
    def step() -> bool:
        d.run_once()
        _run_pods(kube)
        return bool(pred())
    wait_until(step, timeout_s=passes * 0.5)


def _holding_pods_by_node(kube) -> dict[str, set[str]]:
    """node -> jobs whose gpuq Pods may hold its cards: bound and not finished,
    Terminating ones included (their processes run until the kubelet ends them)."""
    out: dict[str, set[str]] = {}
    for p in kube.gpuq_pods():
        if p["spec"].get("nodeName") and p["status"].get("phase") not in (
                "Succeeded", "Failed"):
            out.setdefault(p["spec"]["nodeName"], set()).add(
                p["metadata"]["labels"]["gpuq.io/job-id"])
    return out


# ------------------------------------------------------------------ disruption in grace
def test_a_disrupted_pod_keeps_its_cards_until_it_is_gone(kube, sf):
    """A drain (Eviction API) or the taint manager disrupts job A's Pod: it is
    Terminating with its processes running for the grace period. A is requeued at once
    (no retry spent), but its 8 cards go to nobody -- job B waits -- until the Pod is
    gone. Before the fix the cards were freed when the disruption was seen, and B was
    bound onto them while A's Pod still ran."""
    kube.honour_grace = True
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, grace_seconds=1)
    try:
        a = submit_a100_job(sf, 8, "a")
        _until(d, kube, lambda: _status(sf, a) == "running")
        b = submit_a100_job(sf, 8, "b")
        d.run_once()
        (pa,) = _pods_of(kube, a)
        kube.disrupt(NS, pa["metadata"]["name"], "EvictionByEvictionAPI",
                     keep_terminating=True)
        _until(d, kube, lambda: "requeued" in _events(sf, a))
        for _ in range(5):
            d.run_once()
            _run_pods(kube)
            held = _holding_pods_by_node(kube).get("a100-0", set())
            assert held == {str(a)}, f"cards of a Terminating Pod handed on: {held}"
            # (a kubelet refuses a Pod bound onto devices a Terminating Pod holds)
            assert not kube.rejected, f"bound onto held cards: {kube.rejected}"
        assert "retried" not in _events(sf, a)
        kube.finish_terminating()  # the grace period is over: the Pod goes
        _until(d, kube, lambda: "running" in (_status(sf, a), _status(sf, b)))
        assert len(_holding_pods_by_node(kube)["a100-0"]) == 1
    finally:
        c.close()


def test_a_gangs_survivors_keep_their_cards_until_they_are_gone(kube, sf):
    """One replica of a 2-node gang is disrupted; gpuq stops the survivor (grace 1 s)
    and requeues the gang; the survivor's node is not given to another job until the
    survivor is gone."""
    kube.honour_grace = True
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, grace_seconds=1)
    try:
        with sf() as s:
            spec = JobSpec.model_validate({"name": "gang", "team": "nlp", "replicas": 2,
                                           "resources": {"gpus": 8,
                                                         "gpu_types": ["a100-80g"]}})
            g = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        _until(d, kube, lambda: _status(sf, g) == "running")
        other = submit_a100_job(sf, 8, "other")
        d.run_once()
        first, second = sorted(_pods_of(kube, g), key=lambda p: p["metadata"]["name"])
        kube.disrupt(NS, first["metadata"]["name"], keep_terminating=True)
        _until(d, kube, lambda: "requeued" in _events(sf, g))
        for _ in range(5):
            d.run_once()
            _run_pods(kube)
            for node, jobs in _holding_pods_by_node(kube).items():
                assert jobs == {str(g)}, f"{node}: cards handed on while held: {jobs}"
        kube.finish_terminating()
        _until(d, kube, lambda: "running" in (_status(sf, g), _status(sf, other)))
    finally:
        c.close()


# ------------------------------------------------------------------ node loss
def test_node_loss_requeues_without_a_retry_runs_elsewhere_and_podgc_frees_the_node(kube, sf):
    """The node's kubelet goes silent: after the grace period it is Unknown and
    unreachable-tainted (gpuq stops offering it; the job still runs as far as anyone
    knows); after tolerationSeconds (300) the taint manager deletes the Pod, which stays
    Terminating, Running, on the dead node. gpuq requeues the job without spending a
    retry (max_retries is 0) and runs it on the other node; the lost node's cards stay
    held until PodGC removes the Pod of the deleted node, then nothing is left on it."""
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, grace_seconds=1)
    try:
        j = submit_a100_job(sf, 8, "train")
        _until(d, kube, lambda: _status(sf, j) == "running")
        (p,) = _pods_of(kube, j)
        lost = p["spec"]["nodeName"]
        kube.lose_node(lost)
        kube.advance(50)
        wait_until(lambda: not next(n for n in c.list_nodes() if n.name == lost).schedulable)
        d.run_once()
        assert _status(sf, j) == "running"  # nobody knows yet whether it still runs
        kube.advance(300)
        _until(d, kube, lambda: "requeued" in _events(sf, j))
        assert "retried" not in _events(sf, j) and "failed" not in _events(sf, j)
        _until(d, kube, lambda: _status(sf, j) == "running")
        pods = _pods_of(kube, j)
        assert {q["spec"]["nodeName"] for q in pods if not q["metadata"].get(
            "deletionTimestamp")} == {next(n for n in ("a100-0", "a100-1") if n != lost)}
        with sf() as s:  # the dead node's cards: held (releasing) while its Pod exists
            assert s.scalars(select(AllocationRow).where(AllocationRow.node == lost)).all()
        kube.delete_node(lost)  # the operator (or the autoscaler) removes the machine
        kube.advance(40)  # PodGC: Failed, DisruptionTarget DeletionByPodGC, deleted
        _until(d, kube, lambda: not _allocations_on(sf, lost))
        assert _status(sf, j) == "running" and len(_pods_of(kube, j)) == 1
    finally:
        c.close()


def _allocations_on(sf, node: str) -> list:
    with sf() as s:
        return s.scalars(select(AllocationRow).where(AllocationRow.node == node)).all()


# ------------------------------------------------------------------ kubelet restarts
def _req(job_id: str, template: dict | None = None) -> BindRequest:
    return BindRequest(job_id=job_id, name="t", team="nlp", pool="training", priority="P1",
                       world_size=1, pod_template=template or {},
                       placements=[ReplicaPlacement(0, "a100-0", "a100-80g", (0,), units=10,
                                                    cpu=1, memory_gb=1)])


def _phases(c, pred) -> list:
    got: list = []
    wait_until(lambda: got.extend(c.poll_events()) or pred(got))
    return got


def test_a_template_asking_on_failure_is_overridden_so_an_oom_fails_the_job(kube):
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube)
    c.start(wait_s=10)
    try:
        c.bind(_req("7", {"spec": {"restartPolicy": "OnFailure", "containers": [
            {"name": "main", "image": "x:1", "securityContext": {
                "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}}}]}}))
        (p,) = kube.gpuq_pods()
        assert p["spec"]["restartPolicy"] == "Never"
        kube.set_pod_phase(NS, p["metadata"]["name"], "Running")
        kube.crash(NS, p["metadata"]["name"], 137, "OOMKilled")
        got = _phases(c, lambda g: any(e.phase == "failed" for e in g))
        assert [e.phase for e in got] == ["running", "failed"]
        assert "OOMKilled" in got[-1].message and got[-1].pods_gone
    finally:
        c.close()


def test_a_pod_the_kubelet_restarts_fails_its_job_and_is_stopped(kube):
    """A gpuq Pod that says restartPolicy OnFailure (made before gpuq forced Never:
    the field is immutable) is OOM-killed; the kubelet restarts it after a back-off and
    the Pod stays Running in CrashLoopBackOff. Before the fix its job stayed running
    forever, holding its card; now it fails with the kubelet's reason and is stopped."""
    kube.honour_grace = True  # the stopped Pod stays Terminating: its card stays held
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube)
    c.start(wait_s=10)
    try:
        c.bind(_req("8"))
        (p,) = kube.gpuq_pods()
        name = p["metadata"]["name"]
        kube.pods[(NS, name)]["spec"]["restartPolicy"] = "OnFailure"  # an older release's
        kube.set_pod_phase(NS, name, "Running")
        _phases(c, lambda g: any(e.phase == "running" for e in g))
        kube.crash(NS, name, 137, "OOMKilled")
        assert kube.pods[(NS, name)]["status"]["phase"] == "Running"
        got = _phases(c, lambda g: any(e.phase == "failed" for e in g))
        assert "OOMKilled" in got[-1].message and "CrashLoopBackOff" in got[-1].message
        assert not got[-1].pods_gone  # its card is held until the Pod is gone
        assert kube.evictions and kube.evictions[-1][1] == name
        assert "8" in c.draining_job_ids()
    finally:
        c.close()


def test_a_foreign_pod_in_crash_loop_back_off_still_holds_its_cards(kube):
    """Another team's Pod (restartPolicy Always) restarting in CrashLoopBackOff is
    Running: the kubelet keeps its devices, so gpuq does not offer them."""
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube)
    c.start(wait_s=10)
    try:
        kube.add_pod(pod("theirs", "a100-0", {"nvidia.com/gpu": "6"}, namespace="other"))
        kube.crash("other", "theirs", 1, "Error")
        assert kube.pods[("other", "theirs")]["status"]["containerStatuses"][0][
            "state"]["waiting"]["reason"] == "CrashLoopBackOff"
        kube.advance(10)
        wait_until(lambda: sum(not dev.external for dev in c.list_nodes()[0].devices) == 2)
    finally:
        c.close()


# ------------------------------------------------------------------ 410 from the window
def test_a_watch_behind_the_watch_cache_window_relists_and_loses_no_outcome(kube):
    """The pods watch falls behind (its connection was down) by more events than the
    watch cache keeps: the resumed watch is 410 Gone, the informer relists, and the
    job's end that happened meanwhile is reported."""
    kube.watch_timeout_s = 0.3
    kube.watch_cache_size = 5
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube)
    c.sync()
    try:
        c.bind(_req("9"))
        c.pods.step()
        (p,) = kube.gpuq_pods()
        kube.set_pod_phase(NS, p["metadata"]["name"], "Running")
        c.pods.step()
        assert [e.phase for e in c.poll_events()] == ["running"]
        relists = c.pods.relists
        kube.set_pod_phase(NS, p["metadata"]["name"], "Succeeded")
        for i in range(8):  # other workloads' churn pushes the window on
            kube.add_pod(pod(f"churn-{i}", "a100-0", namespace="other"))
        c.pods.step()  # 410
        assert c.pods.resource_version is None
        c.pods.step()  # relist
        assert c.pods.relists == relists + 1
        assert [e.phase for e in c.poll_events()] == ["succeeded"]
    finally:
        c.close()


# ------------------------------------------------------------------ slow and hung answers
def test_slow_answers_under_the_timeout_bind_and_hung_ones_cost_a_pass_its_timeout(kube, sf):
    """Creates answered 0.2 s late (timeout 1 s): the job binds. Creates that never
    answer (a job of one Pod is created bound: its create is its bind): the pass returns
    after the timeout, the job is held (not lost, not failed, no Pod of it left bound),
    and runs once the apiserver answers again, though the apiserver then carries out the
    held create (that Pod of the undone attempt is deleted)."""
    kube.add_node(article_a100("a100-0"))
    with sf() as s:
        from app.store.node_rows import gpu_type_configs
        types = gpu_type_configs(s)
    c = make_cluster(kube, request_timeout_s=1.0)
    c.set_gpu_types(types)
    c.start(wait_s=10)
    d = Dispatcher(sf, c, grace_seconds=1)
    try:
        kube.slow(r"^POST /api/v1/namespaces/[^/]+/pods", 0.2)
        a = submit_a100_job(sf, 4, "a")
        _until(d, kube, lambda: _status(sf, a) == "running")
        kube.unhang()
        kube.hang(r"^POST /api/v1/namespaces/[^/]+/pods(\?|$)")
        b = submit_a100_job(sf, 4, "b")
        done = threading.Event()

        def one_pass() -> None:
            d.run_once()
            done.set()

        t = threading.Thread(target=one_pass, daemon=True)
        t.start()
        t.join(60)  # bounded: a hung create costs the request timeout, not the pass
        assert done.is_set(), "a pass froze on a hung create"
        assert _status(sf, b) in ("pending", "admitted")
        assert not [q for q in _pods_of(kube, b) if q["spec"].get("nodeName")]
        kube.unhang()
        _until(d, kube, lambda: _status(sf, b) == "running", passes=120)
        # one attempt of b holds a Pod at the end: the held create's Pod was deleted
        _until(d, kube, lambda: len({q["metadata"]["labels"]["gpuq.io/bind-id"]
                                     for q in _pods_of(kube, b)
                                     if not q["metadata"].get("deletionTimestamp")}) == 1)
    finally:
        kube.unhang()
        c.close()

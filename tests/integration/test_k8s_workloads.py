"""Kubernetes-native workloads on the fake API server with its Job, JobSet and
PyTorchJob controllers (tests/fakekube/workloads.py) and real PostgreSQL: the examples of
k8s/examples/ applied as kubectl would, queued, admitted as one gang, bound,
preempted, deleted, refused."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from app.api.estimates import StartEstimator
from app.clock import utcnow
from app.cluster import k8s_labels as L
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.store.jobs import submit_job
from app.store.orm import AllocationRow, JobRow
from tests.fakekube.fixtures import job_row as fixture_job_row
from tests.fakekube.fixtures import started_cluster, wait_until
from tests.fakekube.objects import article_a100
from tests.fakekube.workloads import Workloads

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g]}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
  - {name: cv, pool: training, quota_units: 1000}
priority_classes:
  - {name: P0, value: 1000, preemptible: false}
  - {name: P1, value: 500, preemptible: true}
  - {name: P2, value: 100, preemptible: true}
scheduler: {min_run_time_s: 0}
"""


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.fixture
def world(kube, sf) -> Iterator[tuple]:
    w = Workloads(kube)
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, grace_seconds=0)
    yield w, c, d
    c.close()
    w.close()


SXM4 = "NVIDIA-A100-SXM4-80GB"  # the product k8s/examples/job.yaml's affinity names


def add_a100(kube, c, name: str, product: str | None = None) -> None:
    """An A100 node that gpuq's node informer has seen before the test goes on: a pass
    before that plans on a cluster without it (its reason names no node's cards).
    ``product``: its ``nvidia.com/gpu.product`` label (GPU feature discovery's)."""
    n = article_a100(name)
    if product is not None:
        n["metadata"]["labels"][L.GFD_PRODUCT] = product
    kube.add_node(n)
    wait_until(lambda: any(n.name == name for n in c.list_nodes()))


def apply(w: Workloads, obj: dict) -> dict:
    """``kubectl apply`` of a new object: through the API, validated."""
    a = w.kube
    import json
    import urllib.request

    kind = obj["kind"]
    group = obj["apiVersion"]
    plural = {"Job": "jobs", "JobSet": "jobsets", "PyTorchJob": "pytorchjobs"}[kind]
    url = f"{a.url}/apis/{group}/namespaces/{obj['metadata']['namespace']}/{plural}"
    req = urllib.request.Request(url, json.dumps(obj).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def job_row(sf, name: str) -> JobRow | None:
    with sf() as s:
        return s.scalars(select(JobRow).where(JobRow.name == name)).first()


def pods_of(kube, owner_name: str) -> list[dict]:
    with kube.cond:
        return [copy.deepcopy(p) for p in kube.pods.values()
                if p["metadata"]["name"].startswith(owner_name)
                and not p["metadata"].get("deletionTimestamp")]


def settle(d, pred, timeout_s: float = 60.0) -> None:
    """Run passes until ``pred()`` holds (the controllers act between passes); bounded
    generously, for a loaded 2-core machine, and on failure says where each job is."""
    try:
        wait_until(lambda: d.run_once() or pred(), timeout_s)
    except AssertionError:
        with d.session_factory() as s:  # what each job waits for: the failure's cause
            jobs = [(j.name, j.status, j.reason) for j in s.scalars(select(JobRow))]
        raise AssertionError(f"not settled after {timeout_s:g} s; jobs: {jobs}") from None


def events_on(kube, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in kube.k8s_events
            if e["involvedObject"].get("name") == name]


def run_all(kube, pods: list[dict], phase: str = "Running") -> None:
    for p in pods:
        kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], phase)


def test_indexed_job_is_one_gang_bound_whole(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    add_a100(kube, c, "a100-1")
    job = apply(w, example("indexed-job.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    row = job_row(sf, "sft-indexed")
    assert row.status == "admitted" and row.spec["replicas"] == 4
    assert row.spec["resources"]["gpus"] == 2
    assert row.submitted_by == "kubernetes:batch/v1/Job/gpuq-jobs/sft-indexed"
    pods = pods_of(kube, "sft-indexed")
    # one gang: every Pod of this attempt, bound on the reserved cards, none twice
    assert len({p["metadata"]["labels"][L.BIND_ID] for p in pods}) == 1
    held = [(p["spec"]["nodeName"], p["metadata"]["annotations"][L.ANN_DEVICES]) for p in pods]
    cards = [(n, dev) for n, devs in held for dev in devs.split(",")]
    assert len(cards) == 8 == len(set(cards))
    with sf() as s:
        alloc = s.scalars(select(AllocationRow).where(AllocationRow.job_id == row.id)).all()
    assert sorted((a.node, tuple(a.devices)) for a in alloc) == sorted(
        (n, tuple(int(x) for x in devs.split(","))) for n, devs in held)
    # replica i is completion index i
    for p in pods:
        ann = p["metadata"]["annotations"]
        assert p["metadata"]["labels"][L.REPLICA] == ann["batch.kubernetes.io/job-completion-index"]
    # the next pass tells the Job's story: kubectl describe shows queued, admitted
    settle(d, lambda: {r for r, _ in events_on(kube, "sft-indexed")} >= {"GpuqQueued",
                                                                        "GpuqAdmitted"})
    assert w.objects[("Job", "gpuq-jobs", "sft-indexed")]["metadata"]["annotations"][
        L.WL_STATE] == "admitted"
    run_all(kube, pods)
    settle(d, lambda: job_row(sf, "sft-indexed").status == "running")
    run_all(kube, pods, "Succeeded")
    settle(d, lambda: job_row(sf, "sft-indexed").status == "succeeded")
    assert w.objects[("Job", "gpuq-jobs", "sft-indexed")]["spec"]["suspend"] is False
    assert job["metadata"]["uid"] in row.idempotency_key
    # the REST API shows the job with its owner
    from app.api.schemas import job_out

    with sf() as s:
        out = job_out(s.get(JobRow, row.id), utcnow(), None)
    assert out.owner is not None and (out.owner.kind, out.owner.namespace, out.owner.name,
                                      out.owner.uid) == ("Job", "gpuq-jobs", "sft-indexed",
                                                         job["metadata"]["uid"])


def test_jobset_with_two_replicated_jobs_is_one_gang(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    apply(w, example("jobset.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "pretrain")
                           if p["spec"].get("nodeName")]) == 4)
    row = job_row(sf, "pretrain")
    assert row.status == "admitted" and row.spec["replicas"] == 4
    pods = pods_of(kube, "pretrain")
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            for p in pods} == {"driver", "workers"}
    assert len({p["metadata"]["labels"][L.BIND_ID] for p in pods}) == 1
    run_all(kube, pods, "Succeeded")
    settle(d, lambda: job_row(sf, "pretrain").status == "succeeded")


def _rest_job(sf, name: str, team: str, gpus: int, priority: str | None = None) -> int:
    with sf() as s:
        body = {"name": name, "team": team, "replicas": 1,
                "resources": {"gpus": gpus, "gpu_types": ["a100-80g"]}}
        if priority:
            body["priority"] = priority
        job_id = submit_job(s, JobSpec.model_validate(body), now=utcnow()).job.id
        s.commit()
    return job_id


def test_rest_and_workload_share_one_queue_and_quota(kube, sf, world):
    """A team's REST job and its Job count against one quota: with 80 CU (8 cards)
    and 4 held by REST, the 8-card Job waits, says why, and runs once they are free."""
    w, c, d = world
    from app.store.orm import TeamRow

    with sf() as s:
        s.get(TeamRow, "nlp").quota_units = 80
        s.commit()
    add_a100(kube, c, "a100-0")
    add_a100(kube, c, "a100-1")
    # the API's estimates, as app/main.py wires them into the front door
    est = StartEstimator(sf, utcnow, 30.0, background=False)
    d.front_door.start_of = lambda job_id, at: est.starts(utcnow())(job_id, at)
    rest = _rest_job(sf, "rest-one", "nlp", 4)
    d.run_once()
    apply(w, example("indexed-job.yaml"))
    settle(d, lambda: (job_row(sf, "sft-indexed") is not None
                       and w.objects[("Job", "gpuq-jobs", "sft-indexed")]["metadata"]
                       .get("annotations", {}).get(L.WL_REASON)))
    row = job_row(sf, "sft-indexed")
    assert row.status == "pending"
    ann = w.objects[("Job", "gpuq-jobs", "sft-indexed")]["metadata"]["annotations"]
    assert ann[L.WL_STATE] == "queued" and "quota" in ann[L.WL_REASON]
    assert ann[L.WL_REASON_CODE] == "team_quota"
    # its queue position and, once estimated, when it should start: after the REST job,
    # which has no duration estimate (an hour, the default)
    assert ann[L.WL_QUEUE_POSITION] == "1"
    est.refresh()
    settle(d, lambda: L.WL_ESTIMATED_START in w.objects[("Job", "gpuq-jobs", "sft-indexed")][
        "metadata"]["annotations"])
    start = datetime.strptime(w.objects[("Job", "gpuq-jobs", "sft-indexed")]["metadata"][
        "annotations"][L.WL_ESTIMATED_START], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert start > utcnow() + timedelta(minutes=30)
    assert w.objects[("Job", "gpuq-jobs", "sft-indexed")]["spec"]["suspend"] is True
    assert not pods_of(kube, "sft-indexed")
    # the REST job ends: the Job is admitted on the same cards
    for p in kube.gpuq_pods():
        if p["metadata"]["labels"][L.JOB_ID] == str(rest):
            kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Succeeded")
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    settle(d, lambda: L.WL_ESTIMATED_START not in w.objects[("Job", "gpuq-jobs", "sft-indexed")][
        "metadata"]["annotations"])  # admitted: no estimate


def test_a_rest_job_keyed_like_a_workload_does_not_stand_for_it(kube, sf, world):
    """A job another team wrote with the workload's key (``k8s-uid:<uid>``, refused by the
    API since) is not the workload's job: the workload is still queued and bound."""
    w, c, d = world
    add_a100(kube, c, "a100-0")
    add_a100(kube, c, "a100-1")  # room for both
    job = apply(w, example("indexed-job.yaml"))
    with sf() as s:
        squat = submit_job(s, JobSpec.model_validate(
            {"name": "squat", "team": "cv", "replicas": 1,
             "resources": {"gpus": 1, "gpu_types": ["a100-80g"]}}), now=utcnow(),
            idempotency_key=f"k8s-uid:{job['metadata']['uid']}", submitted_by="cv-ci").job.id
        s.commit()
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    row = job_row(sf, "sft-indexed")
    assert row.team == "nlp" and row.id != squat
    assert row.submitted_by == "kubernetes:batch/v1/Job/gpuq-jobs/sft-indexed"


def test_a_pod_of_another_namespace_with_the_attempts_labels_is_not_bound(kube, sf, world):
    """Another team's unbound Pod wearing the admitted Job's labels, in its own namespace,
    is not bound onto the Job's reserved cards (app/cluster/workloads/pods.py): the
    Job's own Pods are, and the forged one stays unbound."""
    w, c, d = world
    add_a100(kube, c, "a100-0")
    apply(w, example("indexed-job.yaml"))
    k8s_job = w.objects[("Job", "gpuq-jobs", "sft-indexed")]
    settle(d, lambda: L.BIND_ID in (k8s_job["spec"]["template"]["metadata"].get("labels") or {}))
    labels = {k: v for k, v in k8s_job["spec"]["template"]["metadata"]["labels"].items()
              if k.startswith(("gpuq.io/", "app.kubernetes.io/managed-by"))}
    code, _ = kube.create_pod("other-team", {  # as the API server's POST would
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forged-0", "namespace": "other-team", "labels": labels},
        "spec": {"schedulerName": "gpuq", "containers": [{"name": "c", "image": "x"}]}})
    assert code == 201
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    with kube.cond:
        assert not kube.pods[("other-team", "forged-0")]["spec"].get("nodeName")


def test_preempted_workload_is_suspended_requeued_and_runs_again(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    low = example("indexed-job.yaml")
    low["spec"]["template"]["spec"]["priorityClassName"] = "gpuq-p2"
    apply(w, low)
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    run_all(kube, pods_of(kube, "sft-indexed"))
    settle(d, lambda: job_row(sf, "sft-indexed").status == "running")
    urgent = _rest_job(sf, "urgent", "cv", 8, priority="P0")
    settle(d, lambda: job_row(sf, "sft-indexed").preemption_count == 1)
    k8s_job = w.objects[("Job", "gpuq-jobs", "sft-indexed")]
    assert k8s_job["spec"]["suspend"] is True
    settle(d, lambda: not pods_of(kube, "sft-indexed"))
    assert k8s_job["status"].get("failed", 0) == 0  # suspension is not a failure
    settle(d, lambda: k8s_job["metadata"].get("annotations", {}).get(L.WL_STATE)
           == "preempted")
    assert "GpuqPreempted" in {r for r, _ in events_on(kube, "sft-indexed")}
    for p in kube.gpuq_pods():
        if p["metadata"]["labels"][L.JOB_ID] == str(urgent):
            kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Succeeded")
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    assert k8s_job["spec"]["suspend"] is False


def test_deleting_the_job_frees_its_cards(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    apply(w, example("indexed-job.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "sft-indexed")
                           if p["spec"].get("nodeName")]) == 4)
    waiting = _rest_job(sf, "next", "nlp", 8)
    d.run_once()
    with kube.cond:
        w.remove("Job", "gpuq-jobs", "sft-indexed")  # kubectl delete job
    settle(d, lambda: job_row(sf, "sft-indexed").status == "cancelled")
    # the cards come free once its Pods are gone: a pass after that admits the next job
    settle(d, lambda: fixture_job_row(sf, waiting).status in ("admitted", "running"))
    with sf() as s:
        assert not s.scalars(select(AllocationRow).where(
            AllocationRow.job_id == job_row(sf, "sft-indexed").id)).all()


def test_a_job_gpuq_cannot_place_gets_an_event_with_the_reason(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    big = example("indexed-job.yaml")
    big["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "16"}
    apply(w, big)
    settle(d, lambda: any(r in ("GpuqUnschedulable", "GpuqRefused")
                          for r, _ in events_on(kube, "sft-indexed")))
    # a Warning whose message is the reason the API gives (the cards it cannot have)
    said = [(e["type"], e["message"]) for e in kube.k8s_events
            if e["involvedObject"].get("name") == "sft-indexed"
            and e["reason"] in ("GpuqUnschedulable", "GpuqRefused")]
    assert said and all(t == "Warning" and "16" in m for t, m in said)
    ann = w.objects[("Job", "gpuq-jobs", "sft-indexed")]["metadata"]["annotations"]
    assert ann[L.WL_REASON] and ann[L.WL_REASON] in said[0][1]
    assert not pods_of(kube, "sft-indexed")
    # a template without schedulerName: gpuq is refused with the reason, once
    other = example("job.yaml")
    del other["spec"]["template"]["spec"]["schedulerName"]
    apply(w, other)
    settle(d, lambda: any(r == "GpuqRefused" for r, _ in events_on(kube, "eval-sweep")))
    d.run_once()
    refused = [m for r, m in events_on(kube, "eval-sweep") if r == "GpuqRefused"]
    assert len(refused) == 1 and "schedulerName: gpuq" in refused[0]
    ann = w.objects[("Job", "gpuq-jobs", "eval-sweep")]["metadata"]["annotations"]
    assert ann[L.WL_STATE] == "refused" and "schedulerName" in ann[L.WL_REASON]
    assert job_row(sf, "eval-sweep") is None


def test_pytorchjob_is_one_gang_master_first_and_suspends_on_preemption(kube, sf, world):
    """A PyTorchJob (one master, three workers) is one gang of 4: admitted by clearing
    ``runPolicy.suspend``, the master is replica 0 and bound first, preemption
    re-suspends it (the operator deletes its Pods) and it runs again, and the master's
    success ends the job (the training operator's success policy)."""
    w, c, d = world
    add_a100(kube, c, "a100-0")
    apply(w, example("pytorchjob.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "ddp-resnet")
                           if p["spec"].get("nodeName")]) == 4)
    row = job_row(sf, "ddp-resnet")
    assert row.status == "admitted" and row.spec["replicas"] == 4
    assert row.submitted_by == "kubernetes:kubeflow.org/v1/PyTorchJob/gpuq-jobs/ddp-resnet"
    pods = pods_of(kube, "ddp-resnet")
    assert len({p["metadata"]["labels"][L.BIND_ID] for p in pods}) == 1
    by_replica = {int(p["metadata"]["labels"][L.REPLICA]): p["metadata"]["name"] for p in pods}
    assert by_replica == {0: "ddp-resnet-master-0", 1: "ddp-resnet-worker-0",
                          2: "ddp-resnet-worker-1", 3: "ddp-resnet-worker-2"}
    bound = [name for _, name, _ in kube.bindings if name.startswith("ddp-resnet")]
    assert bound[0] == "ddp-resnet-master-0" and len(bound) == 4
    cards = [(p["spec"]["nodeName"], dev) for p in pods
             for dev in p["metadata"]["annotations"][L.ANN_DEVICES].split(",")]
    assert len(cards) == 8 == len(set(cards))
    pt = w.objects[("PyTorchJob", "gpuq-jobs", "ddp-resnet")]
    assert pt["spec"]["runPolicy"]["suspend"] is False
    run_all(kube, pods)
    settle(d, lambda: job_row(sf, "ddp-resnet").status == "running")
    # a P0 job of another team takes the node: the PyTorchJob is suspended, not failed
    urgent = _rest_job(sf, "urgent", "cv", 8, priority="P0")
    settle(d, lambda: job_row(sf, "ddp-resnet").preemption_count == 1)
    assert pt["spec"]["runPolicy"]["suspend"] is True
    settle(d, lambda: not pods_of(kube, "ddp-resnet"))
    assert not any(cd["type"] == "Failed" and cd["status"] == "True"
                   for cd in pt.get("status", {}).get("conditions", []))
    # the team reads that another team's job preempted it, not which (it read the id)
    said = [m for r, m in events_on(kube, "ddp-resnet") if r == "GpuqPreempted"]
    assert said and all("preempted by another team's job (P0 > " in m for m in said), said
    assert not any(f"job {urgent}" in m for _, m in events_on(kube, "ddp-resnet"))
    for p in kube.gpuq_pods():
        if p["metadata"]["labels"][L.JOB_ID] == str(urgent):
            kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Succeeded")
    settle(d, lambda: len([p for p in pods_of(kube, "ddp-resnet")
                           if p["spec"].get("nodeName")]) == 4)
    assert pt["spec"]["runPolicy"]["suspend"] is False
    pods = pods_of(kube, "ddp-resnet")
    run_all(kube, pods)
    settle(d, lambda: job_row(sf, "ddp-resnet").status == "running")
    kube.set_pod_phase("gpuq-jobs", "ddp-resnet-master-0", "Succeeded")
    settle(d, lambda: job_row(sf, "ddp-resnet").status == "succeeded")
    with sf() as s:
        assert not s.scalars(select(AllocationRow).where(
            AllocationRow.job_id == row.id)).all()


def test_deleting_the_pytorchjob_frees_its_cards(kube, sf, world):
    w, c, d = world
    add_a100(kube, c, "a100-0")
    apply(w, example("pytorchjob.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "ddp-resnet")
                           if p["spec"].get("nodeName")]) == 4)
    waiting = _rest_job(sf, "next", "nlp", 8)
    d.run_once()
    with kube.cond:
        w.remove("PyTorchJob", "gpuq-jobs", "ddp-resnet")  # kubectl delete pytorchjob
    settle(d, lambda: job_row(sf, "ddp-resnet").status == "cancelled")
    with sf() as s:
        assert s.get(JobRow, waiting).status in ("admitted", "running")


def _queue_then_change_the_worker(kube, sf, world, change) -> None:
    """examples/pytorchjob.yaml queued with no node to run on, then its worker template
    changed by ``change`` (as its owner may, while it waits), then a node: the pass that
    binds it runs until the job has failed."""
    w, c, d = world
    apply(w, example("pytorchjob.yaml"))  # no node yet: queued, waits
    settle(d, lambda: (r := job_row(sf, "ddp-resnet")) is not None
           and r.status in ("pending", "unschedulable"))
    with kube.cond:
        pt = w.objects[("PyTorchJob", "gpuq-jobs", "ddp-resnet")]
        specs = pt["spec"]["pytorchReplicaSpecs"]
        worker = specs["Worker"]["template"] = copy.deepcopy(specs["Worker"]["template"])
        change(worker)
    add_a100(kube, c, "a100-0")
    settle(d, lambda: job_row(sf, "ddp-resnet").status == "failed")


def test_every_pod_set_is_held_to_the_teams_pod_policy(kube, sf, world):
    """A PyTorchJob's workers run Pods as its master does: a worker template that selects
    every card of its node (a device variable; the NVIDIA runtime reads it) is refused
    like the master's would be. Only the first pod set's template was checked, so a
    worker could see the cards of another team's Pods on its node."""
    w, c, d = world
    add_a100(kube, c, "a100-0")
    pt = example("pytorchjob.yaml")
    specs = pt["spec"]["pytorchReplicaSpecs"]
    worker = specs["Worker"]["template"] = copy.deepcopy(specs["Worker"]["template"])
    worker["spec"]["containers"][0].setdefault("env", []).append(
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    apply(w, pt)
    settle(d, lambda: any(r == "GpuqRefused" for r, _ in events_on(kube, "ddp-resnet")))
    [said] = [m for r, m in events_on(kube, "ddp-resnet") if r == "GpuqRefused"]
    assert "pod_template[worker].spec.containers[0].env[" in said, said
    assert "NVIDIA_VISIBLE_DEVICES" in said, said
    assert job_row(sf, "ddp-resnet") is None
    assert not pods_of(kube, "ddp-resnet")


def test_a_template_that_leaves_the_token_to_its_service_account_is_refused(kube, sf, world):
    """The Job controller's Pods get their ServiceAccount's token unless the template
    says ``automountServiceAccountToken: false``; gpuq sets it on its own Pods, and a
    team that may not mount a token (the default) must set it on a workload's."""
    w, c, d = world
    add_a100(kube, c, "a100-0")
    job = example("job.yaml")
    del job["spec"]["template"]["spec"]["automountServiceAccountToken"]
    apply(w, job)
    settle(d, lambda: any(r == "GpuqRefused" for r, _ in events_on(kube, "eval-sweep")))
    [said] = [m for r, m in events_on(kube, "eval-sweep") if r == "GpuqRefused"]
    assert "pod_template[main].spec.automountServiceAccountToken: must be false" in said
    assert job_row(sf, "eval-sweep") is None


def test_a_pod_set_changed_while_it_waits_is_refused_at_bind(kube, sf, world):
    """A PyTorchJob's templates may change after gpuq queued it: the Pods its operator
    then makes are checked against the team's Pod policy before they are bound (as
    gpuq's own are). A worker that selects every card of its node is not bound; the job
    ends failed with the reason and the PyTorchJob is suspended again."""
    w, c, d = world
    _queue_then_change_the_worker(kube, sf, world, lambda worker: worker["spec"][
        "containers"][0].setdefault("env", []).append(
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}))
    row = job_row(sf, "ddp-resnet")
    assert "refused by the Pod policy of team nlp" in row.reason, row.reason
    assert "NVIDIA_VISIBLE_DEVICES" in row.reason, row.reason
    assert not [name for _, name, _ in kube.bindings if name.startswith("ddp-resnet")]
    settle(d, lambda: w.objects[("PyTorchJob", "gpuq-jobs", "ddp-resnet")]["spec"][
        "runPolicy"]["suspend"] is True)
    with sf() as s:
        assert not s.scalars(select(AllocationRow).where(
            AllocationRow.job_id == row.id)).all()


def test_a_sidecar_without_a_card_runs_only_when_it_says_it_sees_none(kube, sf, world):
    """A Job with a sidecar (no card): refused until the sidecar sets
    NVIDIA_VISIBLE_DEVICES=void, as gpuq does on its own Pods; with it, the Pods pass
    the check at bind and are bound."""
    w, c, d = world
    add_a100(kube, c, "a100-0", product=SXM4)
    job = example("job.yaml")
    spec = job["spec"]["template"]["spec"]
    spec["containers"].append({"name": "logs", "image": "busybox:1.36",
                               "securityContext": spec["containers"][0]["securityContext"]})
    apply(w, job)
    settle(d, lambda: any(r == "GpuqRefused" for r, _ in events_on(kube, "eval-sweep")))
    [said] = [m for r, m in events_on(kube, "eval-sweep") if r == "GpuqRefused"]
    assert "container(s) logs get no card" in said, said
    assert job_row(sf, "eval-sweep") is None
    fixed = example("job.yaml")
    fixed["metadata"]["name"] = "eval-sweep-2"
    fixed["spec"]["template"]["spec"]["containers"].append(
        {**spec["containers"][1], "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]})
    apply(w, fixed)
    settle(d, lambda: len([p for p in pods_of(kube, "eval-sweep-2")
                           if p["spec"].get("nodeName")]) == 2)
    assert job_row(sf, "eval-sweep-2").status in ("admitted", "running")


def test_a_node_the_templates_affinity_excludes_is_not_used(kube, sf, world):
    """job.yaml requires ``nvidia.com/gpu.product In [NVIDIA-A100-SXM4-80GB]``; gpuq maps
    that to the GPU type a100-80g, whose nodes need not all carry that product. A node of
    the type without it would refuse the Pods (the kubelet's NodeAffinity), and the Job
    controller would spend its retries on the same reserved node until the Job failed.
    Placement keeps to the nodes the template selects (``JobRequest.node_selector``), so
    such a node is never picked, however many there are (more than the 8 nodes a job
    used to avoid after a refusal at bind): while the one node of the product is
    cordoned the job waits for it, and it runs there once the node is back. (With no
    node of the product at all the front door refuses the workload, as for a GPU type
    the cluster lacks: tests/integration/test_submit_feasibility.py.)"""
    w, c, d = world
    for i in range(10):  # the type's labels only, or another product of the type
        add_a100(kube, c, f"a100-{i}", product=None if i % 2 else "NVIDIA-A100-PCIe-80GB")
    add_a100(kube, c, "a100-sxm", product=SXM4)
    kube.update_node("a100-sxm", lambda n: n["spec"].__setitem__("unschedulable", True))
    settle(d, lambda: not next(n for n in c.list_nodes() if n.name == "a100-sxm").schedulable)
    apply(w, example("job.yaml"))
    settle(d, lambda: (r := job_row(sf, "eval-sweep")) is not None
           and "waits for nodes that are cordoned or not ready (a100-sxm)" in (r.reason or ""))
    for _ in range(3):
        d.run_once()
    row = job_row(sf, "eval-sweep")
    assert row.status == "pending", (row.status, row.reason)
    assert not pods_of(kube, "eval-sweep")
    assert not c.rejected.current()  # never placed on a node the bind check refused
    assert w.objects[("Job", "gpuq-jobs", "eval-sweep")]["spec"]["suspend"] is True
    kube.update_node("a100-sxm", lambda n: n["spec"].pop("unschedulable"))
    settle(d, lambda: len([p for p in pods_of(kube, "eval-sweep")
                           if p["spec"].get("nodeName")]) == 2)
    assert {p["spec"]["nodeName"] for p in pods_of(kube, "eval-sweep")} == {"a100-sxm"}
    assert not c.rejected.current()


def test_a_workload_pod_whose_image_never_pulls_frees_the_cards_at_the_start_deadline(
        kube, sf, world):
    """A Job's Pod stuck in ImagePullBackOff: its controller would wait forever while the
    workload keeps its cards (gpuq's own Pods were held to the start deadline, a
    workload's were not). Past the deadline the job fails with the kubelet's reason and
    the workload is suspended, its Pods go, its cards are free (Kueue ends the same wait
    with waitForPodsReady)."""
    w, c, d = world
    c.ks.start_deadline_s = 0.05
    add_a100(kube, c, "a100-0", product=SXM4)
    apply(w, example("job.yaml"))
    settle(d, lambda: len([p for p in pods_of(kube, "eval-sweep")
                           if p["spec"].get("nodeName")]) == 2)
    first = pods_of(kube, "eval-sweep")[0]
    kube.set_pod_phase(first["metadata"]["namespace"], first["metadata"]["name"], "Pending",
                       waiting={"reason": "ImagePullBackOff",
                                "message": "Back-off pulling image \"train:missing\""})
    settle(d, lambda: job_row(sf, "eval-sweep").status == "failed")
    row = job_row(sf, "eval-sweep")
    assert "ImagePullBackOff" in row.reason and "not started after" in row.reason, row.reason
    settle(d, lambda: w.objects[("Job", "gpuq-jobs", "eval-sweep")]["spec"]["suspend"] is True)
    with sf() as s:
        assert not s.scalars(select(AllocationRow).where(
            AllocationRow.job_id == row.id)).all()


def test_a_worker_that_drops_the_token_rule_while_it_waits_is_refused_at_bind(kube, sf, world):
    """The apiserver mounts the ServiceAccount token into a Pod whose spec leaves
    ``automountServiceAccountToken`` unset (the fake models the admission plug-in, as the
    real control plane shows in test_k8s_real_cluster.py): a PyTorchJob whose worker
    template drops ``false`` after it was queued gets Pods with a token, which the team
    may not mount; they are not bound and the job fails."""
    w, c, d = world
    _queue_then_change_the_worker(kube, sf, world, lambda worker: worker["spec"].pop(
        "automountServiceAccountToken"))
    reason = job_row(sf, "ddp-resnet").reason
    assert "may not mount a service account token" in reason, reason
    assert not [name for _, name, _ in kube.bindings if name.startswith("ddp-resnet")]

"""The workload adaptors and the request read from a Pod template (pure)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from app.cluster.workloads.adaptor import Unhonourable
from app.cluster.workloads.job import JobAdaptor
from app.cluster.workloads.jobset import JobSetAdaptor
from app.cluster.workloads.pytorchjob import PyTorchJobAdaptor
from app.cluster.workloads.requests import job_spec
from app.domain.spec import JobSpec
from tests.fakekube.objects import GPU_TYPES

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
PRIOS = ["P0", "P1", "P2"]


def ex(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def spec_of(obj: dict, adaptor=None) -> dict:
    a = adaptor or {"JobSet": JobSetAdaptor(), "PyTorchJob": PyTorchJobAdaptor()}.get(
        obj["kind"], JobAdaptor())
    body = job_spec(obj, a, team="nlp", gpu_types=GPU_TYPES, priorities=PRIOS)
    JobSpec.model_validate(body)  # what the front door submits is a valid job spec
    return body


def test_examples_read_as_one_gang_each():
    idx = spec_of(ex("indexed-job.yaml"))
    assert idx["replicas"] == 4 and idx["resources"]["gpus"] == 2
    assert idx["resources"]["gpu_types"] == ["a100-80g"] and idx["duration_estimate_s"] == 3600
    assert "schedulerName" not in idx["pod_template"]["spec"]
    assert "limits" not in idx["pod_template"]["spec"]["containers"][0]["resources"]
    plain = spec_of(ex("job.yaml"))
    # node affinity on the product -> the type; PriorityClass gpuq-p2 -> P2
    assert plain["resources"]["gpu_types"] == ["a100-80g"] and plain["priority"] == "P2"
    assert plain["resources"]["min_gpu_memory_gb"] == 40 and plain["replicas"] == 2
    js = spec_of(ex("jobset.yaml"))
    assert js["replicas"] == 4 and js["resources"]["gpus"] == 2


def test_mig_and_other_vendors():
    job = ex("job.yaml")
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    assert spec_of(job)["resources"]["mig"] == "1g.10gb"
    c["resources"]["limits"] = {"huawei.com/Ascend910": "4"}
    del job["spec"]["template"]["spec"]["affinity"]
    r = spec_of(job)["resources"]
    assert r["gpus"] == 4 and r["gpu_types"] == ["ascend910"]


@pytest.mark.parametrize("edit, says", [
    (lambda j: j["spec"].update(completions=8), "completions (8) exceed parallelism (2)"),
    (lambda j: j["spec"]["template"]["spec"].pop("schedulerName"), "schedulerName: gpuq"),
    (lambda j: j["metadata"]["annotations"].update({"gpuq.io/gpu-types": "h200"}),
     "unknown GPU type(s) h200"),
    (lambda j: j["spec"]["template"]["spec"].update(priorityClassName="high"),
     "priorityClassName 'high'"),
    (lambda j: j["metadata"]["annotations"].update({"gpuq.io/min-gpu-memory-gb": "lots"}),
     "is not a number"),
    (lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"].update(
        limits={"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}), "one MIG slice"),
])
def test_what_gpuq_cannot_honour_is_refused_with_the_reason(edit, says):
    job = copy.deepcopy(ex("job.yaml"))
    edit(job)
    with pytest.raises(Unhonourable, match=None) as e:
        spec_of(job)
    assert says in str(e.value)


def test_jobset_pod_sets_of_different_shapes_are_refused():
    js = ex("jobset.yaml")
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"] = copy.deepcopy(
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    w = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    w["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "4"}
    with pytest.raises(Unhonourable, match="different resources"):
        spec_of(js)


def test_pod_sets_that_select_nodes_differently_are_refused():
    """One gang is placed on one set of GPU types and every node of it is checked against
    one selection (the first set's): a worker set that asks for another product would be
    refused by its kubelet (NodeAffinity) on the nodes gpuq chose."""
    pt = ex("pytorchjob.yaml")
    specs = pt["spec"]["pytorchReplicaSpecs"]
    worker = specs["Worker"]["template"] = copy.deepcopy(specs["Worker"]["template"])
    worker["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    with pytest.raises(Unhonourable, match="the pod sets select nodes differently"):
        spec_of(pt)
    specs["Master"]["template"] = copy.deepcopy(worker)  # the same on both: accepted
    assert spec_of(pt)["resources"]["gpu_types"] == ["a100-80g"]


def test_admit_and_suspend_patches():
    a = JobAdaptor()
    job = ex("indexed-job.yaml")
    p = a.admit_patch(job, {"gpuq.io/job-id": "7"})
    assert p["spec"]["suspend"] is False
    assert p["spec"]["template"]["metadata"]["labels"] == {"gpuq.io/job-id": "7"}
    assert a.suspend_patch(job) == {"spec": {"suspend": True}}
    js = ex("jobset.yaml")
    p = JobSetAdaptor().admit_patch(js, {"gpuq.io/job-id": "8"})
    assert all(rj["template"]["spec"]["template"]["metadata"]["labels"]["gpuq.io/job-id"] == "8"
               for rj in p["spec"]["replicatedJobs"])
    assert "labels" not in (js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
                            .get("metadata") or {})  # the object itself is left alone


def test_pytorchjob_is_one_gang_master_first():
    pt = ex("pytorchjob.yaml")
    body = spec_of(pt)
    assert body["replicas"] == 4 and body["resources"]["gpus"] == 2
    assert body["resources"]["gpu_types"] == ["a100-80g"]
    assert body["duration_estimate_s"] == 1800
    a = PyTorchJobAdaptor()
    assert a.suspended(pt) and [(s.name, s.count) for s in a.pod_sets(pt)] == [
        ("master", 1), ("worker", 3)]
    patch = a.admit_patch(pt, {"gpuq.io/job-id": "9"})
    assert patch["spec"]["runPolicy"] == {"suspend": False}
    for rtype in ("Master", "Worker"):
        labels = patch["spec"]["pytorchReplicaSpecs"][rtype]["template"]["metadata"]["labels"]
        assert labels == {"gpuq.io/job-id": "9"}
    assert a.suspend_patch(pt) == {"spec": {"runPolicy": {"suspend": True}}}
    pods = [{"metadata": {"name": n, "labels": {
        "training.kubeflow.org/replica-type": t, "training.kubeflow.org/replica-index": i}}}
        for n, t, i in [("w1", "worker", "1"), ("m0", "master", "0"), ("w0", "worker", "0")]]
    assert [p["metadata"]["name"] for p in sorted(pods, key=a.pod_order)] == ["m0", "w0", "w1"]
    assert a.finished({"status": {"conditions": [
        {"type": "Succeeded", "status": "True"}]}}) == ("succeeded", "PyTorchJob succeeded")


@pytest.mark.parametrize("edit, says", [
    (lambda j: j["spec"].update(elasticPolicy={"minReplicas": 1}), "elastic"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"].update(Chief={}), "unknown replica type"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
     "Master replicas must be 1"),
    (lambda j: j["spec"].update(pytorchReplicaSpecs={}), "needs pytorchReplicaSpecs"),
])
def test_pytorchjob_refusals(edit, says):
    pt = copy.deepcopy(ex("pytorchjob.yaml"))
    edit(pt)
    with pytest.raises(Unhonourable, match=says):
        PyTorchJobAdaptor().pod_sets(pt)


def test_an_unknown_workload_kind_is_refused_at_start(monkeypatch) -> None:
    """A kind with no adaptor would never be queued: the setting names the known ones."""
    import pydantic

    from app.cluster.k8s_settings import KubeSettings

    monkeypatch.setenv("GPUQ_K8S_WORKLOAD_KINDS", "Job,MPIJob")
    with pytest.raises(pydantic.ValidationError, match=r"MPIJob.*known: Job, JobSet, PyTorchJob"):
        KubeSettings()
    monkeypatch.setenv("GPUQ_K8S_WORKLOAD_KINDS", "Job,PyTorchJob")
    assert KubeSettings().workload_kinds == ["Job", "PyTorchJob"]


def test_a_container_without_a_card_must_say_it_sees_none():
    """gpuq puts NVIDIA_VISIBLE_DEVICES=void on every container of its own Pods that gets
    no card; a workload's Pods are made by its controller, so the template must: else a
    sidecar whose image says ``all`` (CUDA images do) sees every card of its node."""
    job = ex("job.yaml")
    spec = job["spec"]["template"]["spec"]
    sidecar = {"name": "logs", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
               "securityContext": spec["containers"][0]["securityContext"]}
    spec["containers"].append(sidecar)
    spec["initContainers"] = [{**sidecar, "name": "fetch"}]
    with pytest.raises(Unhonourable, match=r"pod set main: container\(s\) fetch, logs get no "
                                           r"card: give each the env NVIDIA_VISIBLE_DEVICES=void"):
        spec_of(job)
    void = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    sidecar["env"] = [void]
    with pytest.raises(Unhonourable, match=r"container\(s\) fetch get"):
        spec_of(job)
    spec["initContainers"] = [{**sidecar, "name": "fetch"}]
    body = spec_of(job)
    # what the policy then reads has no device variable left (gpuq's own value)
    got = body["pod_template"]["spec"]
    assert all("env" not in c or void not in c["env"]
               for c in got["containers"] + got["initContainers"])
    assert body["resources"]["gpus"] == 1


def test_a_workloads_deadline_is_its_time_limit():
    """``activeDeadlineSeconds`` (a Job's, a PyTorchJob's runPolicy's, the shortest of a
    JobSet's replicated jobs') becomes the job's ``time_limit_s``: its controller ends it
    there anyway, so gpuq plans with it; none, a non-number or one past a year: none."""
    job = ex("job.yaml")
    assert "time_limit_s" not in spec_of(job)
    job["spec"]["activeDeadlineSeconds"] = 7200
    assert spec_of(job)["time_limit_s"] == 7200.0
    for bad in ("7200", 0, True, 366 * 86400):
        job["spec"]["activeDeadlineSeconds"] = bad
        assert "time_limit_s" not in spec_of(job), bad
    pt = ex("pytorchjob.yaml")
    pt["spec"]["runPolicy"]["activeDeadlineSeconds"] = 900
    body = spec_of(pt)
    assert body["time_limit_s"] == 900.0 and body["duration_estimate_s"] == 1800
    js = ex("jobset.yaml")
    assert "time_limit_s" not in spec_of(js)
    rjobs = js["spec"]["replicatedJobs"]
    rjobs[0]["template"]["spec"]["activeDeadlineSeconds"] = 600
    if len(rjobs) > 1:
        rjobs[1]["template"]["spec"]["activeDeadlineSeconds"] = 300
    assert spec_of(js)["time_limit_s"] == (300.0 if len(rjobs) > 1 else 600.0)

"""The Pod gpuq builds for one replica, and the job phase read back (pure)."""

from __future__ import annotations

import pytest

from app.cluster.interface import BindRequest
from app.cluster.k8s_devices import MIG_SINGLE, DeviceLayer, UnsupportedDevice
from app.cluster.k8s_pods import accelerator_resources, build_pod, job_phase, stuck_reason
from app.cluster.k8s_settings import KubeSettings
from app.domain.from_config import gpu_type_from_config
from app.scheduling.model import ReplicaPlacement
from tests.fakekube.objects import GPU_TYPES

KS = KubeSettings()
TYPES = {t.name: gpu_type_from_config(t) for t in GPU_TYPES}


def req(placements, template=None):
    return BindRequest(
        job_id="0f1e2d3c-aaaa-bbbb-cccc-000000000001", name="sft-llama", team="nlp",
        pool="training", priority="P1", placements=placements,
        pod_template=template or {}, world_size=len(placements), duration_s=120,
    )


def env(c):
    return {e["name"]: e.get("value") for e in c["env"]}


def test_whole_gpu_pod_fields():
    p = ReplicaPlacement(replica=1, node="a100-3", gpu_type="a100-80g", devices=(4, 5),
                         units=20, cpu=16, memory_gb=128)
    template = {
        "metadata": {"labels": {"app": "llm"}, "namespace": "nlp"},
        "spec": {"containers": [{"name": "train", "image": "trainer:1",
                                 "env": [{"name": "X", "value": "1"}]},
                                {"name": "sidecar", "image": "log:1"}],
                 "tolerations": [{"key": "team", "operator": "Exists"}],
                 "nodeName": "ignored"},
    }
    r = req([ReplicaPlacement(0, "a100-2", "a100-80g", (0, 1)), p], template)
    pod = build_pod(r, p, bind_id="abcde", gpu_type=TYPES["a100-80g"],
                    node_taints=[{"key": "nvidia.com/gpu", "value": "present",
                                  "effect": "NoSchedule"}], ks=KS)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == "nlp" and meta["name"] == "sft-llama-0f1e2d3c-abcde-1"
    assert meta["labels"]["app"] == "llm"
    assert meta["labels"]["gpuq.io/job-id"] == r.job_id
    assert {k: meta["labels"][k] for k in ("gpuq.io/replica", "gpuq.io/team", "gpuq.io/pool",
                                           "gpuq.io/priority")} == {
        "gpuq.io/replica": "1", "gpuq.io/team": "nlp", "gpuq.io/pool": "training",
        "gpuq.io/priority": "P1"}
    assert meta["annotations"]["gpuq.io/devices"] == "4,5"
    assert spec["schedulerName"] == "gpuq" and "nodeName" not in spec
    assert spec["priorityClassName"] == "gpuq-p1"
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal",
            "value": "present"} in spec["tolerations"]
    assert {"key": "team", "operator": "Exists"} in spec["tolerations"]
    main = spec["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert main["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert main["resources"]["requests"]["cpu"] == "16"
    e = env(main)
    assert e["X"] == "1" and e["GPUQ_GPU_TYPE"] == "a100-80g"
    assert (e["GPUQ_WORLD_SIZE"], e["GPUQ_RANK"], e["GPUQ_GPUS"]) == ("2", "1", "2")
    assert "resources" not in spec["containers"][1]  # devices go to the workload only
    assert env(spec["containers"][1])["GPUQ_RANK"] == "1"


def test_a_pod_says_nothing_twice():
    """What the object already says is not written again (build_pod: every byte is
    decoded, stored, tracked in managedFields and sent to every watcher)."""
    one = ReplicaPlacement(0, "a100-2", "a100-80g", (0,))
    pod = build_pod(req([one]), one, bind_id="abcde", gpu_type=TYPES["a100-80g"], ks=KS,
                    bound=True)
    ann, spec = pod["metadata"]["annotations"], pod["spec"]
    assert spec["nodeName"] == "a100-2"
    # the node is spec.nodeName's, the id the label's (k8s_labels.job_id_of)
    assert ann == {"gpuq.io/gpu-type": "a100-80g", "gpuq.io/devices": "0"}
    e = env(spec["containers"][0])
    assert e["GPUQ_NODE_NAME"] == "a100-2" and "GPUQ_GPU_SHARE" not in e
    # a gang's Pod is created unbound: its node is on it until the Binding
    gang = req([one, ReplicaPlacement(1, "a100-3", "a100-80g", (0,))])
    pod = build_pod(gang, gang.placements[1], bind_id="abcde", gpu_type=TYPES["a100-80g"],
                    ks=KS)
    assert "nodeName" not in pod["spec"]
    assert pod["metadata"]["annotations"]["gpuq.io/node"] == "a100-3"
    # an id no label value can hold exactly keeps its annotation
    odd = BindRequest(job_id="team/job#7", name="x", team="nlp", pool="training",
                      priority="P1", placements=[one])
    pod = build_pod(odd, one, bind_id="abcde", gpu_type=TYPES["a100-80g"], ks=KS, bound=True)
    assert pod["metadata"]["annotations"]["gpuq.io/job-id"] == "team/job#7"


def test_mig_and_other_vendor_resources_and_no_share_pod():
    mig = ReplicaPlacement(0, "n", "a100-80g", mig=((6, 0, "3g.40gb"), (6, 1, "3g.40gb")))
    assert accelerator_resources(mig, TYPES["a100-80g"]) == {"nvidia.com/mig-3g.40gb": "2"}
    # the MIG single strategy advertises each slice as nvidia.com/gpu
    single = DeviceLayer(MIG_SINGLE, mig_profile="3g.40gb")
    assert accelerator_resources(mig, TYPES["a100-80g"], single) == {"nvidia.com/gpu": "2"}
    # A share used to ask for HAMi's nvidia.com/gpumem/gpucores: HAMi's Allocate refuses a
    # Pod its scheduler did not annotate, and without HAMi the kubelet gave a whole card.
    share = ReplicaPlacement(0, "n", "rtx4090-24g", devices=(0,), share=0.5,
                             share_memory_gb=12)
    with pytest.raises(UnsupportedDevice, match="gpu_share is not available"):
        accelerator_resources(share, TYPES["rtx4090-24g"])
    asc = ReplicaPlacement(0, "n", "ascend910", devices=(0, 1, 2))
    assert accelerator_resources(asc, TYPES["ascend910"]) == {"huawei.com/Ascend910": "3"}
    cpu_only = ReplicaPlacement(0, "n", None, cpu=2)
    assert accelerator_resources(cpu_only, None) == {}


def test_empty_template_gets_a_default_container_and_namespace():
    p = ReplicaPlacement(0, "n", None, cpu=1, memory_gb=2)
    pod = build_pod(req([p]), p, bind_id="x1", gpu_type=None, ks=KS)
    c = pod["spec"]["containers"][0]
    assert pod["metadata"]["namespace"] == "gpuq-jobs"
    assert c["image"] == KS.default_image and c["command"] == ["sleep", "120"]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "2000000000"}}
    assert pod["spec"]["restartPolicy"] == "Never" and "tolerations" not in pod["spec"]


def test_bare_podspec_template():
    p = ReplicaPlacement(0, "n", None)
    pod = build_pod(req([p], {"containers": [{"name": "a", "image": "i"}]}), p, bind_id="x",
                    gpu_type=None, ks=KS)
    assert pod["spec"]["containers"][0]["image"] == "i"


def _pod(phase, name="p", **status):
    return {"metadata": {"name": name}, "status": {"phase": phase, **status}}


def test_job_phase_rules():
    assert job_phase([_pod("Pending"), _pod("Pending")], 2) == ("pending", "")
    # a gang with one replica still Pending (image pull back-off) is not running
    assert job_phase([_pod("Running"), _pod("Pending")], 2) == ("pending", "")
    assert job_phase([_pod("Succeeded"), _pod("Running")], 2) == ("running", "")
    assert job_phase([_pod("Succeeded"), _pod("Succeeded")], 2) == ("succeeded", "")
    assert job_phase([_pod("Succeeded")], 2)[0] == "pending"  # one replica is not all of them
    failed = _pod("Failed", "w-1", containerStatuses=[
        {"name": "main", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    phase, msg = job_phase([_pod("Running"), failed], 2)
    assert phase == "failed" and "OOMKilled" in msg and "w-1" in msg


def test_disruptions_requeue_and_the_workloads_own_failures_fail():
    """Each termination class of docs/operations.md's table."""
    def cond(reason):
        return {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                "reason": reason, "message": "m"}]}
    for reason in ("EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager",
                   "DeletionByPodGC", "TerminationByKubelet"):
        phase, msg = job_phase([_pod("Failed", "w-0", **cond(reason)), _pod("Running")], 2)
        assert phase == "gone" and reason in msg and "w-0" in msg
    # a lost node: Terminating, still Running, marked by the taint manager
    assert job_phase([_pod("Running", **cond("DeletionByTaintManager"))], 1)[0] == "gone"
    for reason in ("Evicted", "OutOfnvidia.com/gpu", "NodeAffinity", "UnexpectedAdmissionError",
                   "NodeShutdown"):
        phase, msg = job_phase([_pod("Failed", reason=reason, message="kubelet says")], 1)
        assert phase == "gone" and reason in msg, reason
    err = _pod("Failed", containerStatuses=[
        {"name": "main", "state": {"terminated": {"reason": "Error", "exitCode": 2}}}])
    assert job_phase([err], 1) == ("failed", "pod p: container main: Error, exit code 2")
    stuck = _pod("Pending", containerStatuses=[
        {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "x"}}}])
    assert stuck_reason(stuck) == "container main: ImagePullBackOff: x"
    assert stuck_reason(_pod("Pending")) is None


def test_restart_policy_is_gpuqs_own():
    p = ReplicaPlacement(0, "n", None)
    pod = build_pod(req([p], {"containers": [{"name": "a", "image": "i"}],
                              "restartPolicy": "OnFailure"}), p, bind_id="x",
                    gpu_type=None, ks=KS)
    assert pod["spec"]["restartPolicy"] == "Never"


def test_job_labels_go_on_every_pod_over_the_template_but_under_gpuqs_own():
    p = ReplicaPlacement(0, "a100-2", "a100-80g", (0,), units=10)
    r = req([p], {"metadata": {"labels": {"app": "llm", "tier": "batch"}},
                  "spec": {"containers": [{"name": "a", "image": "i"}]}})
    r.labels.update({"app": "sft", "example.com/experiment": "e-42"})
    labels = build_pod(r, p, bind_id="x", gpu_type=TYPES["a100-80g"], ks=KS)["metadata"]["labels"]
    assert labels["app"] == "sft" and labels["tier"] == "batch"
    assert labels["example.com/experiment"] == "e-42"
    assert labels["gpuq.io/team"] == "nlp" and labels["app.kubernetes.io/managed-by"] == "gpuq"


def test_bind_request_carries_the_specs_labels():
    from types import SimpleNamespace

    from app.dispatch.plan import bind_request

    row = SimpleNamespace(id=7, name="a", team="nlp", pool="training", priority="P1",
                          submitted_by=None, idempotency_key=None, revision=41,
                          spec={"labels": {"exp": "1"}, "pod_template": {}})
    p = ReplicaPlacement(0, "a100-2", "a100-80g", (0,), units=10)
    assert bind_request(row, [p]).labels == {"exp": "1"}


def test_a_container_without_a_card_sees_none_of_the_nodes():
    """A container the device plugin gives no card (a sidecar, an init container, a job
    without GPUs) saw every card of its GPU node under the NVIDIA runtime when its image
    set NVIDIA_VISIBLE_DEVICES=all (CUDA base images do); "void" makes the runtime act as
    runc (nvidia-container-toolkit internal/config/image/devices.go)."""
    from app.domain.pod_policy import PodPolicy, check_pod

    one = ReplicaPlacement(0, "a100-2", "a100-80g", (0, 1), units=20)
    template = {"spec": {"initContainers": [{"name": "fetch", "image": "cuda:12"}],
                         "containers": [{"name": "train", "image": "cuda:12"},
                                        {"name": "logs", "image": "cuda:12"}]}}
    pod = build_pod(req([one], template), one, bind_id="abcde", gpu_type=TYPES["a100-80g"],
                    ks=KS)
    spec = pod["spec"]
    assert "NVIDIA_VISIBLE_DEVICES" not in env(spec["containers"][0])  # the device plugin's
    assert env(spec["containers"][1])["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env(spec["initContainers"][0])["NVIDIA_VISIBLE_DEVICES"] == "void"
    # a job without GPUs on a GPU node (scheduler.cpu_jobs_on_gpu_nodes)
    cpu = ReplicaPlacement(0, "a100-2", None, (), cpu=2)
    pod0 = build_pod(req([cpu]), cpu, bind_id="abcde", gpu_type=None, ks=KS)
    assert [env(c)["NVIDIA_VISIBLE_DEVICES"] for c in pod0["spec"]["containers"]] == ["void"]
    # gpuq's own value passes the check at bind; a template's is still refused
    policy = PodPolicy(level="privileged")
    assert check_pod(pod, policy) == [] and check_pod(pod0, policy) == []
    spec["containers"][1]["env"][-1] = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
    assert [v.path for v in check_pod(pod, policy)] == [
        f"spec.containers[1].env[{len(spec['containers'][1]['env']) - 1}].name"]

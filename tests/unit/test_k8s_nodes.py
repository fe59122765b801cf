"""Node sync: Kubernetes Node + Pods JSON -> the core's Node (pure)."""

from __future__ import annotations

from app.cluster.k8s_nodes import match_gpu_type, memory_label_gb, node_view, pod_requests
from app.cluster.k8s_settings import KubeSettings
from tests.fakekube.objects import GPU_TYPES, article_a100, gfd_v100, node, pod

KS = KubeSettings()


def view(n, pods=()):
    return node_view(n, pods, GPU_TYPES, KS)


def test_article_labels_give_type_rack_network():
    v = view(article_a100())
    assert v.node.gpu_type == "a100-80g"
    assert len(v.node.devices) == 8 and v.node.free_whole_devices() == list(range(8))
    assert (v.node.rack, v.node.network) == ("r1", "ib")
    assert v.node.cpu == 64 and round(v.node.memory_gb, 1) == 549.8  # 512Gi in GB
    assert v.node.schedulable and v.unmatched_product is None


def test_gfd_labels_match_by_name_tokens_and_memory_mib():
    v = view(gfd_v100())
    assert v.node.gpu_type == "v100-16g" and len(v.node.devices) == 4
    assert v.node.rack == "zone-b" and v.node.network == "eth"


def test_gfd_product_matched_by_regex():
    n = node("g", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                   "nvidia.com/gpu.memory": "81920"}, {"nvidia.com/gpu": "8"})
    assert view(n).node.gpu_type == "a100-80g"


def test_unknown_product_is_reported_not_dropped():
    n = node("h", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "8"})
    v = view(n)
    assert v.unmatched_product == "NVIDIA-H100-80GB-HBM3"
    assert v.node.gpu_type is None and v.node.devices == []
    assert v.node.cpu == 64  # the node still counts for CPU-only work


def test_article_label_with_unknown_type_is_reported():
    v = view(node("x", {"gpu-type": "mi300", "gpu-memory": "192g"}, {"amd.com/gpu": "8"}))
    assert v.unmatched_product == "mi300"


def test_other_vendor_through_resource_name():
    v = view(node("asc", {}, {"huawei.com/Ascend910": "8"}))
    assert v.node.gpu_type == "ascend910" and len(v.node.devices) == 8


def test_mig_mixed_strategy_resources_become_slices():
    n = node("mig", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                     "nvidia.com/gpu.count": "8"},
             {"nvidia.com/gpu": "6", "nvidia.com/mig-3g.40gb": "4",
              "nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-7g.80gb": "1"})
    v = view(n)
    whole = [d for d in v.node.devices if not d.mig_layout]
    mig = [d for d in v.node.devices if d.mig_layout]
    assert len(whole) == 6 and len(mig) == 2
    assert sorted(p for d in mig for p in d.mig_layout) == ["1g.10gb"] + ["3g.40gb"] * 4
    assert [d.index for d in v.node.devices] == list(range(8))
    assert v.unknown_mig == ["7g.80gb"]


def test_cordoned_notready_are_not_schedulable_tainted_need_a_toleration():
    assert not view(article_a100(unschedulable=True)).node.schedulable
    assert not view(article_a100(ready=False)).node.schedulable
    # a taint keeps the node for the jobs whose template tolerates it (placement's
    # filter); it used to exclude the node even for them
    t = view(article_a100(taints=[{"key": "maintenance", "effect": "NoSchedule"}]))
    assert t.node.schedulable and t.node.taints == (("maintenance", "", "NoSchedule"),)
    # the usual GPU taint is tolerated by gpuq's Pods; PreferNoSchedule is only a preference
    ok = view(article_a100(taints=[{"key": "nvidia.com/gpu", "value": "present",
                                     "effect": "NoSchedule"},
                                    {"key": "soft", "effect": "PreferNoSchedule"}]))
    assert ok.node.schedulable and ok.node.taints == ()


def test_pods_not_managed_by_gpuq_count_as_used():
    pods = [
        pod("ext", "a100-0", {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}),
        pod("done", "a100-0", {"cpu": "8", "nvidia.com/gpu": "1"}, phase="Succeeded"),
        pod(
            "gpuq-own", "a100-0", {"cpu": "8", "nvidia.com/gpu": "1"},
            labels={"app.kubernetes.io/managed-by": "gpuq", "gpuq.io/job-id": "j1"},
        ),
    ]
    pods[2]["metadata"]["annotations"] = {"gpuq.io/devices": "7"}
    v = view(article_a100(), pods)
    assert v.node.cpu_used == 4 and round(v.node.memory_used_gb, 2) == 17.18
    external = [d.index for d in v.node.devices if d.external]
    assert external == [5, 6]  # highest first, never a card gpuq's own Pod holds (7)


def test_external_mig_slices_are_used():
    n = node("mig", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                     "nvidia.com/gpu.count": "1"}, {"nvidia.com/mig-3g.40gb": "2"})
    v = view(n, [pod("ext", "mig", {"nvidia.com/mig-3g.40gb": "1"})])
    assert sum(s for d in v.node.devices for s in d.slices_used) == 1


def test_pod_requests_init_containers_and_limits_only_extended():
    p = pod("x", "n", {"cpu": "500m"})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    p["spec"]["containers"].append({"name": "g", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    r = pod_requests(p)
    assert r["cpu"] == 2 and r["nvidia.com/gpu"] == 1


def test_memory_label_and_matching_helpers():
    assert memory_label_gb("80g") == 80 and memory_label_gb("16Gi") == 16
    assert memory_label_gb("24576Mi") == 24 and memory_label_gb("lots") is None
    assert match_gpu_type("GeForce-RTX-4090", 24, GPU_TYPES).name == "rtx4090-24g"
    assert match_gpu_type("a100", 40, GPU_TYPES) is None  # 40 GB card is not the 80 GB type


def test_single_type_cluster_needs_no_labels():
    from app.domain.config import GpuTypeConfig

    only = [GpuTypeConfig(name="l4-24g", memory_gb=24, weight=3)]
    v = node_view(node("l4", {}, {"nvidia.com/gpu": "2"}), [], only, KS)
    assert v.node.gpu_type == "l4-24g"


def test_label_keys_are_configurable_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUQ_K8S_RACK_LABELS", "example.com/rack, topology.kubernetes.io/zone")
    monkeypatch.setenv("GPUQ_K8S_NETWORK_LABEL", "example.com/fabric")
    monkeypatch.setenv("GPUQ_K8S_TOLERATED_TAINTS", "nvidia.com/gpu,dedicated")
    ks = KubeSettings()
    assert ks.rack_labels == ["example.com/rack", "topology.kubernetes.io/zone"]
    n = article_a100(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    n["metadata"]["labels"].update({"example.com/rack": "rack-9", "example.com/fabric": "roce"})
    v = node_view(n, [], GPU_TYPES, ks)
    assert (v.node.rack, v.node.network, v.node.schedulable) == ("rack-9", "roce", True)


def test_cards_held_by_gpuq_that_vanished_stay_in_the_model():
    """A card went unhealthy (allocatable 8 -> 6) under a running gpuq job that
    holds devices 6 and 7: the core must still be able to account for it."""
    from app.scheduling.model import ReplicaPlacement
    from app.scheduling.state import ClusterState

    own = pod("gpuq-own", "a100-0", {"nvidia.com/gpu": "2"},
              labels={"app.kubernetes.io/managed-by": "gpuq", "gpuq.io/job-id": "j1"})
    own["metadata"]["annotations"] = {"gpuq.io/devices": "6,7"}
    mig = pod("gpuq-mig", "a100-0", {"nvidia.com/mig-3g.40gb": "1"},
              labels={"app.kubernetes.io/managed-by": "gpuq", "gpuq.io/job-id": "j2"})
    mig["metadata"]["annotations"] = {"gpuq.io/mig": "9:1:3g.40gb"}
    v = view(article_a100(gpus=6), [own, mig])
    assert len(v.node.devices) == 10
    assert v.node.free_whole_devices() == list(range(6))  # never offered again
    state = ClusterState([v.node])
    state.apply(ReplicaPlacement(0, "a100-0", "a100-80g", devices=(6, 7)))
    state.apply(ReplicaPlacement(0, "a100-0", "a100-80g", mig=((9, 1, "3g.40gb"),)))
    state.unapply(ReplicaPlacement(0, "a100-0", "a100-80g", devices=(6, 7)))
    assert state.nodes["a100-0"].free_whole_devices() == list(range(6))

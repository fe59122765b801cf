"""Node sync through the official client against the fake API server."""

from __future__ import annotations

from prometheus_client import REGISTRY

from tests.fakekube.fixtures import cluster, wait_until
from tests.fakekube.objects import article_a100, gfd_v100, node, pod
from tests.realkube.both import BOTH, kube


def _by_name(c):
    return {n.name: n for n in c.list_nodes()}


@BOTH
def test_sync_both_label_styles_and_follow_watch(kube, cluster):
    kube.add_node(article_a100("a100-0"))
    kube.add_node(gfd_v100("v100-0"))
    wait_until(lambda: len(cluster.list_nodes()) == 2)
    nodes = _by_name(cluster)
    assert nodes["a100-0"].gpu_type == "a100-80g" and len(nodes["a100-0"].devices) == 8
    assert nodes["v100-0"].gpu_type == "v100-16g" and nodes["v100-0"].rack == "zone-b"

    # cordon through the watch
    kube.update_node("a100-0", lambda n: n["spec"].__setitem__("unschedulable", True))
    wait_until(lambda: not _by_name(cluster)["a100-0"].schedulable)
    # a Pod gpuq does not manage takes two cards
    kube.add_pod(pod("notebook", "v100-0", {"cpu": "2", "nvidia.com/gpu": "2"}))
    wait_until(lambda: len(_by_name(cluster)["v100-0"].free_whole_devices()) == 2)
    assert _by_name(cluster)["v100-0"].cpu_used == 2
    kube.delete_node("v100-0")
    wait_until(lambda: "v100-0" not in _by_name(cluster))


def test_unmatched_product_gets_event_and_metric(kube, cluster):
    kube.add_node(node("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                       {"nvidia.com/gpu": "8"}))
    wait_until(lambda: cluster.list_nodes())
    cluster.list_nodes()
    cluster.list_nodes()  # reported once, however often nodes are listed
    assert cluster.unmatched == {"h100-0": "NVIDIA-H100-80GB-HBM3"}
    events = [e for e in kube.k8s_events if e["reason"] == "GpuqUnknownGpuProduct"]
    assert len(events) == 1
    assert events[0]["involvedObject"] == {"kind": "Node", "apiVersion": "v1", "name": "h100-0"}
    value = REGISTRY.get_sample_value(
        "gpuq_k8s_unmatched_gpu_nodes", {"product": "NVIDIA-H100-80GB-HBM3"}
    )
    assert value == 1

"""The fake API server's kubelet admission (tests/fakekube/kubelet.py) against what
pkg/kubelet/lifecycle/predicate.go does: the cases gpuq's old Pods ran into."""

from __future__ import annotations

from tests.fakekube import kubelet
from tests.fakekube.objects import article_a100, pod


def bound(name, requests, node="a100-0"):
    return pod(name, node, requests)


def test_unknown_extended_resources_are_dropped_so_a_share_took_a_whole_card():
    # the old HAMi-style Pod of `gpu_share: 0.25` on a node without HAMi: the kubelet
    # drops nvidia.com/gpumem/gpucores (removeMissingExtendedResources) and the Pod
    # gets one whole card; four such shares take four cards
    n = article_a100(gpus=4)
    share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6144", "nvidia.com/gpucores": "25"}
    pods = [bound(f"s{i}", share) for i in range(4)]
    assert kubelet.requests_on(n, pods[0]) == {"nvidia.com/gpu": 1}
    assert all(kubelet.admit(n, p, pods[:i]) is None for i, p in enumerate(pods))
    assert kubelet.used(n, pods)["nvidia.com/gpu"] == 4
    # ... and the next whole-card Pod is refused, as OutOfnvidia.com/gpu
    reason, message = kubelet.admit(n, bound("w", {"nvidia.com/gpu": "1"}), pods)
    assert reason == "OutOfnvidia.com/gpu" and "capacity: 4" in message


def test_sidecars_count_and_node_affinity_is_checked():
    n = article_a100(gpus=8)  # 64 CPU
    big = bound("big", {"cpu": "60"})
    side = pod("side", "a100-0", {"cpu": "2"})
    side["spec"]["initContainers"] = [{"name": "proxy", "image": "x", "restartPolicy": "Always",
                                       "resources": {"requests": {"cpu": "3"}}}]
    assert kubelet.admit(n, side, [big])[0] == "OutOfcpu"  # 60 + 2 + 3 > 64
    sel = bound("sel", {"cpu": "1"})
    sel["spec"]["nodeSelector"] = {"disktype": "ssd"}
    assert kubelet.admit(n, sel, [])[0] == "NodeAffinity"
    finished = bound("done", {"cpu": "60"})
    finished["status"]["phase"] = "Succeeded"
    assert kubelet.admit(n, side, [finished]) is None  # finished Pods hold nothing

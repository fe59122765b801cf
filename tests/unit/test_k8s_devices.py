"""One device model per sharing mechanism, read from the labels GPU Feature Discovery
and HAMi write (k8s-device-plugin internal/lm/resource.go and mig-strategy.go; HAMi
pkg/device/nvidia/device.go): each mode is either booked exactly or not offered."""

from __future__ import annotations

from app.cluster.k8s_devices import (
    DRA,
    EXCLUSIVE,
    HAMI,
    MIG_MIXED,
    MIG_SINGLE,
    MPS,
    TIME_SLICING,
    device_layer,
)
from app.cluster.k8s_nodes import node_view
from app.cluster.k8s_settings import KubeSettings
from tests.fakekube.objects import GPU_TYPES, gfd_v100, node, pod

KS = KubeSettings()
A100 = "NVIDIA-A100-SXM4-80GB"


def view(n, pods=()):
    return node_view(n, pods, GPU_TYPES, KS)


def test_whole_cards_are_exclusive_and_the_node_picks_the_card():
    v = view(gfd_v100())
    assert v.layer.mode == EXCLUSIVE and v.layer.offered
    assert v.node.device_layer == {"mode": "exclusive", "offered": True,
                                   "device_choice": "node", "cards": 4}
    assert len(v.node.devices) == 4


def test_time_slicing_replicas_are_not_counted_as_cards():
    # 4 cards x 4 replicas: allocatable 16, GFD appends -SHARED to the product
    n = node("ts", {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB-SHARED",
                    "nvidia.com/gpu.memory": "16384", "nvidia.com/gpu.count": "4",
                    "nvidia.com/gpu.replicas": "4",
                    "nvidia.com/gpu.sharing-strategy": "time-slicing"},
             {"nvidia.com/gpu": "16"})
    v = view(n)
    assert v.layer.mode == TIME_SLICING and v.layer.replicas == 4 and v.layer.cards == 4
    assert not v.layer.offered and "time-slicing" in v.layer.detail
    # the old model offered 16 whole 16 GB cards; the node has none to give exclusively
    assert v.node.devices == [] and v.node.gpu_type is None
    assert v.unmatched_product is None  # the product is known, the mode is refused
    assert v.node.device_layer["replicas"] == 4 and not v.node.device_layer["offered"]


def test_mps_replicas_and_a_renamed_resource():
    n = node("mps", {"nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "8",
                     "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps"},
             {"nvidia.com/gpu.shared": "16"})
    v = view(n)
    assert v.layer.mode == MPS and v.node.devices == []


def test_hami_node_is_recognised_by_its_register_annotation():
    n = node("hami", {"nvidia.com/gpu.product": A100}, {"nvidia.com/gpu": "20"})
    n["metadata"]["annotations"] = {
        "hami.io/node-nvidia-register":
            "GPU-a,10,81920,100,NVIDIA-A100-SXM4-80GB,0,true:"
            "GPU-b,10,81920,100,NVIDIA-A100-SXM4-80GB,0,true:"}
    v = view(n)
    assert (v.layer.mode, v.layer.cards, v.layer.replicas) == (HAMI, 2, 10)
    assert v.node.devices == [] and "hami.io/vgpu-devices-to-allocate" in v.layer.detail


def test_mig_single_strategy_slices_are_nvidia_com_gpu():
    # GFD under mig-strategy=single: product <model>-MIG-<profile>, count = slices,
    # memory = the slice's (so it must not be compared with the card's)
    n = node("single", {"nvidia.com/mig.strategy": "single",
                        "nvidia.com/gpu.product": A100 + "-MIG-3g.40gb",
                        "nvidia.com/gpu.memory": "40192", "nvidia.com/gpu.count": "4"},
             {"nvidia.com/gpu": "4"})
    v = view(n)
    assert v.layer.mode == MIG_SINGLE and v.layer.mig_profile == "3g.40gb"
    assert v.node.gpu_type == "a100-80g"
    assert [d.mig_layout for d in v.node.devices] == [("3g.40gb", "3g.40gb")] * 2
    # another workload's nvidia.com/gpu: 1 there is one slice, not a card
    other = pod("o", "single", {"nvidia.com/gpu": "1"})
    used = view(n, [other]).node.devices
    assert sum(s for d in used for s in d.slices_used) == 1


def test_mig_single_invalid_offers_nothing():
    n = node("bad", {"nvidia.com/mig.strategy": "single",
                     "nvidia.com/gpu.product": A100 + "-MIG-INVALID",
                     "nvidia.com/gpu.count": "0"}, {})
    v = view(n)
    assert v.layer.mode == MIG_SINGLE and not v.layer.offered and v.node.devices == []


def test_mig_mixed_is_offered():
    n = node("mixed", {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": A100,
                       "nvidia.com/gpu.count": "2"},
             {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"})
    v = view(n)
    assert v.layer.mode == MIG_MIXED and v.layer.offered and len(v.node.devices) == 2


def test_gpus_present_without_a_device_plugin_resource_is_dra_or_no_plugin():
    layer = device_layer({"nvidia.com/gpu.present": "true"}, {}, {"cpu": "8"})
    assert layer.mode == DRA and not layer.offered and "ResourceSlices" in layer.detail
    # a CPU node is simply exclusive with no cards
    assert device_layer({}, {}, {"cpu": "8"}).mode == EXCLUSIVE


def test_another_vendor_named_by_its_own_labels():
    from app.domain.config import GpuTypeConfig

    types = [*GPU_TYPES,
             GpuTypeConfig(name="mi300x", memory_gb=192, weight=14, vendor="amd",
                           resource_name="amd.com/gpu", product="MI300X",
                           product_label="amd.com/gpu.product-name",
                           memory_label="amd.com/gpu.vram"),
             GpuTypeConfig(name="mi250", memory_gb=64, weight=8, vendor="amd",
                           resource_name="amd.com/gpu", product="MI250",
                           product_label="amd.com/gpu.product-name",
                           memory_label="amd.com/gpu.vram")]
    # AMD's node labeller; two AMD types share amd.com/gpu, so the resource alone cannot tell
    n = node("mi-0", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X",
                      "amd.com/gpu.vram": "192G"}, {"amd.com/gpu": "8"})
    v = node_view(n, [], types, KS)
    assert v.node.gpu_type == "mi300x" and len(v.node.devices) == 8
    assert v.layer.mode == EXCLUSIVE and v.layer.offered
    other = node("mi-1", {"amd.com/gpu.product-name": "AMD_Instinct_MI210"}, {"amd.com/gpu": "4"})
    assert node_view(other, [], types, KS).unmatched_product == "AMD_Instinct_MI210"

"""Node and Pod JSON as a real cluster shows them (article and GFD labels)."""

from __future__ import annotations

from typing import Any

from app.domain.config import GpuTypeConfig, MigProfileConfig

GPU_TYPES = [
    GpuTypeConfig(
        name="a100-80g", memory_gb=80, weight=10, product="NVIDIA-A100.*80GB",
        mig_profiles={
            "3g.40gb": MigProfileConfig(memory_gb=40, compute_fraction=0.4286),
            "2g.20gb": MigProfileConfig(memory_gb=20, compute_fraction=0.2857),
            "1g.10gb": MigProfileConfig(memory_gb=10, compute_fraction=0.1429),
        },
    ),
    GpuTypeConfig(name="v100-16g", memory_gb=16, weight=4),
    GpuTypeConfig(name="rtx4090-24g", memory_gb=24, weight=2, product="GeForce-RTX-4090",
                  shareable=True),
    GpuTypeConfig(name="ascend910", memory_gb=32, weight=6, vendor="huawei",
                  resource_name="huawei.com/Ascend910"),
]


def node(
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    alloc.update(allocatable or {})
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }


def article_a100(name: str = "a100-0", gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, {"gpu-type": "a100", "gpu-memory": "80g", "gpu-weight": "10",
                       "gpuq.io/rack": "r1", "gpuq.io/network": "ib"},
                {"nvidia.com/gpu": str(gpus)}, **kw)


def gfd_v100(name: str = "v100-0", gpus: int = 4, **kw: Any) -> dict[str, Any]:
    return node(name, {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB",
                       "nvidia.com/gpu.memory": "16384", "nvidia.com/gpu.count": str(gpus),
                       "topology.kubernetes.io/zone": "zone-b"},
                {"nvidia.com/gpu": str(gpus)}, **kw)


def pod(
    name: str,
    node_name: str | None,
    requests: dict[str, str] | None = None,
    *,
    namespace: str = "default",
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": requests or {},
                                                         "limits": {k: v for k, v in
                                                                    (requests or {}).items()
                                                                    if "/" in k}}}
            ],
        },
        "status": {"phase": phase},
    }

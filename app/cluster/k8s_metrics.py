"""Prometheus objects of the Kubernetes backend (objects only, no logic)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

UNMATCHED_GPU_NODES = Gauge(
    "gpuq_k8s_unmatched_gpu_nodes",
    "Nodes whose GPU product matches no configured GPU type (their GPUs are not offered)",
    ["product"],
)
UNOFFERED_GPU_NODES = Gauge(
    "gpuq_k8s_unoffered_gpu_nodes",
    "Nodes whose device layer gpuq cannot drive exactly (time-slicing, MPS, HAMi, DRA only, "
    "an invalid MIG layout): their GPUs are not offered",
    ["mode"],
)
BIND_FAILURES = Counter(
    "gpuq_k8s_bind_failures_total", "Gang binds that failed and were undone", ["reason"]
)
EVICTIONS = Counter(
    "gpuq_k8s_evictions_total", "Pods stopped by gpuq", ["method"]  # eviction | delete
)
WATCH_RELISTS = Counter(
    "gpuq_k8s_watch_relists_total", "Full relists (start, or watch expired with 410)", ["resource"]
)

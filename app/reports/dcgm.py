"""Real GPU utilization from DCGM-Exporter through a Prometheus server.

``DCGM_FI_DEV_GPU_UTIL`` is reported per GPU (0..100) with the node in
``Hostname`` (or ``kubernetes_node`` / ``node`` / ``instance``, depending
on how it is scraped). We average it per GPU type using the node -> type
map gpuq already has. The HTTP call is here; the averaging is a pure
function the tests check.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import httpx

QUERY = "avg by (Hostname, kubernetes_node, node, instance, gpu) (DCGM_FI_DEV_GPU_UTIL)"
NODE_LABELS = ("Hostname", "kubernetes_node", "node", "instance")


def _node_of(metric: Mapping[str, str]) -> str | None:
    for key in NODE_LABELS:
        value = metric.get(key)
        if value:
            return value.split(":")[0] if key == "instance" else value
    return None


def util_by_type(
    result: list[dict[str, Any]], node_types: Mapping[str, str | None]
) -> dict[str, float]:
    """Mean utilization (0..1) per GPU type from a Prometheus instant-vector result."""
    acc: dict[str, list[float]] = defaultdict(list)
    for sample in result:
        node = _node_of(sample.get("metric", {}))
        gpu_type = node_types.get(node) if node else None
        if not gpu_type:
            continue
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        acc[gpu_type].append(max(0.0, min(100.0, value)) / 100.0)
    return {t: sum(v) / len(v) for t, v in acc.items()}


def fetch_gpu_util(
    prometheus_url: str, node_types: Mapping[str, str | None], timeout_s: float = 5.0
) -> dict[str, float]:
    """Query Prometheus now; raises ``httpx.HTTPError`` / ``ValueError`` when it cannot."""
    r = httpx.get(
        prometheus_url.rstrip("/") + "/api/v1/query", params={"query": QUERY}, timeout=timeout_s
    )
    r.raise_for_status()
    body = r.json()
    if body.get("status") != "success":
        raise ValueError(f"prometheus query failed: {body.get('error', body)}")
    return util_by_type(body["data"]["result"], node_types)

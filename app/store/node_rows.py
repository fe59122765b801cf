"""Keep the ``nodes`` table in step with a live cluster (Kubernetes).

The dispatcher schedules on the live node list the cluster reports (with
usage by Pods gpuq does not manage); the table is the API's view of it
(``GET /v1/nodes``), rows marked ``source='kubernetes'``. Written only when
something changed, so a steady cluster costs no writes. The caller commits.
It issues SQL, so it lives with the store; the dispatcher's reconcile part
calls it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.config import GpuTypeConfig, MigProfileConfig
from app.scheduling.model import Node
from app.store.orm import AllocationRow, GpuTypeRow, NodeRow

SOURCE = "kubernetes"


def gpu_type_configs(session: Session) -> list[GpuTypeConfig]:
    """The GPU types as configured now (config file or REST), with product patterns."""
    out = []
    for r in session.scalars(select(GpuTypeRow).order_by(GpuTypeRow.name)):
        out.append(
            GpuTypeConfig(
                name=r.name,
                memory_gb=r.memory_gb,
                weight=r.weight,
                product=r.product,
                vendor=r.vendor,
                resource_name=r.resource_name,
                product_label=r.product_label,
                memory_label=r.memory_label,
                mig_profiles={
                    k: MigProfileConfig(**v) for k, v in (r.mig_profiles or {}).items()
                },
                shareable=r.shareable,
                speed=r.speed,
            )
        )
    return out


def node_values(n: Node) -> dict[str, Any]:
    return {
        "gpu_type": n.gpu_type,
        "gpus": len(n.devices),
        "cpu": n.cpu,
        "memory_gb": round(n.memory_gb, 3),
        "rack": n.rack,
        "network": n.network,
        "nvlink_domain": n.nvlink_domain,
        "mig_layout": {str(d.index): list(d.mig_layout) for d in n.devices if d.mig_layout},
        "labels": dict(n.labels),
        "taints": [{"key": k, "value": v, "effect": e} for k, v, e in n.taints],
        "schedulable": n.schedulable,
        "sharing": dict(n.device_layer),
        "source": SOURCE,
    }


def fingerprint(nodes: list[Node]) -> str:
    data = sorted((n.name, node_values(n)) for n in nodes)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def sync_node_rows(session: Session, nodes: list[Node]) -> tuple[int, int]:
    """Upsert the live nodes, drop Kubernetes rows whose node is gone; returns (changes,
    rows kept). A gone node's row stays while allocations still name it -- a job's
    capacity held until its Pods on a deleted node are gone (PodGC removes them after
    its quarantine) -- so the foreign key holds and the pass goes on; the caller syncs
    again on a later pass while any row was kept."""
    rows = {r.name: r for r in session.scalars(select(NodeRow))}
    held = set(session.scalars(select(AllocationRow.node).distinct()))
    changed = kept = 0
    live = set()
    for n in nodes:
        live.add(n.name)
        values = node_values(n)
        row = rows.get(n.name)
        if row is None:
            session.add(NodeRow(name=n.name, **values))
            changed += 1
            continue
        for k, v in values.items():
            if getattr(row, k) != v:
                setattr(row, k, v)
                changed += 1
    for name, row in rows.items():
        if name not in live and row.source == SOURCE:
            if name in held:
                kept += 1
                continue
            session.delete(row)
            changed += 1
    return changed, kept

"""Apply a config file (API.md format) to the database: upsert by name.

Applying the same file twice changes nothing; objects the file does not
name are left alone (the REST API may have created them). The caller
commits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.domain.config import (
    DEFAULT_PRIORITY_CLASSES,
    GpuqConfig,
    GpuTypeConfig,
    NodeConfig,
    PoolConfig,
    PriorityClassConfig,
    TeamConfig,
)
from app.store.orm import (
    GpuTypeRow,
    NodeRow,
    PoolRow,
    PriorityClassRow,
    SettingRow,
    TeamRow,
)

SCHEDULER_KEY = "scheduler"


def gpu_type_values(t: GpuTypeConfig) -> dict[str, Any]:
    return {
        "memory_gb": t.memory_gb,
        "weight": t.weight,
        "product": t.product,
        "vendor": t.vendor,
        "resource_name": t.resource_name,
        "mig_profiles": {k: v.model_dump() for k, v in t.mig_profiles.items()},
        "shareable": t.shareable,
    }


def node_values(n: NodeConfig, source: str = "config") -> dict[str, Any]:
    return {
        "gpu_type": n.gpu_type if n.gpus > 0 else None,
        "gpus": n.gpus,
        "cpu": n.cpu,
        "memory_gb": n.memory_gb,
        "rack": n.rack,
        "network": n.network,
        "nvlink_domain": n.nvlink_domain,
        "mig_layout": {str(k): v for k, v in n.mig_layouts().items()},
        "labels": dict(n.labels),
        "taints": list(n.taints),
        "schedulable": n.schedulable,
        "source": source,
    }


def pool_values(p: PoolConfig) -> dict[str, Any]:
    return p.model_dump(exclude={"name"})


def team_values(t: TeamConfig) -> dict[str, Any]:
    return t.model_dump(exclude={"name"})


def priority_values(p: PriorityClassConfig) -> dict[str, Any]:
    return p.model_dump(exclude={"name"})


def _upsert(session: Session, row_type: type, name: str, values: dict[str, Any]) -> bool:
    """Insert or update one named row; True when something changed."""
    row = session.get(row_type, name)
    if row is None:
        session.add(row_type(name=name, **values))
        return True
    changed = False
    for k, v in values.items():
        if getattr(row, k) != v:
            setattr(row, k, v)
            changed = True
    return changed


def apply_config(session: Session, cfg: GpuqConfig) -> int:
    """Upsert everything the config names; return how many rows changed."""
    changed = 0
    for t in cfg.gpu_types:
        changed += _upsert(session, GpuTypeRow, t.name, gpu_type_values(t))
    for p in cfg.priority_classes:
        changed += _upsert(session, PriorityClassRow, p.name, priority_values(p))
    for p in cfg.pools:
        changed += _upsert(session, PoolRow, p.name, pool_values(p))
    session.flush()
    for t in cfg.teams:
        changed += _upsert(session, TeamRow, t.name, team_values(t))
    for n in cfg.expanded_nodes():
        changed += _upsert(session, NodeRow, n.name, node_values(n))
    if cfg.scheduler:
        changed += _upsert_setting(session, SCHEDULER_KEY, dict(cfg.scheduler))
    session.flush()
    return changed


def _upsert_setting(session: Session, key: str, value: dict[str, Any]) -> bool:
    row = session.get(SettingRow, key)
    if row is None:
        session.add(SettingRow(key=key, value=value))
        return True
    if row.value != value:
        row.value = value
        return True
    return False


def scheduler_knobs(session: Session) -> dict[str, Any]:
    row = session.get(SettingRow, SCHEDULER_KEY)
    return dict(row.value) if row else {}


def ensure_priority_classes(session: Session) -> None:
    """A database always has the default priority table (P0/P1/P2)."""

    for p in DEFAULT_PRIORITY_CLASSES:
        if session.get(PriorityClassRow, p.name) is None:
            session.add(PriorityClassRow(name=p.name, **priority_values(p)))
    session.flush()

"""Apply a config file (docs/configuration.md) to the database: upsert by name.

Applying the same file twice changes nothing; objects the file does not
name are left alone (the REST API may have created them). The caller
commits.

Two ways in: :func:`apply_config` upserts (scenarios, tests, the demo seed);
:func:`apply_managed_config` applies THE config file of an install
(``GPUQ_CONFIG``, ``gpuq config apply``): what it names becomes *managed by
config*, and the API refuses to change it (docs/security.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import inspect, select, text
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
from app.store.audit import WriteBy
from app.store.node_change import check_node_change
from app.store.orm import (
    GpuTypeRow,
    NodeRow,
    PoolRow,
    PriorityClassRow,
    SettingRow,
    TeamRow,
)


class ManagedRow(Protocol):
    """A row a config file can manage (gpu type, priority class, pool, team, node)."""

    name: str
    managed_by: str | None

SCHEDULER_KEY = "scheduler"
# {"path", "sha256", "at"} of the config file last applied (serve skips an unchanged one)
APPLIED_KEY = "config_applied"
_CONFIG_LOCK = 0x67707571_00000002


def gpu_type_values(t: GpuTypeConfig) -> dict[str, Any]:
    return {
        "memory_gb": t.memory_gb,
        "weight": t.weight,
        "product": t.product,
        "vendor": t.vendor,
        "resource_name": t.resource_name,
        "product_label": t.product_label,
        "memory_label": t.memory_label,
        "mig_profiles": {k: v.model_dump() for k, v in t.mig_profiles.items()},
        "shareable": t.shareable,
        "speed": t.speed,
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
        "taints": [t.model_dump() for t in n.taints],
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
    for pool in cfg.pools:
        changed += _upsert(session, PoolRow, pool.name, pool_values(pool))
    session.flush()
    for team in cfg.teams:
        changed += _upsert(session, TeamRow, team.name, team_values(team))
    for n in cfg.expanded_nodes():
        changed += _upsert(session, NodeRow, n.name, node_values(n))
    if cfg.scheduler:
        changed += _upsert_setting(session, SCHEDULER_KEY, dict(cfg.scheduler))
    session.flush()
    return changed


@dataclass(frozen=True)
class Change:
    """One line of ``gpuq config apply``'s diff."""

    action: str  # create | update | adopt | release | unchanged
    kind: str  # gpu_type | priority_class | pool | team | node
    name: str
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None

    def describe(self) -> str:
        label = f"{self.kind} {self.name}"
        if self.action == "create":
            return f"+ {label}"
        if self.action == "release":
            return f"- {label}: no longer in the file; now managed through the API"
        if self.action == "unchanged":
            return f"= {label}"
        old, new = self.old or {}, self.new or {}
        diffs = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in new if old.get(k) != new.get(k)]
        head = "~ " + label + (" (taken over from the API)" if self.action == "adopt" else "")
        return head + (": " + ", ".join(diffs) if diffs else "")


# (kind, row type, the file's objects -> (name, values)) in dependency order
def _objects(
    cfg: GpuqConfig,
) -> list[tuple[str, type[ManagedRow], list[tuple[str, dict[str, Any]]]]]:
    return [
        ("gpu_type", GpuTypeRow, [(t.name, gpu_type_values(t)) for t in cfg.gpu_types]),
        ("priority_class", PriorityClassRow,
         [(p.name, priority_values(p)) for p in cfg.priority_classes]),
        ("pool", PoolRow, [(p.name, pool_values(p)) for p in cfg.pools]),
        ("team", TeamRow, [(t.name, team_values(t)) for t in cfg.teams]),
        ("node", NodeRow, [(n.name, node_values(n)) for n in cfg.expanded_nodes()]),
    ]


def plan_config(session: Session, cfg: GpuqConfig, managed_by: str) -> list[Change]:
    """What applying ``cfg`` as the managing file would change (nothing is written)."""
    changes = []
    for kind, row_type, objects in _objects(cfg):
        named: set[str] = set()
        for name, values in objects:
            named.add(name)
            row = session.get(row_type, name)
            if row is None:
                changes.append(Change("create", kind, name, None, values))
                continue
            old = {k: getattr(row, k) for k in values}
            if row.managed_by is None:
                changes.append(Change("adopt", kind, name, old, values))
            elif old != values:
                changes.append(Change("update", kind, name, old, values))
            else:
                changes.append(Change("unchanged", kind, name))
        for row in session.scalars(
            select(row_type).where(inspect(row_type).columns["managed_by"].is_not(None))
        ):
            if row.name not in named:
                changes.append(Change("release", kind, row.name))
    return changes


def apply_managed_config(
    session: Session, cfg: GpuqConfig, managed_by: str, *, actor: str, at: datetime
) -> list[Change]:
    """Apply ``cfg`` as THE config file (docs/security.md): every object it names is
    created or updated and becomes managed by it (API writes to it get 409);
    objects a config file managed that it no longer names are released to the
    API (left as they are, writable again). Every change is audited. The caller
    commits."""
    changes = plan_config(session, cfg, managed_by)
    by = WriteBy(actor, at)
    by_kind = {kind: row_type for kind, row_type, _ in _objects(cfg)}
    values_of = {(kind, name): v for kind, _t, objs in _objects(cfg) for name, v in objs}
    nodes = {n.name: n for n in cfg.expanded_nodes()}
    for kind in ("gpu_type", "priority_class", "pool", "team", "node"):
        for c in changes:
            if c.kind != kind or c.action == "unchanged":
                continue
            row_type = by_kind[kind]
            if c.action == "release":
                session.get_one(row_type, c.name).managed_by = None  # planned: it exists
            else:
                if kind == "node" and c.action != "create":
                    check_node_change(session, nodes[c.name])
                _upsert(session, row_type, c.name, values_of[(kind, c.name)])
                session.flush()
                session.get_one(row_type, c.name).managed_by = managed_by
            by.record(session, c.action, kind, c.name, c.old, c.new)
        session.flush()
    if cfg.scheduler:
        _upsert_setting(session, SCHEDULER_KEY, dict(cfg.scheduler))
    session.flush()
    return changes


def lock_config(session: Session) -> None:
    """Serialise config applies (replicas starting together, a CLI apply) per transaction."""
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CONFIG_LOCK})


def any_catalog(session: Session) -> bool:
    """Has anything been configured yet (a GPU type or a pool)?"""
    return bool(
        session.scalar(select(GpuTypeRow.name).limit(1))
        or session.scalar(select(PoolRow.name).limit(1))
    )


def config_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def last_applied(session: Session) -> dict[str, Any]:
    row = session.get(SettingRow, APPLIED_KEY)
    return dict(row.value) if row else {}


def remember_applied(session: Session, path: str, digest: str, at: datetime) -> None:
    _upsert_setting(session, APPLIED_KEY, {"path": path, "sha256": digest, "at": at.isoformat()})


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

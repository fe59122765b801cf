"""Cluster objects by name (GPU types, nodes, pools, teams, priority classes).

Create/patch take the config file's pydantic models, so REST writes and
config files are validated by the same rules; references to other objects
are checked here so a bad name is a 422 naming the field, not a foreign
key error. The caller commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import array as pg_array
from sqlalchemy.orm import Session

from app.domain.config import (
    GpuTypeConfig,
    NodeConfig,
    PoolConfig,
    PriorityClassConfig,
    TeamConfig,
    default_above_max,
)
from app.domain.errors import Conflict, InputError, NotFound, unknown
from app.store.audit import WriteBy
from app.store.config_loader import (
    gpu_type_values,
    node_values,
    pool_values,
    priority_values,
    team_values,
)
from app.store.node_change import check_node_change
from app.store.orm import (
    AllocationRow,
    Base,
    GpuTypeRow,
    JobRow,
    NodeRow,
    PoolRow,
    PriorityClassRow,
    TeamRow,
)

R = TypeVar("R", bound=Base)  # a mapped row class: its constructor takes column keywords

#: ``kind`` of an object in the audit trail
AUDIT_KINDS: dict[type, str] = {
    GpuTypeRow: "gpu_type",
    NodeRow: "node",
    PoolRow: "pool",
    TeamRow: "team",
    PriorityClassRow: "priority_class",
}
M = TypeVar("M", bound=BaseModel)

KINDS: dict[type, str] = {
    GpuTypeRow: "GPU type",
    NodeRow: "node",
    PoolRow: "pool",
    TeamRow: "team",
    PriorityClassRow: "priority class",
}


def get_named(session: Session, row_type: type[R], name: str) -> R:
    row = session.get(row_type, name)
    if row is None:
        # the names there are and the nearest one (`gpuq usage --team nlpp` said only
        # "team 'nlpp' not found")
        names = session.scalars(select(row_type.name)).all()  # type: ignore[attr-defined]
        listed = unknown(KINDS[row_type], name, names)
        raise NotFound(f"{KINDS[row_type]} {name!r} not found{listed[listed.rindex(' ('):]}")
    return row


def list_named(session: Session, row_type: type[R]) -> list[R]:
    return list(session.scalars(select(row_type).order_by(row_type.name)))  # type: ignore[attr-defined]


# -- row -> config dict (what GET returns, and the base a PATCH is merged into)


def gpu_type_dict(r: GpuTypeRow) -> dict[str, Any]:
    return {
        "name": r.name,
        "memory_gb": r.memory_gb,
        "weight": r.weight,
        "product": r.product,
        "vendor": r.vendor,
        "resource_name": r.resource_name,
        "product_label": r.product_label,
        "memory_label": r.memory_label,
        "mig_profiles": dict(r.mig_profiles or {}),
        "shareable": r.shareable,
        "speed": r.speed,
    }


def node_dict(r: NodeRow) -> dict[str, Any]:
    return {
        "name": r.name,
        "gpu_type": r.gpu_type,
        "gpus": r.gpus,
        "cpu": r.cpu,
        "memory_gb": r.memory_gb,
        "rack": r.rack,
        "network": r.network,
        "nvlink_domain": r.nvlink_domain,
        "mig_layout": {int(k): v for k, v in (r.mig_layout or {}).items()} or None,
        "labels": dict(r.labels or {}),
        "taints": list(r.taints or []),
        "schedulable": r.schedulable,
    }


def pool_dict(r: PoolRow) -> dict[str, Any]:
    return {"name": r.name, **{k: getattr(r, k) for k in PoolConfig.model_fields if k != "name"}}


def team_dict(r: TeamRow) -> dict[str, Any]:
    return {"name": r.name, **{k: getattr(r, k) for k in TeamConfig.model_fields if k != "name"}}


def priority_dict(r: PriorityClassRow) -> dict[str, Any]:
    return {"name": r.name, "value": r.value, "preemptible": r.preemptible}


# -- reference checks


def _check_exist(session: Session, row_type: type, names: Iterable[str], field: str) -> None:
    for n in names:
        if session.get(row_type, n) is None:
            raise InputError(f"unknown {KINDS[row_type]} {n!r}", field)


def check_node_refs(session: Session, n: NodeConfig) -> None:
    if n.gpus > 0 and n.gpu_type:
        t = session.get(GpuTypeRow, n.gpu_type)
        if t is None:
            raise InputError(f"unknown GPU type {n.gpu_type!r}", "gpu_type")
        for dev, layout in n.mig_layouts().items():
            if dev >= n.gpus:
                raise InputError(f"device {dev} >= gpus ({n.gpus})", "mig_layout")
            for p in layout:
                if p not in (t.mig_profiles or {}):
                    raise InputError(f"MIG profile {p!r} is not defined for {t.name}", "mig_layout")
    check_node_change(session, n)


def check_pool_refs(session: Session, p: PoolConfig) -> None:
    _check_exist(session, GpuTypeRow, p.gpu_types, "gpu_types")
    _check_exist(session, GpuTypeRow, p.guaranteed, "guaranteed")
    _check_exist(session, GpuTypeRow, p.lend_limit, "lend_limit")


def check_team_refs(session: Session, t: TeamConfig) -> None:
    _check_exist(session, PoolRow, [t.pool], "pool")
    _check_exist(session, PoolRow, t.allowed_pools, "allowed_pools")
    _check_exist(session, GpuTypeRow, t.quota_by_type, "quota_by_type")
    _check_exist(session, PriorityClassRow, [t.default_priority], "default_priority")
    if t.max_priority is not None:
        _check_exist(session, PriorityClassRow, [t.max_priority], "max_priority")
        values = {r.name: r.value for r in (session.get(PriorityClassRow, n)
                                            for n in (t.default_priority, t.max_priority)) if r}
        why = default_above_max(t.default_priority, values, t.max_priority)
        if why is not None:
            raise InputError(why, "default_priority")
    if t.namespaces:
        # a team's namespaces are its tenant boundary (docs/security.md): no two teams
        # list the same one, else each could name the other's Secrets and PVCs there
        other = session.scalars(
            select(TeamRow.name).where(TeamRow.name != t.name,
                                       TeamRow.namespaces.has_any(pg_array(list(t.namespaces))))
            .order_by(TeamRow.name).limit(1)
        ).first()
        if other is not None:
            raise Conflict(f"a namespace of {', '.join(t.namespaces)} belongs to team "
                           f"{other!r}; each team's namespaces are its own", "namespaces")


def validate_model(model: type[M], data: dict[str, Any]) -> M:
    """Validate with the config model; the first error becomes a 422 naming its field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or None
        raise InputError(err["msg"], field) from None


SPECS: dict[type, tuple[type[BaseModel], Any, Any, Any]] = {
    GpuTypeRow: (GpuTypeConfig, gpu_type_values, gpu_type_dict, None),
    NodeRow: (NodeConfig, node_values, node_dict, check_node_refs),
    PoolRow: (PoolConfig, pool_values, pool_dict, check_pool_refs),
    TeamRow: (TeamConfig, team_values, team_dict, check_team_refs),
    PriorityClassRow: (PriorityClassConfig, priority_values, priority_dict, None),
}


def check_not_managed(row: Any) -> None:
    """Objects a config file manages are changed in that file, never through the API
    (docs/security.md "One source of admin truth"): 409 naming the file."""
    if row.managed_by:
        raise Conflict(
            f"{KINDS[type(row)]} {row.name!r} is managed by the config file {row.managed_by}; "
            "change it there and run `gpuq config apply`",
            "name",
        )


def create_named(
    session: Session, row_type: type[R], body: BaseModel, by: WriteBy | None = None, **extra: Any
) -> R:
    model, values, to_dict, check = SPECS[row_type]
    name = body.name  # type: ignore[attr-defined]
    if session.get(row_type, name) is not None:
        raise Conflict(f"{KINDS[row_type]} {name!r} already exists", "name")
    if isinstance(body, NodeConfig) and body.count is not None:
        raise InputError("count is only for config files; create nodes one by one", "count")
    if check:
        check(session, body)
    row = row_type(name=name, **{**values(body), **extra})
    session.add(row)
    session.flush()
    if by is not None:
        by.record(session, "create", AUDIT_KINDS[row_type], name, None, to_dict(row))
    return row


def patch_named(session: Session, row: R, patch: dict[str, Any], by: WriteBy | None = None) -> R:
    row_type = type(row)
    model, values, to_dict, check = SPECS[row_type]
    check_not_managed(row)
    old = to_dict(row)
    if "name" in patch and patch["name"] != row.name:  # type: ignore[attr-defined]
        raise InputError("names cannot change; create a new object instead", "name")
    unknown = set(patch) - set(model.model_fields)
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(sorted(unknown))}", sorted(unknown)[0])
    merged = validate_model(model, {**to_dict(row), **patch})
    if check:
        check(session, merged)
    for k, v in values(merged).items():
        if k == "source":
            continue
        setattr(row, k, v)
    session.flush()
    if by is not None:
        new = to_dict(row)
        if new != old:
            by.record(session, "update", AUDIT_KINDS[row_type], row.name, old, new)  # type: ignore[attr-defined]
    return row


def referrers(session: Session, row: Any) -> list[str]:
    """What still refers to ``row`` by name, as "pool 'training' (guaranteed)"
    phrases (at most three of each kind and field): a delete must not leave a dangling
    name behind (a pool naming a deleted GPU type, a team allowed a deleted pool)."""
    name = row.name
    found: list[str] = []

    def named(kind: str, query: Any, where: str = "") -> None:
        names = list(session.scalars(query.limit(4)))
        suffix = f" ({where})" if where else ""
        found.extend(f"{kind} {n!r}{suffix}" for n in names[:3])
        if len(names) > 3:
            found.append(f"more {kind}s")

    if isinstance(row, GpuTypeRow):
        named("node", select(NodeRow.name).where(NodeRow.gpu_type == name).order_by(NodeRow.name))
        for col in ("gpu_types", "guaranteed", "lend_limit"):
            c = getattr(PoolRow, col)
            cond = c.contains([name]) if col == "gpu_types" else c.has_key(name)
            named("pool", select(PoolRow.name).where(cond).order_by(PoolRow.name), col)
        named("team", select(TeamRow.name).where(TeamRow.quota_by_type.has_key(name))
              .order_by(TeamRow.name), "quota_by_type")
        named("job", select(AllocationRow.job_id).where(AllocationRow.gpu_type == name)
              .distinct().order_by(AllocationRow.job_id), "running on it")
    elif isinstance(row, NodeRow):
        named("job", select(AllocationRow.job_id).where(AllocationRow.node == name)
              .distinct().order_by(AllocationRow.job_id), "allocations on it")
    elif isinstance(row, PoolRow):
        named("team", select(TeamRow.name).where(TeamRow.pool == name).order_by(TeamRow.name),
              "pool")
        named("team", select(TeamRow.name).where(TeamRow.allowed_pools.contains([name]))
              .order_by(TeamRow.name), "allowed_pools")
        named("job", select(JobRow.id).where(JobRow.pool == name).order_by(JobRow.id))
    elif isinstance(row, TeamRow):
        named("job", select(JobRow.id).where(JobRow.team == name).order_by(JobRow.id))
    elif isinstance(row, PriorityClassRow):
        named("team", select(TeamRow.name).where(TeamRow.default_priority == name)
              .order_by(TeamRow.name), "default_priority")
        named("team", select(TeamRow.name).where(TeamRow.max_priority == name)
              .order_by(TeamRow.name), "max_priority")
        named("job", select(JobRow.id).where(JobRow.priority == name).order_by(JobRow.id))
    return found


def delete_named(session: Session, row: Any, by: WriteBy | None = None) -> None:
    """Delete unless something still refers to it (409 naming what) or the config file
    manages it (409 naming the file); the audit trail records the old value."""
    check_not_managed(row)
    name = row.name
    used_by = referrers(session, row)
    if used_by:
        raise Conflict(
            f"{KINDS[type(row)]} {name!r} is still used by {', '.join(used_by)}", "name"
        )
    old = SPECS[type(row)][2](row)
    session.delete(row)
    session.flush()
    if by is not None:
        by.record(session, "delete", AUDIT_KINDS[type(row)], name, old, None)

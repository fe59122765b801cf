"""Build the core's plain types from a validated config file, or from the
database rows that hold the same fields.

The one conversion of GPU types, nodes, pools and teams: ``gpuq simulate``, the
simulated cluster and the tests read a config file through it, and the store
(app/store/convert.py) reads its rows through it, so a scenario and the live
dispatcher's snapshot cannot disagree on what a catalog entry means. Each takes a
config object or anything with the same fields (the ``...Fields`` protocols:
a table row, whose JSON columns may be NULL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.domain.config import (
    GpuqConfig,
    GpuTypeConfig,
    MigProfileConfig,
    NodeConfig,
    PoolConfig,
    PriorityClassConfig,
    Taint,
    TeamConfig,
    mig_layouts,
)
from app.scheduling.model import (
    Device,
    GpuType,
    MigProfile,
    Node,
    PoolInfo,
    PriorityInfo,
    SchedulerConfig,
    TeamInfo,
)


class GpuTypeFields(Protocol):
    """What a GPU type conversion reads: a :class:`GpuTypeConfig` or the gpu_types
    table row (its MIG profiles as JSON objects)."""

    @property
    def name(self) -> str: ...
    @property
    def memory_gb(self) -> float: ...
    @property
    def weight(self) -> float: ...
    @property
    def mig_profiles(self) -> Mapping[str, MigProfileConfig | Mapping[str, Any]] | None: ...
    @property
    def shareable(self) -> bool: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def speed(self) -> float: ...


def _mig_profile(name: str, p: MigProfileConfig | Mapping[str, Any]) -> MigProfile:
    if isinstance(p, Mapping):  # a row's JSON of the profile
        return MigProfile(name, float(p["memory_gb"]), float(p["compute_fraction"]))
    return MigProfile(name, p.memory_gb, p.compute_fraction)


def gpu_type_from_config(t: GpuTypeConfig | GpuTypeFields) -> GpuType:
    return GpuType(
        name=t.name,
        memory_gb=t.memory_gb,
        weight=t.weight,
        mig_profiles={k: _mig_profile(k, v) for k, v in (t.mig_profiles or {}).items()},
        shareable=t.shareable,
        resource_name=t.resource_name,
        speed=t.speed,
    )


class NodeFields(Protocol):
    """What a node conversion reads: a :class:`NodeConfig` (one node of it:
    :meth:`GpuqConfig.expanded_nodes`) or the nodes table row."""

    @property
    def name(self) -> str: ...
    @property
    def gpu_type(self) -> str | None: ...
    @property
    def gpus(self) -> int: ...
    @property
    def cpu(self) -> float: ...
    @property
    def memory_gb(self) -> float: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def network(self) -> str: ...
    @property
    def nvlink_domain(self) -> str | None: ...
    @property
    def mig_layout(self) -> Sequence[str] | Mapping[Any, Sequence[str]] | None: ...
    @property
    def labels(self) -> Mapping[str, Any] | None: ...
    @property
    def taints(self) -> Iterable[Mapping[str, Any] | Taint] | None: ...
    @property
    def schedulable(self) -> bool: ...


def node_from_config(n: NodeConfig | NodeFields, *, cordoned: bool = False) -> Node:
    """``cordoned``: an operator's cordon (the nodes table keeps it apart from the
    definition) takes the node out of service whatever its definition says."""
    layouts = mig_layouts(n.mig_layout)
    return Node(
        name=n.name,
        gpu_type=n.gpu_type if n.gpus > 0 else None,
        devices=[Device(index=i, mig_layout=tuple(layouts.get(i, ()))) for i in range(n.gpus)],
        cpu=n.cpu,
        memory_gb=n.memory_gb,
        rack=n.rack,
        network=n.network,
        nvlink_domain=n.nvlink_domain,
        labels=dict(n.labels or {}),
        taints=tuple(
            t.as_tuple() if isinstance(t, Taint)
            else (t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
            for t in (n.taints or ())
        ),
        schedulable=n.schedulable and not cordoned,
    )


class PoolFields(Protocol):
    """What a pool conversion reads: a :class:`PoolConfig` or the pools table row
    (whose JSON columns may be NULL), so the config file and the database
    become the core's PoolInfo through one function."""

    @property
    def name(self) -> str: ...
    @property
    def gpu_types(self) -> Iterable[str] | None: ...
    @property
    def guaranteed(self) -> Mapping[str, float] | None: ...
    @property
    def borrow_limit(self) -> float | None: ...
    @property
    def lend_limit(self) -> Mapping[str, float] | None: ...
    @property
    def max_borrow_seconds(self) -> float: ...
    @property
    def reclaim(self) -> str: ...
    @property
    def placement(self) -> str: ...
    @property
    def weight(self) -> float: ...


class TeamFields(Protocol):
    """What a team conversion reads: a :class:`TeamConfig` or the teams table row."""

    @property
    def name(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def allowed_pools(self) -> Iterable[str] | None: ...
    @property
    def quota_units(self) -> float | None: ...
    @property
    def quota_by_type(self) -> Mapping[str, float] | None: ...
    @property
    def weight(self) -> float: ...
    @property
    def default_priority(self) -> str: ...


def pool_from_config(p: PoolConfig | PoolFields) -> PoolInfo:
    return PoolInfo(
        name=p.name,
        gpu_types=tuple(p.gpu_types or ()),
        guaranteed=dict(p.guaranteed or {}),
        borrow_limit=p.borrow_limit,
        lend_limit=dict(p.lend_limit or {}),
        max_borrow_seconds=p.max_borrow_seconds,
        reclaim=p.reclaim,
        placement=p.placement,
        weight=p.weight,
    )


def team_from_config(t: TeamConfig | TeamFields) -> TeamInfo:
    return TeamInfo(
        name=t.name,
        pool=t.pool,
        allowed_pools=tuple(t.allowed_pools or ()),
        quota_units=t.quota_units,
        quota_by_type=dict(t.quota_by_type or {}),
        weight=t.weight,
        default_priority=t.default_priority,
    )


def priority_from_config(p: PriorityClassConfig) -> PriorityInfo:
    return PriorityInfo(p.name, p.value, p.preemptible)


@dataclass(slots=True)
class ClusterModel:
    """The static part of a snapshot, from a config file."""

    gpu_types: dict[str, GpuType]
    nodes: list[Node]
    pools: dict[str, PoolInfo]
    teams: dict[str, TeamInfo]
    priorities: dict[str, PriorityInfo]
    scheduler: SchedulerConfig


def cluster_model(cfg: GpuqConfig) -> ClusterModel:
    return ClusterModel(
        gpu_types={t.name: gpu_type_from_config(t) for t in cfg.gpu_types},
        nodes=[node_from_config(n) for n in cfg.expanded_nodes()],
        pools={p.name: pool_from_config(p) for p in cfg.pools},
        teams={t.name: team_from_config(t) for t in cfg.teams},
        priorities={p.name: priority_from_config(p) for p in cfg.priority_classes},
        scheduler=SchedulerConfig.from_mapping(cfg.scheduler),
    )

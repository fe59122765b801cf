"""The configuration file of API.md (also the head of a scenario file).

Loading is idempotent: objects are upserted by name, so the same file can
be applied at every start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.domain.pod_policy import PssLevel
from app.domain.spec import JobSpec, Placement, check_dns_label, check_dns_subdomain


class MigProfileConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory_gb: float = Field(gt=0)
    compute_fraction: float = Field(gt=0, le=1)


class GpuTypeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    memory_gb: float = Field(gt=0, le=10_000)
    weight: float = Field(gt=0, le=10_000)
    product: str | None = None
    vendor: str = "nvidia"
    resource_name: str = "nvidia.com/gpu"
    mig_profiles: dict[str, MigProfileConfig] = Field(default_factory=dict)
    shareable: bool = False

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        return check_dns_label(v)


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    count: int | None = Field(default=None, ge=1, le=100_000)
    gpu_type: str | None = None
    gpus: int = Field(default=0, ge=0, le=64)
    cpu: float = Field(default=64, gt=0)
    memory_gb: float = Field(default=512, gt=0)
    rack: str | None = None
    network: Literal["ib", "roce", "eth"] = "eth"
    nvlink_domain: str | None = None
    mig_layout: list[str] | dict[int, list[str]] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    schedulable: bool = True

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        return check_dns_label(v)

    @model_validator(mode="after")
    def _gpu_type_iff_gpus(self) -> NodeConfig:
        if self.gpus > 0 and not self.gpu_type:
            raise ValueError(f"node {self.name}: gpus > 0 needs a gpu_type")
        return self

    def mig_layouts(self) -> dict[int, list[str]]:
        """Per-device MIG layout; a plain list applies to device 0."""
        if self.mig_layout is None:
            return {}
        if isinstance(self.mig_layout, list):
            return {0: list(self.mig_layout)} if self.mig_layout else {}
        return {int(k): list(v) for k, v in self.mig_layout.items()}

    def expand(self) -> list[NodeConfig]:
        """`count: N` expands to name-0 .. name-(N-1)."""
        if self.count is None:
            return [self]
        return [
            self.model_copy(update={"name": f"{self.name}-{i}", "count": None})
            for i in range(self.count)
        ]


class PoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    gpu_types: list[str] = Field(default_factory=list)
    guaranteed: dict[str, float] = Field(default_factory=dict)
    borrow_limit: float | None = Field(default=None, ge=0)
    lend_limit: dict[str, float] = Field(default_factory=dict)
    max_borrow_seconds: float = Field(default=1800, gt=0)
    reclaim: Literal["always", "when_needed"] = "always"
    placement: Placement = "binpack"
    weight: float = Field(default=1, gt=0)

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        return check_dns_label(v)

    @field_validator("guaranteed", "lend_limit")
    @classmethod
    def _non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if x < 0:
                raise ValueError(f"{k}: must be >= 0")
        return v


class TeamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    pool: str
    allowed_pools: list[str] = Field(default_factory=list)
    quota_units: float | None = Field(default=None, ge=0)
    quota_by_type: dict[str, float] = Field(default_factory=dict)
    weight: float = Field(default=1, gt=0)
    default_priority: str = "P1"
    # Pod policy (app/domain/pod_policy.py, docs/security.md). Only admins write
    # teams, so only an admin can lower a team to baseline or privileged.
    namespaces: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="namespaces the team's Pods may use; empty: the install's job namespace",
    )
    pod_security: PssLevel = Field(
        default="restricted", description="Pod Security Standards level of the team's Pods"
    )
    service_accounts: list[str] = Field(
        default_factory=lambda: ["default"],
        max_length=64,
        description="ServiceAccounts the team's Pods may run as",
    )
    automount_service_account_token: bool = Field(
        default=False, description="may the team's Pods mount their ServiceAccount token"
    )

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        return check_dns_label(v)

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            check_dns_label(ns, "namespace")
        return v

    @field_validator("service_accounts")
    @classmethod
    def _service_accounts(cls, v: list[str]) -> list[str]:
        for sa in v:
            check_dns_subdomain(sa, "service account")
        return v


class PriorityClassConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=63)
    value: int = Field(ge=-2_000_000_000, le=1_000_000_000, strict=True)
    # strict: the OpenAPI says boolean, so 0 or "yes" is refused rather than coerced
    preemptible: bool = Field(default=True, strict=True)

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        # Pods get the PriorityClass ``<prefix><name lower-cased>`` (P0 -> gpuq-p0), so
        # the name must be a DNS label once lower-cased; upper case stays allowed for
        # the P0/P1/P2 of API.md.
        check_dns_label(v.lower(), "name")
        return v


DEFAULT_PRIORITY_CLASSES = [
    PriorityClassConfig(name="P0", value=1000, preemptible=False),
    PriorityClassConfig(name="P1", value=500, preemptible=True),
    PriorityClassConfig(name="P2", value=100, preemptible=True),
]


class TraceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["alibaba-openb", "philly"]
    nodes: str | None = None
    pods: str | None = None
    path: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class GpuqConfig(BaseModel):
    """The whole file; `jobs` and `trace` only matter to `gpuq simulate`."""

    model_config = ConfigDict(extra="forbid")
    gpu_types: list[GpuTypeConfig] = Field(default_factory=list)
    nodes: list[NodeConfig] = Field(default_factory=list)
    pools: list[PoolConfig] = Field(default_factory=list)
    teams: list[TeamConfig] = Field(default_factory=list)
    priority_classes: list[PriorityClassConfig] = Field(
        default_factory=lambda: list(DEFAULT_PRIORITY_CLASSES)
    )
    scheduler: dict[str, Any] = Field(default_factory=dict)
    jobs: list[JobSpec] = Field(default_factory=list)
    trace: TraceConfig | None = None

    def expanded_nodes(self) -> list[NodeConfig]:
        return [n for node in self.nodes for n in node.expand()]

    @model_validator(mode="after")
    def _references(self) -> GpuqConfig:
        types = {t.name for t in self.gpu_types}
        for n in self.nodes:
            if n.gpu_type and types and n.gpu_type not in types:
                raise ValueError(f"node {n.name}: unknown gpu_type {n.gpu_type!r}")
            if n.gpu_type and n.mig_layout:
                gt = next((g for g in self.gpu_types if g.name == n.gpu_type), None)
                for dev, layout in n.mig_layouts().items():
                    if gt is None:
                        continue
                    for p in layout:
                        if p not in gt.mig_profiles:
                            raise ValueError(
                                f"node {n.name}: device {dev} MIG profile {p!r} "
                                f"is not defined for {gt.name}"
                            )
                    if dev >= n.gpus:
                        raise ValueError(f"node {n.name}: mig_layout device {dev} >= gpus")
        pools = {p.name for p in self.pools}
        for p in self.pools:
            for t in [*p.gpu_types, *p.guaranteed, *p.lend_limit]:
                if types and t not in types:
                    raise ValueError(f"pool {p.name}: unknown gpu type {t!r}")
        for tm in self.teams:
            for p in [tm.pool, *tm.allowed_pools]:
                if pools and p not in pools:
                    raise ValueError(f"team {tm.name}: unknown pool {p!r}")
        return self


def load_config(path: str | Path) -> GpuqConfig:
    """Read and validate a config or scenario YAML file."""
    text = Path(path).read_text()
    data = yaml.safe_load(text) or {}
    return GpuqConfig.model_validate(data)


def load_config_text(text: str) -> GpuqConfig:
    return GpuqConfig.model_validate(yaml.safe_load(text) or {})

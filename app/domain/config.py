"""The configuration file (docs/configuration.md) (also the head of a scenario file).

Loading is idempotent: objects are upserted by name, so the same file can
be applied at every start.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from app.domain.errors import unknown
from app.domain.pod_policy import PssLevel
from app.domain.pod_resources import mig_prefix
from app.domain.spec import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN,
    EXTENDED_RESOURCE_SCHEMA,
    LABEL_KEY_MAX,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    NODE_LABELS_SCHEMA,
    DnsLabel,
    Int,
    JobSpec,
    OptInt,
    Placement,
    PriorityName,
    Text,
    check_dns_label,
    check_dns_subdomain,
    check_label_key,
    check_label_value,
    check_node_labels,
    is_extended_resource_name,
    where_it_goes,
)
from app.domain.yaml_input import load_yaml, read_yaml_file
from app.scheduling.model import REMOVED_KNOBS, SchedulerConfig

# strict: numbers are JSON numbers, flags JSON booleans, as the OpenAPI says ("80"
# or 1-for-true are refused rather than coerced); the same for a config file
STRICT = ConfigDict(extra="forbid", strict=True)
NonNegative = Annotated[float, Field(ge=0)]
# schema of names the validators below check (their messages name the field)
LABEL_SCHEMA = {"pattern": DNS_LABEL_PATTERN, "minLength": 1, "maxLength": 63}
SUBDOMAIN_SCHEMA = {"pattern": DNS_SUBDOMAIN.pattern, "minLength": 1, "maxLength": 253}
# nodes of one config or scenario once `count` is expanded (Kubernetes documents 5,000
# nodes per cluster; bench/core.py's largest cluster has 10,000)
MAX_NODES = 20_000
# a MIG layout's device index: a JSON object key is a string ("0")
DeviceIndex = Annotated[int, Strict(False), Field(ge=0, le=63)]



def refuse_unknown(data: Mapping[str, Any], known: Iterable[str], where: str = "") -> None:
    """A key nobody reads is a mistake, not an option: a typo such as
    ``shortest_frist: false`` would otherwise load and leave ``shortest_first`` on.
    The error names the key, the nearest valid one and the valid ones."""
    names = set(known)
    for key in data:
        if key not in names:
            message = unknown("key", str(key), names)
            if where:
                message = message.replace(f"key {str(key)!r}", f"key {str(key)!r} {where}", 1)
            raise ValueError(message)


class ConfigModel(BaseModel):
    """A section of the config file: unknown keys are refused by name with the nearest
    valid one (pydantic's own ``extra="forbid"`` says only "extra inputs are not
    permitted")."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            refuse_unknown(data, cls.model_fields)
        return data


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """Configurable under ``scheduler.alerts`` in the config file (the alerts:
    :mod:`app.reports.alerts`)."""

    # head-of-line blocking: a group's wait P99 above this many times its P50
    hol_ratio: float = 2.0
    # ... with at least this many waits in the group
    hol_min_samples: int = 20
    # ... and a P99 wait above this many seconds
    hol_min_p99_s: float = 60.0
    # type imbalance: a GPU type with more than this many queued jobs
    imbalance_queued: int = 10
    # ... while another type has more than this share of its capacity idle
    imbalance_idle: float = 0.4

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> AlertThresholds:
        if not data:
            return cls()
        refuse_unknown(data, cls.__dataclass_fields__, "in scheduler.alerts")
        return cls(**dict(data))


# the type of each core knob (SchedulerConfig's fields: bool, int or float) and of
# each alert threshold (under scheduler.alerts)
SCHEDULER_KNOB_TYPES: dict[str, type] = {
    f.name: type(f.default) for f in dataclasses.fields(SchedulerConfig)
}
ALERT_KNOB_TYPES: dict[str, type] = {
    f.name: type(f.default) for f in dataclasses.fields(AlertThresholds)
}


def _check_knobs(values: Mapping[str, Any], types: Mapping[str, type], where: str) -> None:
    for key, value in values.items():
        want = types[key]
        if want is bool:
            ok = isinstance(value, bool)
        else:  # numbers: int or float, never a bool, never negative
            ok = (isinstance(value, int | float) and not isinstance(value, bool)
                  and (want is float or isinstance(value, int)) and value >= 0)
        if not ok:
            kind = {bool: "true or false", int: "a whole number >= 0",
                    float: "a number >= 0"}[want]
            raise ValueError(f"{where}.{key}: must be {kind}, got {value!r}")

# a MIG profile's name, as the name part of ``<domain>/mig-<profile>`` (63 characters)
MIG_PROFILE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,57}[A-Za-z0-9])?$"


class MigProfileConfig(ConfigModel):
    """One MIG profile of a GPU type (the slice a ``resources.mig`` request names)."""

    model_config = STRICT
    memory_gb: float = Field(gt=0, le=10_000, description="memory of one slice, GB")
    compute_fraction: float = Field(
        gt=0, le=1, description="share of the card's compute one slice has (1g of 7g: 1/7)"
    )


class GpuTypeConfig(ConfigModel):
    """A GPU model of the cluster, and what its cards are worth."""

    model_config = STRICT
    name: DnsLabel = Field(description="the type's name, e.g. `a100-80g`")
    memory_gb: float = Field(gt=0, le=10_000, description="memory of one card, GB")
    weight: float = Field(
        gt=0, le=10_000,
        description="compute units (CU) one card is worth: quotas, shares and fairness "
        "are counted in CU",
    )
    product: Text | None = Field(
        default=None, max_length=253,
        description="the product name nodes report (Kubernetes `nvidia.com/gpu.product`): a "
        "regular expression (Python's `re`) searched in the label's value, case-insensitive "
        "(`NVIDIA-A100.*80GB`)",
    )
    vendor: Text = Field(default="nvidia", min_length=1, max_length=63,
                        description="the vendor (`nvidia`, `amd`...)")
    resource_name: str = Field(
        default="nvidia.com/gpu", min_length=1, max_length=244,
        description="the extended resource its Pods request (`domain/name`, outside "
        "`kubernetes.io`); MIG slices are `<domain>/mig-<profile>`",
        json_schema_extra=EXTENDED_RESOURCE_SCHEMA,
    )
    product_label: str | None = Field(
        default=None, min_length=1, max_length=317,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="the node label holding the product name, for vendors without GPU "
        "Feature Discovery (AMD's node labeller: `amd.com/gpu.product-name`); its value is "
        "matched against `product`",
    )
    memory_label: str | None = Field(
        default=None, min_length=1, max_length=317,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="the node label holding one card's memory (`192G`, `80Gi`; a bare number "
        "is MiB, as GPU Feature Discovery writes it), e.g. `amd.com/gpu.vram`",
    )
    mig_profiles: dict[str, MigProfileConfig] = Field(
        default_factory=dict, description="the MIG profiles its cards can be cut into, by "
        "name (`3g.40gb`: Pods request `<domain>/mig-<name>`)",
        json_schema_extra={"propertyNames": {"pattern": MIG_PROFILE_PATTERN}},
    )
    speed: float = Field(
        default=1.0, gt=0, le=1000,
        description="relative throughput of one card on a typical job (any unit: only ratios "
        "count; measure it by running the same training step on each type, "
        "docs/operations.md). Placement prefers the faster type; 1.0 everywhere = no preference",
    )
    shareable: bool = Field(
        default=False, description="may one card be shared by several jobs (gpu_share)"
    )

    # What a node read from Kubernetes is matched with, and what gpuq's Pods request:
    # refused here, with the field, rather than as an error in the node sync or a Pod
    # the API server refuses at every bind.
    @field_validator("product")
    @classmethod
    def _product_is_a_pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"{v!r} is not a regular expression: {e}") from None
        return v

    @field_validator("resource_name")
    @classmethod
    def _resource_name(cls, v: str) -> str:
        if not is_extended_resource_name(v):
            raise ValueError(
                f"{v!r} is not a Kubernetes extended resource name (domain/name, e.g. "
                "nvidia.com/gpu: a DNS-subdomain domain outside kubernetes.io, a name of 1-63 "
                "letters, digits, '-', '_', '.')")
        return v

    @model_validator(mode="after")
    def _mig_resource_names(self) -> GpuTypeConfig:
        for profile in self.mig_profiles:
            name = mig_prefix(self.resource_name) + profile
            if not re.fullmatch(MIG_PROFILE_PATTERN, profile) or not (
                    is_extended_resource_name(name)):
                raise ValueError(
                    f"mig_profiles: {profile!r} would be requested as {name!r}, not a "
                    "Kubernetes resource name (a profile: letters, digits, '-', '_', '.', "
                    "starting and ending with a letter or digit, e.g. 3g.40gb)")
        return self


def mig_layouts(raw: Sequence[str] | Mapping[Any, Sequence[str]] | None) -> dict[int, list[str]]:
    """A node's MIG layout per card index: a config file's list (card 0) or
    ``{card: [profiles]}``, or the nodes table's JSON of it (card indexes as text)."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return {int(k): list(v) for k, v in raw.items()}
    return {0: list(raw)} if raw else {}


class Taint(ConfigModel):
    """A node taint, with the rules the API server holds a Node's taints to
    (k8s.io/kubernetes ``pkg/apis/core/validation/validation.go``, ``validateNodeTaints``:
    a label key, a label value, one of the three effects; one taint per key and effect).
    The effect may be left out here (NoSchedule). A job runs on the node only if its
    ``pod_template`` tolerates each NoSchedule and NoExecute taint."""

    model_config = STRICT
    # the patterns are for the document; the validators below say what is wrong in words
    key: str = Field(
        min_length=1, max_length=LABEL_KEY_MAX,
        description="the taint's key: a Kubernetes label key ([prefix/]name)",
        examples=["dedicated"], json_schema_extra={"pattern": LABEL_KEY_PATTERN},
    )
    value: str = Field(
        default="", max_length=63,
        description="the taint's value: empty, or a Kubernetes label value",
        json_schema_extra={"pattern": LABEL_VALUE_PATTERN},
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule",
        description="NoSchedule and NoExecute keep out jobs that do not tolerate the "
        "taint; PreferNoSchedule is only a preference (placement ignores it)",
    )

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return check_label_key(v, "key")  # the prefix's 253-character cap too

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return check_label_value(v, "value")

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.key, self.value, self.effect)


class NodeConfig(ConfigModel):
    """A node of the simulated cluster (on Kubernetes nodes come from the API server)."""

    model_config = STRICT
    name: DnsLabel = Field(description="the node's name")
    count: OptInt = Field(
        default=None, ge=1, le=MAX_NODES,
        description="this many identical nodes, named `<name>-0` .. `<name>-<count-1>`",
    )
    gpu_type: DnsLabel | None = Field(
        default=None, description="the type of its cards (an existing GPU type); needed "
        "when gpus > 0",
    )
    gpus: Int = Field(default=0, ge=0, le=64, description="GPU cards")
    cpu: float = Field(default=64, gt=0, le=100_000, description="CPU cores")
    memory_gb: float = Field(default=512, gt=0, le=1_000_000, description="memory, GB")
    rack: Text | None = Field(default=None, max_length=63,
                             description="rack (topology `same_rack`)")
    network: Literal["ib", "roce", "eth"] = Field(
        default="eth", description="interconnect (topology `fast_network`: ib or roce)"
    )
    nvlink_domain: Text | None = Field(
        default=None, max_length=63, description="NVLink domain shared with other nodes"
    )
    mig_layout: list[Text] | dict[DeviceIndex, list[Text]] | None = Field(
        default=None,
        description="MIG profiles each card is cut into: a list (card 0) or "
        "`{card index: [profiles]}`",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="node labels a job may select the node by (a Pod template's "
        "`nvidia.com/gpu.product` terms), each a Kubernetes label; a node read from "
        "Kubernetes shows only those",
        json_schema_extra=NODE_LABELS_SCHEMA)
    taints: list[Taint] = Field(default_factory=list, max_length=64,
                                description="node taints (at most one per key and effect)")
    schedulable: bool = Field(default=True, description="false: cordoned, nothing new "
                              "is placed on it")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_node_labels(v)

    @field_validator("taints")
    @classmethod
    def _one_taint_per_key_and_effect(cls, v: list[Taint]) -> list[Taint]:
        seen: set[tuple[str, str]] = set()
        for t in v:
            if (t.key, t.effect) in seen:
                raise ValueError(f"two taints with key {t.key!r} and effect "
                                 f"{t.effect} (the API server allows one)")
            seen.add((t.key, t.effect))
        return v

    @model_validator(mode="after")
    def _gpu_type_iff_gpus(self) -> NodeConfig:
        if self.gpus > 0 and not self.gpu_type:
            raise ValueError(f"node {self.name}: gpus > 0 needs a gpu_type")
        return self

    def mig_layouts(self) -> dict[int, list[str]]:
        """Per-device MIG layout; a plain list applies to device 0."""
        return mig_layouts(self.mig_layout)

    def expand(self) -> list[NodeConfig]:
        """`count: N` expands to name-0 .. name-(N-1)."""
        if self.count is None:
            return [self]
        return [
            self.model_copy(update={"name": f"{self.name}-{i}", "count": None})
            for i in range(self.count)
        ]


class PoolConfig(ConfigModel):
    """A pool: GPU types, a guaranteed share of each, borrowing and lending rules."""

    model_config = STRICT
    name: DnsLabel = Field(description="the pool's name")
    gpu_types: list[DnsLabel] = Field(
        default_factory=list, max_length=64,
        description="GPU types its jobs may use (existing types); empty: any",
    )
    guaranteed: dict[DnsLabel, NonNegative] = Field(
        default_factory=dict, description="CU guaranteed per GPU type (existing types)"
    )
    borrow_limit: float | None = Field(
        default=None, ge=0, description="most CU it may borrow from other pools' idle "
        "guarantees; unset: no limit",
    )
    lend_limit: dict[DnsLabel, NonNegative] = Field(
        default_factory=dict, description="most CU of each type it lends; a type not "
        "named lends all its idle guarantee",
    )
    max_borrow_seconds: float = Field(
        default=1800, gt=0, le=365 * 86400,
        description="a lease's length: borrowed CU go back to the lender after it",
    )
    reclaim: Literal["always", "when_needed"] = Field(
        default="always", description="when a lender takes borrowed CU back: at the "
        "lease's end, or only when its own jobs need them",
    )
    placement: Placement = Field(
        default="binpack", description="default placement of its jobs"
    )
    weight: float = Field(default=1, gt=0, le=10_000,
                          description="its share when pools compete for idle CU")


class TeamConfig(ConfigModel):
    """A team: its pool, quota, fair-share weight and Pod policy."""

    model_config = STRICT
    name: DnsLabel = Field(description="the team's name")
    pool: DnsLabel = Field(description="its default pool (an existing pool)")
    allowed_pools: list[DnsLabel] = Field(
        default_factory=list, max_length=64,
        description="other pools its jobs may name (existing pools)",
    )
    quota_units: float | None = Field(
        default=None, ge=0, le=10_000_000,
        description="CU cap over all GPU types; unset: unlimited",
    )
    quota_by_type: dict[DnsLabel, NonNegative] = Field(
        default_factory=dict, description="CU cap per GPU type"
    )
    weight: float = Field(default=1, gt=0, le=10_000,
                          description="its fair share relative to other teams")
    default_priority: PriorityName = Field(
        default="P1", description="the priority class of its jobs that name none"
    )
    max_priority: PriorityName | None = Field(
        default=None, description="the highest priority class its jobs may name (by value; "
        "a job naming a higher one is a 422, so a tenant cannot make its work unpreemptible "
        "or jump the queue); unset: any class",
    )
    # Pod policy (app/domain/pod_policy.py, docs/security.md). Only admins write
    # teams, so only an admin can lower a team to baseline or privileged.
    namespaces: list[Annotated[str, Field(json_schema_extra=LABEL_SCHEMA)]] = Field(
        default_factory=list,
        max_length=64,
        description="namespaces the team's Pods may use; empty: the install's job namespace",
    )
    pod_security: PssLevel = Field(
        default="restricted", description="Pod Security Standards level of the team's Pods"
    )
    service_accounts: list[Annotated[str, Field(json_schema_extra=SUBDOMAIN_SCHEMA)]] = Field(
        default_factory=lambda: ["default"],
        max_length=64,
        description="ServiceAccounts the team's Pods may run as",
    )
    automount_service_account_token: bool = Field(
        default=False, description="may the team's Pods mount their ServiceAccount token"
    )
    # caps on the team's queue (docs/security.md, "Limits"); unset: the install's default
    max_pending: OptInt = Field(
        default=None, ge=1, le=10_000_000,
        description="most jobs the team may have pending at once (a submit past it is a "
        "429); unset: GPUQ_TEAM_MAX_PENDING",
    )
    submit_rate: float | None = Field(
        default=None, gt=0, le=1_000_000,
        description="jobs per second the team may submit, sustained (bursts up to "
        "GPUQ_TEAM_SUBMIT_BURST; past it a 429 with Retry-After); unset: "
        "GPUQ_TEAM_SUBMIT_RATE",
    )

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


class PriorityClassConfig(ConfigModel):
    """A priority class: jobs of a higher value go first and may preempt."""

    model_config = STRICT
    name: PriorityName = Field(description="its name (P0, P1, P2...)")
    value: Int = Field(ge=-2_000_000_000, le=1_000_000_000,
                       description="higher goes first")
    preemptible: bool = Field(default=True,
                              description="may its running jobs be preempted")


DEFAULT_PRIORITY_CLASSES = [
    PriorityClassConfig(name="P0", value=1000, preemptible=False),
    PriorityClassConfig(name="P1", value=500, preemptible=True),
    PriorityClassConfig(name="P2", value=100, preemptible=True),
]


class TraceConfig(ConfigModel):
    """A public trace a scenario replays (`gpuq simulate`)."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["alibaba-openb", "philly"] = Field(description="the trace's format")
    nodes: str | None = Field(default=None, description="alibaba-openb: the node list CSV")
    pods: str | None = Field(default=None, description="alibaba-openb: the pod list CSV")
    path: str | None = Field(default=None, description="philly: the job log")
    options: dict[str, Any] = Field(
        default_factory=dict, description="format-specific options of the trace builder"
    )


def above_max_priority(team: str, prio: str, values: Mapping[str, int],
                       top: str | None) -> str | None:
    """Why ``team``'s job may not name ``prio`` (above its ``max_priority`` ``top``, by the
    classes' ``values``), or None: the one rule of a submit and of a scenario file."""
    if top is None or prio not in values or top not in values or values[prio] <= values[top]:
        return None
    return f"team {team} may name priority classes up to {top} (max_priority); {prio} is above it"


def default_above_max(default: str, values: Mapping[str, int], top: str | None) -> str | None:
    """Why a team's ``default_priority`` does not fit its ``max_priority``, or None."""
    if top is None or default not in values or top not in values or (
            values[default] <= values[top]):
        return None
    return f"default_priority {default} is above max_priority {top}"


class GpuqConfig(ConfigModel):
    """The whole file; `jobs` and `trace` only matter to `gpuq simulate`."""

    model_config = ConfigDict(extra="forbid")
    gpu_types: list[GpuTypeConfig] = Field(default_factory=list,
                                           description="the GPU models and their weights")
    nodes: list[NodeConfig] = Field(
        default_factory=list, description="the nodes (simulated or static clusters)"
    )
    pools: list[PoolConfig] = Field(default_factory=list, description="the pools")
    teams: list[TeamConfig] = Field(default_factory=list, description="the teams")
    priority_classes: list[PriorityClassConfig] = Field(
        default_factory=lambda: list(DEFAULT_PRIORITY_CLASSES),
        description="the priority classes; unset: P0 (1000, not preemptible), P1 (500), "
        "P2 (100)",
    )
    scheduler: dict[str, Any] = Field(
        default_factory=dict, description="scheduler and alert settings (docs/scheduling.md, "
        "docs/observability.md)",
    )
    jobs: list[JobSpec] = Field(default_factory=list,
                                description="`gpuq simulate` only: the scenario's jobs")

    @field_validator("scheduler")
    @classmethod
    def _scheduler_values(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The core's knobs and the alert thresholds are checked here, where a config
        error can name them, not deep in a cycle (a YAML ``1.0e9`` is a string, and
        reached the core as one); a key nothing reads is refused with the nearest one."""
        for key in v:
            if key in REMOVED_KNOBS:
                raise ValueError(f"scheduler.{key}: {REMOVED_KNOBS[key]}")
        refuse_unknown(v, [*SCHEDULER_KNOB_TYPES, "alerts"], "in scheduler")
        _check_knobs({k: x for k, x in v.items() if k != "alerts"}, SCHEDULER_KNOB_TYPES,
                     "scheduler")
        alerts = v.get("alerts")
        if alerts is not None:
            if not isinstance(alerts, Mapping):
                raise ValueError(f"scheduler.alerts: must be a mapping, got {alerts!r}")
            refuse_unknown(alerts, ALERT_KNOB_TYPES, "in scheduler.alerts")
            _check_knobs(alerts, ALERT_KNOB_TYPES, "scheduler.alerts")
        return v

    trace: TraceConfig | None = Field(
        default=None, description="`gpuq simulate` only: a public trace to replay"
    )

    def expanded_nodes(self) -> list[NodeConfig]:
        return [n for node in self.nodes for n in node.expand()]

    @model_validator(mode="after")
    def _node_count(self) -> GpuqConfig:
        """Nodes once ``count`` is expanded stay within ``MAX_NODES``: three entries of
        ``count: 100000`` took 1.9 GB before anything looked at them."""
        total = sum(n.count or 1 for n in self.nodes)
        if total > MAX_NODES:
            raise ValueError(f"nodes: {total:,} once count is expanded, more than "
                             f"{MAX_NODES:,}")
        return self

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
                    for prof in layout:
                        if prof not in gt.mig_profiles:
                            raise ValueError(
                                f"node {n.name}: device {dev} MIG profile {prof!r} "
                                f"is not defined for {gt.name}"
                            )
                    if dev >= n.gpus:
                        raise ValueError(f"node {n.name}: mig_layout device {dev} >= gpus")
        pools = {p.name for p in self.pools}
        for p in self.pools:
            for t in [*p.gpu_types, *p.guaranteed, *p.lend_limit]:
                if types and t not in types:
                    raise ValueError(f"pool {p.name}: unknown gpu type {t!r}")
        values = {c.name: c.value for c in self.priority_classes}
        for tm in self.teams:
            for name in [tm.pool, *tm.allowed_pools]:
                if pools and name not in pools:
                    raise ValueError(f"team {tm.name}: unknown pool {name!r}")
            for key, prio in (("default_priority", tm.default_priority),
                              ("max_priority", tm.max_priority)):
                if prio is not None and prio not in values:
                    raise ValueError(f"team {tm.name}: unknown {key} {prio!r}")
            why = default_above_max(tm.default_priority, values, tm.max_priority)
            if why is not None:
                raise ValueError(f"team {tm.name}: {why}")
        caps = {tm.name: tm.max_priority for tm in self.teams if tm.max_priority is not None}
        for i, j in enumerate(self.jobs):  # a scenario's jobs, as a submit would check them
            why = above_max_priority(j.team, j.priority or "", values, caps.get(j.team))
            if why is not None:
                raise ValueError(f"jobs[{i}]: {why}")
        return self


def load_config(path: str | Path) -> GpuqConfig:
    """Read and validate a config or scenario YAML file (size and alias expansion
    bounded: :mod:`app.domain.yaml_input`)."""
    return GpuqConfig.model_validate(read_yaml_file(path) or {})


# pydantic's error types -> what the value should have been, in a person's words
_EXPECTED = {
    "float_parsing": "a number", "float_type": "a number", "int_parsing": "a whole number",
    "int_type": "a whole number", "int_from_float": "a whole number",
    "bool_parsing": "true or false", "bool_type": "true or false", "string_type": "text",
    "list_type": "a list", "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)", "model_attributes_type": "a mapping (key: value)",
}


def _where(loc: tuple[Any, ...]) -> str:
    """``('gpu_types', 0, 'memory_gb')`` -> ``gpu_types[0].memory_gb``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def model_field_names(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name of ``model`` and of the models inside it (for "did you mean")."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    out = set(model.model_fields)
    for f in model.model_fields.values():
        for arg in _model_args(f.annotation):
            out |= model_field_names(arg, seen)
    return out


def _model_args(tp: Any) -> Iterable[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        yield tp
    for a in getattr(tp, "__args__", ()) or ():
        yield from _model_args(a)


def _unknown_key(key: str, parent: tuple[Any, ...] = ()) -> str:
    known = model_field_names(GpuqConfig)
    if key in known:  # a real key, in the wrong place
        return f"unknown key {key!r} here" + where_it_goes(key, parent[-1:] == ("resources",))
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f"unknown key {key!r}" + (f" (did you mean {close[0]}?)" if close else "")


def validation_problems(err: ValidationError) -> list[str]:
    """One ``where: what is wrong`` line per problem (``gpu_types[0].memory_gb: expected a
    number, got 'lots'``, ``teams[0]: unknown key 'quota' (did you mean quota_units? ...)``),
    without pydantic's boilerplate (its type names, its documentation URL on every line)."""
    out = []
    for e in err.errors(include_url=False):
        where = _where(tuple(e["loc"]))
        kind = e["type"]
        if kind in _EXPECTED:
            got = e.get("input")
            shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
            msg = f"expected {_EXPECTED[kind]}, got {shown}"
        elif kind == "missing":
            msg = "required, but missing"
        elif kind == "extra_forbidden" and e["loc"]:
            where = _where(tuple(e["loc"][:-1]))
            msg = _unknown_key(str(e["loc"][-1]), tuple(e["loc"][:-1]))
        else:
            msg = e["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        out.append(f"{where}: {msg}" if where else msg)
    return out


def describe_errors(err: ValidationError) -> str:
    """:func:`validation_problems` on one line (``; `` between problems)."""
    return "; ".join(validation_problems(err))


def load_config_text(text: str, source: str = "config") -> GpuqConfig:
    return GpuqConfig.model_validate(load_yaml(text, source=source) or {})

"""The job spec (docs/api.md), shared by REST, scenarios and the simulator.

One pydantic model validates every way a job enters gpuq, so a bad field
gets the same 4xx ``detail`` whether it came from curl or a scenario file.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    field_validator,
    model_validator,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# the same rules as JSON Schema patterns, for the OpenAPI document
# a job id in a path: 1-18 ASCII digits. int() alone also read " 1" (``%201``) and
# "١" (Arabic-Indic one) as job 1, against the documented pattern
JOB_ID_PATTERN = "^[0-9]{1,18}$"
_JOB_ID = re.compile(r"[0-9]{1,18}")


def job_id_number(text: str) -> int | None:
    """The job id ``text`` names, or None when it is not one (ASCII digits only)."""
    return int(text) if _JOB_ID.fullmatch(text) else None


DNS_LABEL_PATTERN = DNS_LABEL.pattern
PRIORITY_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$"

Placement = Literal["binpack", "spread"]
Topology = Literal["none", "same_node", "same_rack", "fast_network"]

MAX_REPLICAS = 1024
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_GPUS_PER_REPLICA = 64


def check_dns_label(value: str, field: str = "name") -> str:
    """Names become Pod names and label values, so they must be DNS labels."""
    if not DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{field} {value!r} must be a DNS label: lowercase letters, digits and '-', "
            "1-63 characters, starting and ending with a letter or digit"
            + (f" (e.g. {near!r})" if (near := dns_label_like(value)) else "")
        )
    return value


def dns_label_like(value: str) -> str | None:
    """The DNS label nearest ``value`` (``My_Job`` -> ``my-job``), to show as the fix;
    None when nothing of it is left."""
    near = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", value.lower()))[:63].strip("-")
    return near if near and DNS_LABEL.fullmatch(near) else None


_NAME_RX = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX_RX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
# :func:`is_label_key` and :func:`is_label_value` as JSON Schema (the prefix's
# 253-character cap aside)
LABEL_KEY_PATTERN = f"^({_PREFIX_RX})?{_NAME_RX}$"
LABEL_KEY_MAX = 317  # a 253-character prefix, '/', a 63-character name
LABEL_VALUE_PATTERN = f"^({_NAME_RX})?$"
# a node's labels: any Kubernetes label
NODE_LABELS_SCHEMA: dict[str, Any] = {
    "propertyNames": {"pattern": LABEL_KEY_PATTERN, "maxLength": LABEL_KEY_MAX},
    "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN},
}
# :func:`check_labels` (a job's labels, which go onto its Pods): none of gpuq's own
LABELS_SCHEMA: dict[str, Any] = {
    "propertyNames": {
        **NODE_LABELS_SCHEMA["propertyNames"],
        "not": {"anyOf": [{"pattern": "^gpuq\\.io/"},
                          {"const": "app.kubernetes.io/managed-by"}]},
    },
    "additionalProperties": NODE_LABELS_SCHEMA["additionalProperties"],
}


def is_label_key(key: str) -> bool:
    """A Kubernetes label or annotation key (apimachinery ``IsQualifiedName``): an
    optional DNS-subdomain prefix and '/', then a name of 1-63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return LABEL_NAME.fullmatch(name) is not None


NO_NUL_PATTERN = "^[^\\x00]*$"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("NUL characters are not allowed (PostgreSQL text cannot hold them)")
    return value


class _StatesNoNul:
    """Puts :data:`NO_NUL_PATTERN` into a field's JSON Schema (what :func:`_no_nul`
    checks, with words in the error rather than the pattern)."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Any:
        schema = handler.resolve_ref_schema(handler(core_schema))
        schema["pattern"] = NO_NUL_PATTERN
        return schema


#: free text that is stored: any characters but NUL (without it, a NUL reached the
#: database and the 422 said "invalid value", not which field)
Text = Annotated[str, AfterValidator(_no_nul), _StatesNoNul()]


def is_extended_resource_name(name: str) -> bool:
    """A Kubernetes extended resource name, one a Pod may request (k8s.io/kubernetes
    ``pkg/apis/core/helper/helpers.go``, ``IsExtendedResourceName``): prefixed
    (``domain/name``), outside the ``kubernetes.io`` domain, and ``requests.`` + it a
    qualified name (how a ResourceQuota names it)."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return is_label_key("requests." + name)


# :func:`is_extended_resource_name` as JSON Schema (the prefix's cap aside)
EXTENDED_RESOURCE_SCHEMA: dict[str, Any] = {
    "pattern": f"^{_PREFIX_RX}{_NAME_RX}$",
    "not": {"anyOf": [{"pattern": "kubernetes\\.io/"}, {"pattern": "^requests\\."}]},
}


def is_label_value(value: str) -> bool:
    """A Kubernetes label value (``IsValidLabelValue``): empty, or a name of 1-63."""
    return not value or LABEL_NAME.fullmatch(value) is not None


def check_label_key(key: str, field: str = "labels") -> str:
    """``key`` if it is a Kubernetes label key, else a ValueError naming ``field``."""
    if not is_label_key(key):
        raise ValueError(
            f"{field}: key {key!r} is not a Kubernetes label key ([prefix/]name, the name "
            "1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )
    return key


def check_label_value(value: str, field: str) -> str:
    """``value`` if it is a Kubernetes label value, else a ValueError naming ``field``."""
    if not is_label_value(value):
        raise ValueError(
            f"{field}: value {value!r} is not a Kubernetes label value (empty, or "
            "1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )
    return value


def check_node_labels(labels: dict[str, str]) -> dict[str, str]:
    """A node's labels: each a Kubernetes label (key and value), as the API server
    would hold them (apimachinery ``ValidateLabels``)."""
    for key, value in labels.items():
        check_label_value(value, f"labels.{check_label_key(key)}")
    return labels


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """A job's ``labels`` go onto its Pods, so each must be a Kubernetes label (key: an
    optional DNS-subdomain prefix and '/', then a name of 1-63 characters; value: empty
    or a name), and none may be one of gpuq's own (``gpuq.io/...``, managed-by)."""
    from app.domain.pod_policy import OWNED_KEY_PREFIX, OWNED_LABELS

    check_node_labels(labels)
    for key in labels:
        if key.startswith(OWNED_KEY_PREFIX) or key in OWNED_LABELS:
            raise ValueError(f"labels.{key}: label owned by gpuq")
    return labels


def check_dns_subdomain(value: str, field: str = "name") -> str:
    """ServiceAccount (and most other Kubernetes object) names: RFC 1123 subdomains."""
    if len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{field} {value!r} must be a DNS subdomain: lowercase letters, digits, '-' and "
            "'.', at most 253 characters, starting and ending with a letter or digit"
        )
    return value


def _whole(value: Any) -> Any:
    """2.0 is the integer 2 in JSON (and JSON Schema); "2" and true are not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# an integer field of a strict model: a JSON integer (2 or 2.0), never "2" or true
Int = Annotated[int, BeforeValidator(_whole)]
# the optional one (the validator outside the union keeps the field's bounds in the schema)
OptInt = Annotated[int | None, BeforeValidator(_whole)]


def check_priority_name(value: str, field: str = "name") -> str:
    """Pods get the PriorityClass ``<prefix><name lower-cased>`` (P0 -> gpuq-p0), so a
    priority class name must be a DNS label once lower-cased; upper case stays allowed
    for the P0/P1/P2 of docs/api.md."""
    check_dns_label(value.lower(), field)
    return value


# A name of a gpuq object (GPU type, pool, team, node, job) or a reference to one:
# a DNS label, checked by the server and stated as a JSON Schema pattern.
DnsLabel = Annotated[
    str,
    Field(min_length=1, max_length=63, json_schema_extra={"pattern": DNS_LABEL_PATTERN}),
    AfterValidator(check_dns_label),
]
# A priority class name (or a reference to one): a DNS label once lower-cased.
PriorityName = Annotated[
    str,
    Field(min_length=1, max_length=63, json_schema_extra={"pattern": PRIORITY_NAME_PATTERN}),
    AfterValidator(check_priority_name),
]

MODES = ("gpus", "gpu_units", "mig", "gpu_share")
# The smallest vGPU share that is a real limit. HAMi caps a shared card's compute in
# whole percent (`nvidia.com/gpucores`, 1..100) and its memory in MiB; a share below
# 1 % became `gpucores: 1, gpumem: 0` -- and HAMi reads gpumem 0 as "no memory cap"
# (191 jobs of `gpu_share: 1e-9` once ran on three cards, charged 3.76e-7 CU).
# Upstream: Project-HAMi/HAMi pkg/device/nvidia/device.go (GenerateResourceRequests).
MIN_GPU_SHARE = 0.01


# The non-null JSON type of each optional field a schema branch leaves unset. A branch
# says "unset" as "not of that type" (with the field's own "that type or null", that
# is null): saying ``{"type": "null"}`` made ReDoc merge it with the field's
# ``anyOf [number, null]`` and log "Incompatible types in allOf" for every branch.
UNSET_TYPE = {"gpus": "integer", "gpu_units": "number", "mig": "string", "gpu_share": "number",
              "replicas": "integer", "min_available": "integer"}


def unset(field: str) -> dict[str, Any]:
    """A field's schema in a branch where it must be absent or null."""
    return {"not": {"type": UNSET_TYPE[field]}}


def one_mode_schema(schema: dict[str, Any]) -> None:
    """JSON Schema of "exactly one of gpus, gpu_units, mig, gpu_share is set": one
    branch per mode, each setting its mode and leaving the other three absent or null."""
    schema["oneOf"] = [
        {
            "required": [mode],
            "properties": {
                m: ({"not": {"type": "null"}} if m == mode else unset(m))
                for m in MODES
            },
        }
        for mode in MODES
    ]


class Resources(BaseModel):
    """What one replica (or, for gpu_units, the whole job) asks for."""

    # strict: a number is a JSON number and a flag a JSON boolean, as the OpenAPI
    # says ("2" or 1-for-true are refused, not coerced)
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=one_mode_schema)

    gpus: OptInt = Field(
        default=None, ge=0, le=MAX_GPUS_PER_REPLICA,
        description="whole GPUs per replica (mode 1 of 4: set exactly one of gpus, "
        "gpu_units, mig, gpu_share)",
    )
    gpu_units: float | None = Field(
        default=None, gt=0, le=100_000,
        description="compute units (CU) for the whole job, any GPU types; gpuq picks the "
        "cards and one replica per node used (mode 2 of 4)",
    )
    mig: str | None = Field(
        default=None, min_length=1, max_length=64,
        description="one MIG slice per replica, by profile name (e.g. `1g.10gb`) of an "
        "allowed GPU type (mode 3 of 4)",
    )
    gpu_share: float | None = Field(
        default=None, ge=MIN_GPU_SHARE, lt=1,
        description="a fraction of one shareable card per replica (mode 4 of 4), at least "
        f"{MIN_GPU_SHARE:g}: the smallest share the vGPU mechanism enforces",
    )
    min_gpu_memory_gb: float = Field(
        default=0, ge=0, le=10_000, description="only GPU types with at least this much memory"
    )
    gpu_types: list[DnsLabel] = Field(
        default_factory=list, max_length=64,
        description="GPU types the job may use (existing names); empty: any type",
    )
    avoid_gpu_types: list[DnsLabel] = Field(
        default_factory=list, max_length=64, description="GPU types the job must not use"
    )
    allow_mixed_types: bool = Field(
        default=False, description="may the replicas of one run use different GPU types"
    )
    cpu: float = Field(default=1, ge=0, le=100_000, description="CPU cores per replica")
    memory_gb: float = Field(
        default=1, ge=0, le=1_000_000, description="memory per replica, GB"
    )

    @model_validator(mode="after")
    def _exactly_one_mode(self) -> Resources:
        modes = MODES
        given = [k for k in modes if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "resources must set exactly one of gpus, gpu_units, mig, gpu_share "
                f"(got {', '.join(given) if given else 'none'})"
            )
        return self

    @property
    def mode(self) -> str:
        for k in ("gpus", "gpu_units", "mig", "gpu_share"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError("validated above")


SCENARIO_ONLY = ("submit_at_s", "runtime_s", "speed")


class FailurePolicy(BaseModel):
    """What a failed run does (a Pod of any replica failing fails the run of the gang).

    ``restart``: the whole gang is stopped and queued again, up to ``max_restarts``
    times, then the job ends ``failed``; ``fail``: the job ends ``failed`` at once.
    Either way the other replicas are stopped, so none keeps its GPUs.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    action: Literal["restart", "fail"] = Field(
        default="fail",
        description="`restart`: queue the whole gang again; `fail`: end the job `failed`",
    )
    max_restarts: Int = Field(
        default=3, ge=0, le=100, description="restarts allowed before the job ends `failed`"
    )

    def restarts_allowed(self) -> int:
        return self.max_restarts if self.action == "restart" else 0


def _gang_schema(schema: dict[str, Any]) -> None:
    """JSON Schema of "replicas and min_available are absent with resources.gpu_units"
    (``min_available <= replicas`` compares two values: JSON Schema cannot say it)."""
    schema["anyOf"] = [
        {"properties": {"resources": {"properties": {"gpu_units": unset("gpu_units")}}}},
        {"properties": {"replicas": unset("replicas"), "min_available": unset("min_available")}},
    ]


class JobSpec(BaseModel):
    """A job as submitted (REST body or scenario entry)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_gang_schema)

    name: DnsLabel = Field(description="the job's name (a DNS label: it names its Pods)")
    team: DnsLabel = Field(description="the team the job runs for (an existing team)")
    pool: DnsLabel | None = Field(
        default=None, description="the pool it runs in (one the team may use); "
        "unset: the team's pool",
    )
    priority: PriorityName | None = Field(
        default=None, description="its priority class (P0, P1, P2...); unset: the team's "
        "default priority",
    )
    replicas: OptInt = Field(
        default=None, ge=1, le=MAX_REPLICAS,
        description="Pods of the gang, each with `resources` (absent with gpu_units); "
        "unset: 1",
    )
    min_available: OptInt = Field(
        default=None, ge=1, le=MAX_REPLICAS,
        description="replicas that must run together (at most replicas; absent with "
        "gpu_units); unset: all",
    )
    resources: Resources = Field(description="what one replica asks for")
    placement: Placement | None = Field(
        default=None, description="pack replicas on few nodes or spread them; unset: the "
        "pool's placement",
    )
    topology: Topology = Field(
        default="none", description="where the replicas of a gang must be relative to "
        "each other",
    )
    duration_estimate_s: float | None = Field(
        default=None, gt=0, le=365 * 86400,
        description="expected run time in seconds (backfill and estimated start times)",
    )
    time_limit_s: float | None = Field(
        default=None, gt=0, le=365 * 86400,
        description="the longest it may run, in seconds: a run that reaches it is stopped "
        "and the job ends failed (reason `time limit`, not retried), as Slurm's TimeLimit; "
        "read as the duration estimate when none is given or the estimate is longer, one "
        "the job keeps, so the capacity a reservation waits for frees by then "
        "(docs/scheduling.md)",
    )
    pod_template: dict[str, Any] = Field(
        default_factory=dict,
        description="a Kubernetes PodTemplateSpec for the job's Pods, checked against the "
        "Kubernetes schema and the team's Pod policy (docs/security.md)",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=64, json_schema_extra=LABELS_SCHEMA,
        description="put on every Pod of the job (Kubernetes labels; gpuq's own keys win)",
    )
    # also accepted beside the other job-level fields; kept in resources (excluded from
    # dumps, so stored specs and idempotency hashes have it in one place only)
    allow_mixed_types: bool | None = Field(
        default=None, exclude=True,
        description="the same as `resources.allow_mixed_types` (either place; not both "
        "with different values)",
    )
    # unset: the cluster-wide GPUQ_K8S_MAX_RETRIES restarts apply
    failure_policy: FailurePolicy | None = Field(
        default=None, description="what a failed run does; unset: the install's "
        "GPUQ_K8S_MAX_RETRIES restarts",
    )
    # scenario-only fields (refused by the live service, not in its OpenAPI document)
    submit_at_s: float | None = Field(
        default=None, ge=0, description="`gpuq simulate` only: submit time, s"
    )
    runtime_s: float | None = Field(
        default=None, gt=0, description="`gpuq simulate` only: real run time, s"
    )
    speed: dict[str, StrictFloat] = Field(
        default_factory=dict, description="`gpuq simulate` only: speed per GPU type"
    )

    @field_validator("labels")
    @classmethod
    def _labels_are_kubernetes_labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)

    @model_validator(mode="after")
    def _mixed_types_in_resources(self) -> JobSpec:
        """``allow_mixed_types`` given at the job's level goes into ``resources``."""
        mixed = self.allow_mixed_types
        if mixed is not None:
            res = self.resources
            if "allow_mixed_types" in res.model_fields_set and res.allow_mixed_types != mixed:
                raise ValueError(
                    "allow_mixed_types: given twice with different values (here and in "
                    "resources); give it once"
                )
            res.allow_mixed_types = mixed
            self.allow_mixed_types = None
        return self

    @model_validator(mode="after")
    def _gang_shape(self) -> JobSpec:
        if self.resources.gpu_units is not None:
            if self.replicas is not None or self.min_available is not None:
                raise ValueError(
                    "replicas/min_available must be absent with resources.gpu_units "
                    "(gpuq chooses one replica per node used)"
                )
        else:
            replicas = self.replicas or 1
            if self.min_available is not None and self.min_available > replicas:
                raise ValueError(
                    f"min_available ({self.min_available}) must not exceed replicas ({replicas})"
                )
        for t, s in self.speed.items():
            if s <= 0:
                raise ValueError(f"speed[{t}] must be > 0")
        return self

    def scenario_only_fields(self) -> list[str]:
        """The scenario-only fields this spec sets (the live service refuses them: a run
        time the service would silently ignore is a mistake the user should hear about)."""
        return [f for f in SCENARIO_ONLY if f in self.model_fields_set]

    @property
    def replica_count(self) -> int:
        return self.replicas or 1

    @property
    def gang_min(self) -> int:
        return self.min_available or self.replica_count


def where_it_goes(field: str, in_resources: bool) -> str:
    """Where a job spec takes ``field`` when it came at the other level (``gpus`` beside
    ``name``, ``priority`` inside ``resources``), as " (...)", or "" (said instead of a
    "did you mean gpus?" that names the field given)."""
    if not in_resources and field in Resources.model_fields and \
            field not in JobSpec.model_fields:
        return f" (in a job spec it goes in resources: resources.{field})"
    if in_resources and field in JobSpec.model_fields:
        return f" (in a job spec it goes at the top level, beside resources: {field})"
    return ""

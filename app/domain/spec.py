"""The job spec of API.md, shared by REST, scenarios and the simulator.

One pydantic model validates every way a job enters gpuq, so a bad field
gets the same 4xx ``detail`` whether it came from curl or a scenario file.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

Placement = Literal["binpack", "spread"]
Topology = Literal["none", "same_node", "same_rack", "fast_network"]

MAX_REPLICAS = 1024
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_GPUS_PER_REPLICA = 64


def check_dns_label(value: str, field: str = "name") -> str:
    """Names become Pod names and label values, so they must be DNS labels."""
    if not DNS_LABEL.match(value):
        raise ValueError(
            f"{field} {value!r} must be a DNS label: lowercase letters, digits and '-', "
            "1-63 characters, starting and ending with a letter or digit"
        )
    return value


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """A job's ``labels`` go onto its Pods, so each must be a Kubernetes label (key: an
    optional DNS-subdomain prefix and '/', then a name of 1-63 characters; value: empty
    or a name), and none may be one of gpuq's own (``gpuq.io/...``, managed-by)."""
    from app.domain.pod_policy import OWNED_KEY_PREFIX, OWNED_LABELS

    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix))) or not (
            LABEL_NAME.match(name)
        ):
            raise ValueError(
                f"labels: key {key!r} is not a Kubernetes label key ([prefix/]name, the name "
                "1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
            )
        if value and not LABEL_NAME.match(value):
            raise ValueError(
                f"labels.{key}: value {value!r} is not a Kubernetes label value (empty, or "
                "1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
            )
        if key.startswith(OWNED_KEY_PREFIX) or key in OWNED_LABELS:
            raise ValueError(f"labels.{key}: label owned by gpuq")
    return labels


def check_dns_subdomain(value: str, field: str = "name") -> str:
    """ServiceAccount (and most other Kubernetes object) names: RFC 1123 subdomains."""
    if len(value) > 253 or not DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f"{field} {value!r} must be a DNS subdomain: lowercase letters, digits, '-' and "
            "'.', at most 253 characters, starting and ending with a letter or digit"
        )
    return value


class Resources(BaseModel):
    """What one replica (or, for gpu_units, the whole job) asks for."""

    model_config = ConfigDict(extra="forbid")

    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS_PER_REPLICA)
    gpu_units: float | None = Field(default=None, gt=0, le=100_000)
    mig: str | None = Field(default=None, min_length=1, max_length=64)
    gpu_share: float | None = Field(default=None, gt=0, lt=1)
    min_gpu_memory_gb: float = Field(default=0, ge=0, le=10_000)
    gpu_types: list[str] = Field(default_factory=list, max_length=64)
    avoid_gpu_types: list[str] = Field(default_factory=list, max_length=64)
    allow_mixed_types: bool = False
    cpu: float = Field(default=1, ge=0, le=100_000)
    memory_gb: float = Field(default=1, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _exactly_one_mode(self) -> Resources:
        modes = ("gpus", "gpu_units", "mig", "gpu_share")
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

    model_config = ConfigDict(extra="forbid")

    action: Literal["restart", "fail"] = "fail"
    max_restarts: int = Field(default=3, ge=0, le=100)

    def restarts_allowed(self) -> int:
        return self.max_restarts if self.action == "restart" else 0


class JobSpec(BaseModel):
    """A job as submitted (REST body or scenario entry)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    team: str = Field(min_length=1, max_length=63)
    pool: str | None = Field(default=None, max_length=63)
    priority: str | None = Field(default=None, max_length=63)
    replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    min_available: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    resources: Resources
    placement: Placement | None = None
    topology: Topology = "none"
    duration_estimate_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    pod_template: dict[str, Any] = Field(default_factory=dict)
    # put on every Pod of the job (Kubernetes labels; gpuq's own keys win)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    # unset: the cluster-wide GPUQ_K8S_MAX_RETRIES restarts apply
    failure_policy: FailurePolicy | None = None
    # scenario-only fields (gpuq simulate; the live service refuses them with a 422)
    submit_at_s: float | None = Field(default=None, ge=0)
    runtime_s: float | None = Field(default=None, gt=0)
    speed: dict[str, float] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_dns(cls, v: str) -> str:
        return check_dns_label(v, "name")

    @field_validator("labels")
    @classmethod
    def _labels_are_kubernetes_labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)

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

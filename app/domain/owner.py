"""The Kubernetes workload a job came from (the Kubernetes front door).

A job created from a suspended batch/v1 Job, JobSet... is an ordinary gpuq job
whose ``submitted_by`` names the workload and whose ``idempotency_key`` is the
workload's uid, so the front door creates it exactly once and every reader (API,
CLI, dashboard, dispatcher) tells its owner from the row it already has, without
a column of its own. One encoding, read and written only here.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "kubernetes:"
KEY_PREFIX = "k8s-uid:"


@dataclass(frozen=True, slots=True)
class WorkloadOwner:
    api_version: str  # batch/v1, jobset.x-k8s.io/v1alpha2
    kind: str  # Job, JobSet
    namespace: str
    name: str
    uid: str = ""

    def submitted_by(self) -> str:
        """``kubernetes:<apiVersion>/<Kind>/<namespace>/<name>``."""
        return f"{PREFIX}{self.api_version}/{self.kind}/{self.namespace}/{self.name}"

    def idempotency_key(self) -> str:
        return f"{KEY_PREFIX}{self.uid}"

    @property
    def ref(self) -> str:
        """``Kind namespace/name``, for messages."""
        return f"{self.kind} {self.namespace}/{self.name}"


def owner_of(submitted_by: str | None, idempotency_key: str | None = None) -> WorkloadOwner | None:
    """The workload a job row came from, or None for a REST job."""
    if not submitted_by or not submitted_by.startswith(PREFIX):
        return None
    parts = submitted_by[len(PREFIX):].split("/")
    if len(parts) == 4:  # a core-group kind (Pod groups): v1/Kind/ns/name
        parts = ["", *parts]
    if len(parts) != 5:
        return None
    group, version, kind, namespace, name = parts
    uid = ""
    if idempotency_key and idempotency_key.startswith(KEY_PREFIX):
        uid = idempotency_key[len(KEY_PREFIX):]
    api_version = f"{group}/{version}" if group else version
    return WorkloadOwner(api_version, kind, namespace, name, uid)

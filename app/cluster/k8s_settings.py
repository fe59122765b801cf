"""Settings of the Kubernetes backend (``GPUQ_K8S_*`` environment variables).

Kept apart from :mod:`app.settings` so the simulated default pays nothing
for them and so a site can tune the label keys it already uses without a
code change. Nothing is read at import time.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.cluster.workloads import ADAPTORS
from app.domain.pod_policy import DEFAULT_KUBERNETES_VERSION, InstallPolicy

Csv = Annotated[list[str], NoDecode]


def _split(v: object) -> object:
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return v


class KubeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUQ_K8S_", extra="ignore")

    # Where job Pods go unless the job's pod_template names a namespace.
    namespace: str = "gpuq-jobs"
    # schedulerName on job Pods, so the default scheduler leaves them to gpuq
    scheduler_name: str = "gpuq"
    # PriorityClass of a job = prefix + lower-cased priority name (P0 -> gpuq-p0).
    priority_class_prefix: str = "gpuq-"
    # First label present wins (article style first, then a zone-style label).
    rack_labels: Csv = Field(
        default_factory=lambda: ["gpuq.io/rack", "topology.kubernetes.io/zone"]
    )
    # node label naming its network: ib, roce or eth (default eth)
    network_label: str = "gpuq.io/network"
    # node label naming its NVLink domain
    nvlink_label: str = "gpuq.io/nvlink-domain"
    # Taints gpuq tolerates on behalf of every job Pod (the usual "GPU nodes only"
    # taint). A node with any other NoSchedule/NoExecute taint is not placed on.
    tolerated_taints: Csv = Field(default_factory=lambda: ["nvidia.com/gpu"])
    # Image and command of a job whose pod_template has no containers (demo jobs).
    default_image: str = "busybox:1.36"
    # Watch requests end server-side after this long and are resumed.
    watch_timeout_s: int = Field(default=300, ge=1)
    # Every other API call (create, Binding, eviction, delete, list page, Event) is
    # abandoned after this long without an answer (connect, and again read), so a hung
    # apiserver cannot block the dispatcher's one thread.
    request_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # A watch that sends nothing (no event, no bookmark: the apiserver sends one about
    # every minute) for this long is dropped and resumed: a silent connection.
    watch_idle_timeout_s: float = Field(default=90.0, gt=0)
    # An informer with no completed list, event, bookmark or cleanly ended watch for
    # this long is stale: passes stop planning on its cache and /healthz fails.
    informer_stale_s: float = Field(default=240.0, gt=0)
    # Objects per page when an informer lists (limit/continue; client-go's pager uses 500).
    list_page_size: int = Field(default=500, ge=1, le=10000)
    # delete a victim's Pod when an eviction is refused (PodDisruptionBudget, 429)
    eviction_fallback_delete: bool = True
    # A Pod whose container cannot start (ErrImagePull, ImagePullBackOff,
    # CreateContainerConfigError ...) this long after it was created fails its job
    # with the kubelet's reason, and frees its cards (the kubelet would retry forever).
    start_deadline_s: float = Field(default=300.0, gt=0)
    # Finished Pods of a job are deleted this long after gpuq saw them end (kept that
    # long for `kubectl logs`; they count toward the cluster's terminated-Pod GC
    # threshold, past which PodGC deletes other teams' finished Pods).
    finished_pod_ttl_s: float = Field(default=3600.0, ge=0)
    # A node whose kubelet refused a job's Pod at admission (out of devices after a lost
    # race, affinity) is not offered to that job again for this long.
    rejected_node_ttl_s: float = Field(default=300.0, ge=0)
    # Jobs bound at once by the dispatcher (each bind creates the job's Pods and binds
    # them; kube-scheduler binds every Pod in a goroutine of its own, bounded only by its
    # client's QPS). 1: in turn. 32 binds a backlog faster than 16, at less API server
    # CPU per Pod (docs/benchmarks.md, "Pods/s on a real control plane").
    bind_workers: int = Field(default=32, ge=1, le=256)
    # A job whose Pod fails is requeued this many times before it ends `failed`.
    max_retries: int = Field(default=0, ge=0, le=100)
    # Kubernetes version whose schemas (kubernetes-validate) check job Pod templates.
    version: str = Field(default=DEFAULT_KUBERNETES_VERSION, pattern=r"^v?\d+\.\d+(\.\d+)?$")

    # RuntimeClasses a job's pod_template may name (none by default: the `nvidia`
    # class exposes every card of a node to a container that names it).
    runtime_classes: Csv = Field(default_factory=list)
    # Extended resources a job's pod_template may request besides the GPU types' (an RDMA
    # device plugin's, for InfiniBand: docs/operations.md, "RDMA and InfiniBand"). gpuq
    # does not count them; the kubelet refuses a Pod when they run out.
    extended_resources: Csv = Field(default_factory=list)

    def install_policy(self) -> InstallPolicy:
        """What every team's Pod policy inherits from the install."""
        return InstallPolicy(
            job_namespace=self.namespace,
            tolerated_taints=tuple(self.tolerated_taints),
            kubernetes_version=self.version,
            runtime_classes=tuple(self.runtime_classes),
            extended_resources=tuple(self.extended_resources),
        )

    # Kubernetes workload kinds queued by the front door (docs/operations.md): a
    # suspended one labelled gpuq.io/queue, or in a team's namespace, becomes a job. A kind
    # whose API the cluster does not serve (no CRD) is skipped with one log line, as
    # Kueue's default integrations include the Kubeflow jobs.
    workload_kinds: Csv = Field(default_factory=lambda: ["Job", "JobSet", "PyTorchJob"])

    # Port of MASTER_ADDR (torchrun's c10d rendezvous) on a multi-replica job's Service.
    rendezvous_port: int = Field(default=29500, ge=1, le=65535)

    @field_validator("rack_labels", "tolerated_taints", "runtime_classes", "workload_kinds",
                     "extended_resources", mode="before")
    @classmethod
    def _csv(cls, v: object) -> object:
        return _split(v)

    @field_validator("workload_kinds")
    @classmethod
    def _known_kinds(cls, v: list[str]) -> list[str]:
        """A kind with no adaptor would never be queued: say so at start, not never."""
        unknown = [k for k in v if k not in ADAPTORS]
        if unknown:
            raise ValueError(f"unknown workload kind(s) {', '.join(unknown)} "
                             f"(known: {', '.join(ADAPTORS)})")
        return v

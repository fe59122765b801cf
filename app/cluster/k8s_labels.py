"""Label and annotation keys gpuq reads and writes on Kubernetes objects.

One place, so the node sync, the Pod builder, the status watch and the
README agree on every key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# --- on Pods gpuq creates -------------------------------------------------
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuq"
JOB_ID = "gpuq.io/job-id"
JOB_NAME = "gpuq.io/job-name"
REPLICA = "gpuq.io/replica"
BIND_ID = "gpuq.io/bind-id"  # one per bind attempt
REPLICAS = "gpuq.io/replicas"
TEAM = "gpuq.io/team"
POOL = "gpuq.io/pool"
PRIORITY = "gpuq.io/priority"
# annotations: what the replica holds, so a restarted gpuq (and the node
# sync) knows which devices and slices are gpuq's
ANN_JOB_ID = "gpuq.io/job-id"  # the exact id, should it not be a valid label value
ANN_NODE = "gpuq.io/node"
ANN_GPU_TYPE = "gpuq.io/gpu-type"
ANN_DEVICES = "gpuq.io/devices"  # "0,1,2"
ANN_MIG = "gpuq.io/mig"  # "dev:slice:profile;..."
ANN_SHARE = "gpuq.io/share"
# the leader epoch (fencing token) of the dispatcher that bound the Pod
ANN_LEADER_EPOCH = "gpuq.io/leader-epoch"
# On every Pod gpuq makes: the apiserver keeps the object (Terminating) until gpuq has
# recorded the Pod's outcome and removed this, so a Pod that finishes and is deleted or
# garbage-collected while gpuq cannot see it is still read (the Job controller's
# batch.kubernetes.io/job-tracking, pkg/controller/job/job_controller.go)
OUTCOME_FINALIZER = "gpuq.io/outcome"

# --- on Nodes: gpuq's own labels ------------------------------------------
ARTICLE_GPU_TYPE = "gpu-type"  # a100
ARTICLE_GPU_MEMORY = "gpu-memory"  # 80g
ARTICLE_GPU_WEIGHT = "gpu-weight"  # 10 (informational: the weight comes from the config)

# --- on Nodes: NVIDIA GPU Feature Discovery --------------------------------
GFD_PRODUCT = "nvidia.com/gpu.product"  # NVIDIA-A100-SXM4-80GB
GFD_MEMORY_MIB = "nvidia.com/gpu.memory"  # 81920 (MiB)
GFD_COUNT = "nvidia.com/gpu.count"  # physical cards, MIG or not
GFD_REPLICAS = "nvidia.com/gpu.replicas"  # time-slicing / MPS replicas per card
GFD_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"  # none, time-slicing, mps
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"  # single, mixed
GFD_PRESENT = "nvidia.com/gpu.present"  # "true" on GPU nodes (NFD / GPU Operator)

# --- on Nodes: HAMi's vGPU device plugin (pkg/device/nvidia/device.go) --------
HAMI_REGISTER = "hami.io/node-nvidia-register"  # annotation: the cards it registered

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(v: str) -> str:
    """A string made safe as a label value (<= 63 chars, alnum at both ends)."""
    s = _LABEL_VALUE_BAD.sub("-", v)[:63]
    return s.strip("-_.")


def is_gpuq_pod(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY) == MANAGED_BY_VALUE and JOB_ID in labels


def job_id_of(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return (meta.get("annotations") or {}).get(ANN_JOB_ID) or (meta.get("labels") or {})[JOB_ID]

# --- on Kubernetes workloads (Job, JobSet...): the front door's contract ------
# (docs/operations.md, "Kubernetes workloads"); set by the workload's author
WL_QUEUE = "gpuq.io/queue"  # label: the team whose queue the workload joins
WL_GPU_TYPES = "gpuq.io/gpu-types"  # "a100-80g,h100-80g"
WL_MIN_GPU_MEMORY = "gpuq.io/min-gpu-memory-gb"
WL_DURATION = "gpuq.io/duration-estimate-s"
WL_PRIORITY = "gpuq.io/priority"
WL_POOL = "gpuq.io/pool"
# written by gpuq on the workload
WL_JOB_ID = "gpuq.io/job-id"
WL_STATE = "gpuq.io/state"  # queued, admitted, preempted, refused, cancelled, finished
WL_REASON = "gpuq.io/reason"  # why it waits or was refused
WL_REASON_CODE = "gpuq.io/reason-code"  # its code (the API's reason_code), when it has one
WL_QUEUE_POSITION = "gpuq.io/queue-position"
WL_ESTIMATED_START = "gpuq.io/estimated-start"

"""Kubernetes-native workloads (batch/v1 Job, JobSet, Kubeflow PyTorchJob) queued by
gpuq: one adaptor per kind behind :class:`~app.cluster.workloads.adaptor.WorkloadAdaptor`."""

from __future__ import annotations

from app.cluster.workloads.adaptor import WorkloadAdaptor
from app.cluster.workloads.job import JobAdaptor
from app.cluster.workloads.jobset import JobSetAdaptor
from app.cluster.workloads.pytorchjob import PyTorchJobAdaptor

ADAPTORS: dict[str, WorkloadAdaptor] = {
    a.kind: a for a in (JobAdaptor(), JobSetAdaptor(), PyTorchJobAdaptor())}

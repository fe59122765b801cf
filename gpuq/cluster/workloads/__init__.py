"""Kubernetes-native workloads (batch/v1 Job, JobSet, Kubeflow PyTorchJob) queued by
gpuq: one adaptor per kind behind :class:`~gpuq.cluster.workloads.adaptor.WorkloadAdaptor`."""

from __future__ import annotations

from gpuq.cluster.workloads.adaptor import WorkloadAdaptor
from gpuq.cluster.workloads.job import JobAdaptor
from gpuq.cluster.workloads.jobset import JobSetAdaptor
from gpuq.cluster.workloads.pytorchjob import PyTorchJobAdaptor

ADAPTORS: dict[str, WorkloadAdaptor] = {
    a.kind: a for a in (JobAdaptor(), JobSetAdaptor(), PyTorchJobAdaptor())}

"""One interface for every Kubernetes workload kind gpuq queues.

Modelled on Kueue's ``GenericJob`` (kueue ``pkg/controller/jobframework/interface.go``):
a workload is *suspended* until admitted, describes its Pods as *pod sets* (a
name, a count and a Pod template: ``PodSets()``), is started by un-suspending it
with what admission decided injected into its templates (``RunWithPodSetsInfo``)
and stopped by suspending it again (``Suspend``/``RestorePodSetsInfo``), and says
when it has finished (``Finished``). Kueue hands the Pods to kube-scheduler with
node selectors; gpuq reserves exact nodes and devices, so what it injects is only
the labels that tie the Pods to the gpuq job and the attempt, and it binds each
Pod itself (app/cluster/workloads/pods.py).

An adaptor is pure: it reads and writes JSON objects; the client
(app/cluster/workloads/client.py) does the HTTP. One file per kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Finished = tuple[Literal["succeeded", "failed"], str]


@dataclass(frozen=True, slots=True)
class PodSet:
    """Pods of one shape: Kueue's ``kueue.PodSet`` (name, count, template)."""

    name: str
    count: int
    template: dict[str, Any]


class Unhonourable(ValueError):
    """A workload gpuq cannot queue as it is; the message says why (it becomes a
    Warning Event and the ``gpuq.io/reason`` annotation on the workload)."""


class WorkloadAdaptor(Protocol):
    """What the front door needs of one workload kind."""

    api_version: str  # batch/v1
    kind: str  # Job
    group: str  # batch
    version: str  # v1
    plural: str  # jobs

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        """``spec.suspend`` is true (Kueue's ``IsSuspended``)."""
        ...

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        """The Pods the workload runs at once when started (Kueue's ``PodSets``);
        :class:`Unhonourable` when gpuq cannot run it as one gang."""
        ...

    def admit_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> dict:
        """Merge patch that starts it: ``suspend: false`` and ``labels`` on every Pod
        template (Kueue's ``RunWithPodSetsInfo``; both fields may change while a
        Job is suspended, kubernetes ``pkg/apis/batch/validation``)."""
        ...

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict:
        """Merge patch that stops it (Kueue's ``Suspend``); its controller then
        deletes the running Pods, and for a batch/v1 Job that does not count
        against ``backoffLimit`` (kubernetes ``pkg/controller/job/job_controller.go``)."""
        ...

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        """Its own controller's verdict (Kueue's ``Finished``), or None while it runs."""
        ...

    def pod_order(self, pod: Mapping[str, Any]) -> tuple:
        """Sort key of one of its Pods: pod set, then index, so replica ``i`` is
        the same Pod (rank) in every attempt."""
        ...

    def time_limit_s(self, obj: Mapping[str, Any]) -> float | None:
        """How long it may run (its controller's ``activeDeadlineSeconds``), as the job's
        ``time_limit_s``, or None. The controller ends it there itself; gpuq plans with it
        (a limit is an estimate the job keeps) and stops it there too."""
        ...


#: the longest time limit a job spec takes (``JobSpec.time_limit_s``); a deadline beyond
#: it is no limit gpuq could keep for it, so none is taken
MAX_TIME_LIMIT_S = 365 * 86400


def deadline_s(value: Any) -> float | None:
    """An ``activeDeadlineSeconds`` (a positive whole number) as a time limit, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return float(value) if value <= MAX_TIME_LIMIT_S else None


def template_labels_patch(template: Mapping[str, Any], labels: Mapping[str, str]) -> dict:
    """``{"metadata": {"labels": ...}}`` of a Pod template: its own labels with ``labels``."""
    own = dict(((template.get("metadata") or {}).get("labels")) or {})
    own.update(labels)
    return {"metadata": {"labels": own}}


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The ``status.conditions`` entry of ``type_`` that is True, if any."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None


def as_int(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unhonourable(f"expected a whole number, got {value!r}")
    return value

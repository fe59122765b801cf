"""batch/v1 Job, indexed and non-indexed.

Modelled on Kueue's ``pkg/controller/jobs/job/job_controller.go``: one pod set of
``parallelism`` Pods (Kueue's ``PodSets`` takes ``Spec.Parallelism``, and for an
Indexed Job never more than ``completions``); suspended and started through
``spec.suspend``; finished when the Job has condition ``Complete`` or ``Failed``.
gpuq admits the whole set as one gang (Kueue's all-or-nothing admission), so a
Job whose ``completions`` exceed its ``parallelism`` would run its later Pods on
capacity nobody reserved: such a Job is refused with the reason (it runs as
waves of gangs under its controller, not as one gang).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.cluster.workloads.adaptor import (
    Finished,
    PodSet,
    Unhonourable,
    as_int,
    condition,
    deadline_s,
    template_labels_patch,
)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class JobAdaptor:
    api_version = "batch/v1"
    kind = "Job"
    group = "batch"
    version = "v1"
    plural = "jobs"

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        spec = obj.get("spec") or {}
        parallelism = as_int(spec.get("parallelism"), 1)
        completions = spec.get("completions")
        indexed = spec.get("completionMode") == "Indexed"
        count = parallelism
        if completions is not None:
            completions = as_int(completions, 1)
            count = min(parallelism, completions)
            if completions > parallelism:
                raise Unhonourable(
                    f"completions ({completions}) exceed parallelism ({parallelism}): gpuq "
                    "admits a Job as one gang of all its Pods; set parallelism = completions"
                )
        elif indexed:
            raise Unhonourable("an Indexed Job needs completions")
        if count < 1:
            raise Unhonourable("parallelism 0: the Job runs no Pods")
        return [PodSet("main", count, dict(spec.get("template") or {}))]

    def admit_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> dict:
        template = (obj.get("spec") or {}).get("template") or {}
        return {"spec": {"suspend": False, "template": template_labels_patch(template, labels)}}

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict:
        return {"spec": {"suspend": True}}

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        if condition(obj, "Complete"):
            return ("succeeded", "Job completed")
        failed = condition(obj, "Failed")
        if failed:
            return ("failed", f"Job failed: {failed.get('reason', '')} "
                              f"{failed.get('message', '')}".strip())
        return None

    def time_limit_s(self, obj: Mapping[str, Any]) -> float | None:
        # batch/v1 JobSpec.activeDeadlineSeconds: counted from the Job's start, and
        # reset when a suspended Job resumes (kubernetes pkg/controller/job)
        return deadline_s((obj.get("spec") or {}).get("activeDeadlineSeconds"))

    def pod_order(self, pod: Mapping[str, Any]) -> tuple:
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        idx = ann.get(COMPLETION_INDEX, "")
        return ("main", int(idx) if idx.isdigit() else 0, pod["metadata"]["name"])

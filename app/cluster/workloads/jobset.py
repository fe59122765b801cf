"""JobSet (jobset.x-k8s.io/v1alpha2): replicated Jobs, one gang.

Modelled on Kueue's ``pkg/controller/jobs/jobset/jobset_controller.go``: one pod
set per replicated job, of ``replicas x parallelism`` Pods (its ``PodSets``), the
whole JobSet suspended and started through its own ``spec.suspend`` (the JobSet
controller, ``jobset pkg/controller/jobset_controller.go``, suspends and resumes
its child Jobs with it and carries template changes down to them); finished when
the JobSet has condition ``Completed`` or ``Failed``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from app.cluster.workloads.adaptor import (
    Finished,
    PodSet,
    Unhonourable,
    as_int,
    condition,
    deadline_s,
)
from app.cluster.workloads.job import COMPLETION_INDEX, JobAdaptor

REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"


class JobSetAdaptor:
    api_version = "jobset.x-k8s.io/v1alpha2"
    kind = "JobSet"
    group = "jobset.x-k8s.io"
    version = "v1alpha2"
    plural = "jobsets"

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        out = []
        rjobs = (obj.get("spec") or {}).get("replicatedJobs") or []
        if not rjobs:
            raise Unhonourable("a JobSet needs replicatedJobs")
        for rj in rjobs:
            name = rj.get("name") or ""
            replicas = as_int(rj.get("replicas"), 1)
            job_spec = ((rj.get("template") or {}).get("spec")) or {}
            try:
                (one,) = JobAdaptor().pod_sets({"spec": job_spec})
            except Unhonourable as e:
                raise Unhonourable(f"replicatedJobs[{name}]: {e}") from e
            if replicas > 0:
                out.append(PodSet(name, replicas * one.count, one.template))
        return out

    def admit_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> dict:
        # a merge patch replaces a list whole: send every replicated job, labelled
        rjobs = []
        for rj in (obj.get("spec") or {}).get("replicatedJobs") or []:
            rj = copy.deepcopy(rj)
            tmpl = rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
            tmpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            rjobs.append(rj)
        return {"spec": {"suspend": False, "replicatedJobs": rjobs}}

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict:
        return {"spec": {"suspend": True}}

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        if condition(obj, "Completed"):
            return ("succeeded", "JobSet completed")
        failed = condition(obj, "Failed")
        if failed:
            return ("failed", f"JobSet failed: {failed.get('message', '')}".strip())
        return None

    def time_limit_s(self, obj: Mapping[str, Any]) -> float | None:
        # a JobSet has no deadline of its own; a child Job's activeDeadlineSeconds fails
        # that Job, and with it the JobSet (its default failure policy): the gang's limit
        # is the shortest one its replicated jobs set
        limits = [deadline_s(((rj.get("template") or {}).get("spec") or {})
                             .get("activeDeadlineSeconds"))
                  for rj in (obj.get("spec") or {}).get("replicatedJobs") or []]
        return min((x for x in limits if x is not None), default=None)

    def pod_order(self, pod: Mapping[str, Any]) -> tuple:
        meta = pod.get("metadata") or {}
        labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
        job_idx, idx = labels.get(JOB_INDEX, "0"), ann.get(COMPLETION_INDEX, "0")
        return (labels.get(REPLICATED_JOB, ""), int(job_idx) if job_idx.isdigit() else 0,
                int(idx) if idx.isdigit() else 0, meta.get("name", ""))


"""Bind refusals: the job's own fail it with the apiserver's message, passing ones are
held with backoff, and neither becomes a create/delete loop (fake API server with the
upstream admission answers of tests/fakekube/admission.py + real PostgreSQL)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from app.clock import utcnow
from app.domain.spec import JobSpec
from app.store.catalog_cache import pod_policy_reader
from app.store.jobs import submit_job
from app.store.orm import TeamRow
from tests.fakekube import admission
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import job_row, submit_a100_job

CONFIG = A100_TRAINING_CONFIG
PASSES = 4


def _creates(kube) -> int:
    return sum(1 for m, p in kube.requests if m == "POST" and p.split("?")[0].endswith("/pods"))


JOBS_OWN = {
    "pod-security": (admission.pod_security_restricted, 'violates PodSecurity "restricted'),
    "missing-priorityclass": (admission.priority_classes(set()), "no PriorityClass with name"),
    "missing-namespace": (admission.missing_namespace(set()), 'namespaces "gpuq-jobs" not found'),
    "webhook": (admission.webhook_denial, 'admission webhook "policy.example.com" denied'),
}


@pytest.mark.parametrize("case", sorted(JOBS_OWN))
def test_a_refusal_of_the_jobs_own_fails_it_with_the_apiservers_message(
        kube, sf, a100_dispatcher, case):
    """403 (Pod Security, PriorityClass), 404 (namespace), a webhook's denial: the same on
    every try. The job ends failed, its reason the apiserver's words; one create only."""
    plugin, words = JOBS_OWN[case]
    if case == "pod-security":  # a template that runs as root
        kube.admission.append(lambda ns, pod: plugin(ns, {**pod, "spec": {**pod["spec"],
            "containers": [{**pod["spec"]["containers"][0], "securityContext": {
                "runAsUser": 0}}]}}))
    else:
        kube.admission.append(plugin)
    job_id = submit_a100_job(sf)
    for _ in range(PASSES):
        a100_dispatcher.run_once()
    row = job_row(sf, job_id)
    assert row.status == "failed", row.reason
    assert words in row.reason
    assert _creates(kube) == 1
    assert kube.gpuq_pods() == []


@pytest.mark.parametrize("plugin", [admission.quota_exceeded, admission.rbac_denied],
                         ids=["quota", "rbac"])
def test_a_passing_refusal_holds_the_job_with_backoff_not_a_create_loop(
        kube, sf, a100_dispatcher, plugin):
    """An exceeded ResourceQuota, gpuq's own RBAC: the job waits in the queue with the
    message and is held out of the plan (backoff), so passes do not create and delete
    its Pod again and again; once the refusal passes and the hold ends, it is bound."""
    kube.admission.append(plugin)
    job_id = submit_a100_job(sf)
    for _ in range(PASSES):
        a100_dispatcher.run_once()
    row = job_row(sf, job_id)
    assert row.status == "pending"
    assert "forbidden" in row.reason and "next try in" in row.reason
    assert _creates(kube) == 1, "the refused job was created again every pass"
    assert a100_dispatcher.binder.holds.failures(str(job_id)) == 1
    kube.admission.clear()  # the quota freed up
    a100_dispatcher.binder.holds.clock = lambda: time.monotonic() + 3600  # its hold is over
    a100_dispatcher.run_once()
    assert job_row(sf, job_id).status in ("admitted", "running")
    assert len(kube.gpuq_pods()) == 1
    assert a100_dispatcher.binder.holds.failures(str(job_id)) == 0


def test_a_service_account_not_made_yet_holds_the_job_until_it_exists(kube, sf, a100_dispatcher):
    """A team allowed the ServiceAccount ``trainer`` that its namespace does not have: the
    apiserver's ServiceAccount admission refuses the Pod, 403 ``error looking up service
    account`` (the fake models it; the real control plane says the same,
    test_k8s_real_cluster.py). That is an operator's fix, or the serviceaccounts
    controller's moment after a new namespace: the job waits with the message and a
    backoff, and is bound once the account exists -- it is not failed."""
    with sf() as s:  # the team's allowlist, as `gpuq teams` / the config would set it
        s.scalars(select(TeamRow).where(TeamRow.name == "nlp")).one().service_accounts = [
            "default", "trainer"]
        s.commit()
    a100_dispatcher.cluster.pod_policy_for = pod_policy_reader(
        sf, a100_dispatcher.cluster.ks.install_policy())  # as the runtime wires it
    with sf() as s:
        spec = JobSpec.model_validate({
            "name": "sa", "team": "nlp",
            "resources": {"gpus": 1, "gpu_types": ["a100-80g"], "cpu": 4, "memory_gb": 16},
            "pod_template": {"spec": {"serviceAccountName": "trainer"}}})
        job_id = submit_job(s, spec, now=utcnow()).job.id
        s.commit()
    for _ in range(PASSES):
        a100_dispatcher.run_once()
    row = job_row(sf, job_id)
    assert row.status == "pending", row.reason
    assert 'error looking up service account gpuq-jobs/trainer' in row.reason, row.reason
    assert "next try in" in row.reason
    assert _creates(kube) == 1
    kube.service_accounts.add(("gpuq-jobs", "trainer"))
    a100_dispatcher.binder.holds.clock = lambda: time.monotonic() + 3600  # its hold is over
    a100_dispatcher.run_once()
    assert job_row(sf, job_id).status in ("admitted", "running")
    [pod] = kube.gpuq_pods()
    assert pod["spec"]["serviceAccountName"] == "trainer"

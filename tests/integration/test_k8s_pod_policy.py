"""The Pod policy against the fake Kubernetes API server (real PostgreSQL):
a refused template never reaches the API server, at submit or at bind; an
accepted one arrives with gpuq's owned fields intact."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, update

from app.clock import utcnow
from app.cluster.k8s_settings import KubeSettings
from app.dispatch.dispatcher import Dispatcher
from app.domain.errors import PodPolicyError
from app.domain.spec import JobSpec
from app.store.catalog_cache import pod_policy_reader
from app.store.jobs import submit_job
from app.store.orm import JobRow, TeamRow
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import elector, started_cluster
from tests.fakekube.objects import article_a100

CONFIG = A100_TRAINING_CONFIG

SC = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
GOOD = {
    "metadata": {"namespace": "gpuq-jobs", "labels": {"app": "train"}},
    "spec": {"containers": [{"name": "train", "image": "trainer:1", "securityContext": SC}]},
}


@pytest.fixture
def env(kube, db_url, sf) -> Iterator[tuple]:
    kube.add_node(article_a100("a100-0"))
    policies = pod_policy_reader(sf, KubeSettings().install_policy())
    c = started_cluster(kube, sf, pod_policy_for=policies)
    d = Dispatcher(sf, c, elector=elector(db_url))
    try:
        yield sf, d
    finally:
        d.elector.release()
        c.close()


def _spec(template: dict, name: str = "j") -> JobSpec:
    return JobSpec.model_validate({"name": name, "team": "nlp", "resources": {"gpus": 2},
                                   "pod_template": template})


def _pod_posts(kube) -> list:
    return [r for r in kube.requests if r[0] == "POST" and r[1].split("?")[0].endswith("/pods")]


def test_refused_at_submit_never_reaches_the_api_server(kube, env) -> None:
    sf, d = env
    bad = copy.deepcopy(GOOD)
    bad["spec"]["hostNetwork"] = True
    bad["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    with sf() as s, pytest.raises(PodPolicyError) as e:
        submit_job(s, _spec(bad), now=utcnow())
    assert "pod_template.spec.hostNetwork" in str(e.value)
    with sf() as s:
        assert s.scalar(select(func.count()).select_from(JobRow)) == 0
    d.run_once()
    assert _pod_posts(kube) == [] and kube.gpuq_pods() == []


def test_refused_at_bind_when_the_team_policy_was_tightened(kube, env) -> None:
    sf, d = env
    baseline_only = copy.deepcopy(GOOD)
    baseline_only["spec"]["containers"][0]["securityContext"] = {}
    with sf() as s:
        s.execute(update(TeamRow).values(pod_security="baseline"))
        s.commit()
        job_id = submit_job(s, _spec(baseline_only), now=utcnow()).job.id
        s.commit()
        # the admin tightens the team before the job is bound
        s.execute(update(TeamRow).values(pod_security="restricted"))
        s.commit()
    d.run_once()
    with sf() as s:
        job = s.get(JobRow, job_id)
        assert job.status == "failed"
        assert "Pod policy" in job.reason and "runAsNonRoot" in job.reason
    assert _pod_posts(kube) == []


def test_accepted_template_arrives_with_gpuq_fields_intact(kube, env) -> None:
    sf, d = env
    with sf() as s:
        job_id = submit_job(s, _spec(GOOD), now=utcnow(), submitted_by="token:ci").job.id
        s.commit()
    d.run_once()
    pods = kube.gpuq_pods()
    assert len(pods) == 1
    pod = pods[0]
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == "gpuq-jobs"
    assert meta["labels"]["app"] == "train"
    assert meta["labels"]["gpuq.io/job-id"] == str(job_id)
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "gpuq"
    assert spec["schedulerName"] == "gpuq" and spec["priorityClassName"] == "gpuq-p1"
    assert spec["nodeName"] == "a100-0"  # bound by gpuq's Binding
    assert spec["automountServiceAccountToken"] is False
    main = spec["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert main["securityContext"] == SC
    with sf() as s:
        assert s.get(JobRow, job_id).submitted_by == "token:ci"


def test_default_container_meets_restricted(kube, env) -> None:
    """A job without a template runs gpuq's default container: restricted-compliant."""
    sf, d = env
    with sf() as s:
        submit_job(s, _spec({}), now=utcnow())
        s.commit()
    d.run_once()
    [pod] = kube.gpuq_pods()
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False

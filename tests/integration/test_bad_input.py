"""Bad input: a 4xx whose detail names the field, and nothing written."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.store.orm import JobEventRow, JobRow
from tests.integration.conftest import job_body


def _res(**kw):
    return {**job_body(), "resources": kw}


BAD_JOBS = [
    ("unknown team", {**job_body(), "team": "nobody"}, 422, "team"),
    ("unknown pool", job_body(pool="nopool"), 422, "pool"),
    ("pool not allowed for the team", job_body(pool="inference"), 422, "pool"),
    ("unknown priority", job_body(priority="P9"), 422, "priority"),
    ("unknown gpu type", _res(gpus=1, gpu_types=["h100"]), 422, "resources.gpu_types"),
    (
        "unknown avoided type",
        _res(gpus=1, avoid_gpu_types=["h100"]),
        422,
        "resources.avoid_gpu_types",
    ),
    ("unknown mig profile", _res(mig="7g.99gb"), 422, "resources.mig"),
    ("no mode", _res(cpu=2), 422, "resources"),
    ("two modes", _res(gpus=1, gpu_units=10), 422, "resources"),
    ("gpus and mig", _res(gpus=1, mig="auto"), 422, "resources"),
    ("negative gpus", _res(gpus=-1), 422, "resources.gpus"),
    ("absurd gpus", _res(gpus=100000), 422, "resources.gpus"),
    ("negative memory", _res(gpus=1, memory_gb=-5), 422, "resources.memory_gb"),
    ("share out of range", _res(gpu_share=1.5), 422, "resources.gpu_share"),
    # a share below what the vGPU mechanism enforces used to become an uncapped Pod
    ("share below the enforceable minimum", _res(gpu_share=1e-9), 422, "resources.gpu_share"),
    ("absurd replicas", job_body(replicas=10**6), 422, "replicas"),
    ("min_available > replicas", job_body(replicas=2, min_available=3), 422, "min_available"),
    ("negative duration", job_body(duration_estimate_s=-1), 422, "duration_estimate_s"),
    ("name not a DNS label", job_body(name="Bad_Name!"), 422, "name"),
    ("name too long", job_body(name="a" * 64), 422, "name"),
    # Python's `$` matches before a final newline: these were 201 (a Pod name and labels
    # the API server refuses, at bind)
    ("name with a trailing newline", job_body(name="train\n"), 422, "name"),
    ("label value with a trailing newline", job_body(labels={"app": "x\n"}), 422, "labels"),
    ("label key with a trailing newline", job_body(labels={"app\n": "x"}), 422, "labels"),
    ("label key with an empty prefix", job_body(labels={"/app": "x"}), 422, "labels"),
    ("unknown field", {**job_body(), "colour": "red"}, 422, "colour"),
    ("bad placement", job_body(placement="scatter"), 422, "placement"),
    ("replicas with gpu_units", {**_res(gpu_units=20), "replicas": 2}, 422, "replicas"),
]


def _counts(session_factory):
    with session_factory() as s:
        return (
            s.scalar(select(func.count()).select_from(JobRow)),
            s.scalar(select(func.count()).select_from(JobEventRow)),
        )


@pytest.mark.parametrize(
    ("case", "body", "status", "field"), BAD_JOBS, ids=[c[0] for c in BAD_JOBS]
)
def test_bad_job_is_refused_and_nothing_changes(
    client, admin, session_factory, case, body, status, field
):
    before = _counts(session_factory)
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and field in detail, detail
    assert _counts(session_factory) == before


def test_not_json_and_oversized_bodies(client, admin, session_factory):
    r = client.post(
        "/v1/jobs", content=b"{not json", headers={**admin, "content-type": "application/json"}
    )
    assert r.status_code == 422 and "detail" in r.json()
    big = job_body(labels={f"k{i}": "v" * 50 for i in range(1000)})
    r = client.post("/v1/jobs", json=big, headers=admin)
    assert r.status_code == 413 and r.json()["detail"].startswith("body")
    assert _counts(session_factory) == (0, 0)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/gpu-types", {"name": "H100", "memory_gb": 80, "weight": 20}, "name"),
        ("/v1/gpu-types", {"name": "h100", "memory_gb": -80, "weight": 20}, "memory_gb"),
        # what nodes are matched with and Pods request (before: stored, then the node
        # sync raised re.error, or every bind's Pod was refused by the API server)
        ("/v1/gpu-types", {"name": "h100", "memory_gb": 80, "weight": 20, "product": "H100("},
         "product"),
        ("/v1/gpu-types", {"name": "h100", "memory_gb": 80, "weight": 20, "resource_name": "gpu"},
         "resource_name"),
        ("/v1/gpu-types", {"name": "h100", "memory_gb": 80, "weight": 20, "resource_name":
                           "kubernetes.io/gpu"}, "resource_name"),
        ("/v1/gpu-types", {"name": "h100", "memory_gb": 80, "weight": 20, "mig_profiles": {
            "3g 40gb": {"memory_gb": 40, "compute_fraction": 0.4}}}, "mig_profiles"),
        ("/v1/nodes", {"name": "n1", "gpu_type": "h100", "gpus": 8}, "gpu_type"),
        ("/v1/nodes", {"name": "n1", "gpus": 8}, "gpu_type"),
        # a node's taints and labels as the API server holds a Node's (before, any map of
        # strings was stored: a taint without a key, an effect of "fail" -- found by
        # pytest -m long_fuzz)
        ("/v1/nodes", {"name": "n1", "taints": [{"": "x"}]}, "taints"),
        ("/v1/nodes", {"name": "n1", "taints": [{"key": "a", "effect": "Fail"}]}, "effect"),
        ("/v1/nodes", {"name": "n1", "taints": [{"key": "a b"}]}, "taints"),
        ("/v1/nodes", {"name": "n1", "taints": [{"key": "a", "value": "x\u0000"}]}, "taints"),
        ("/v1/nodes", {"name": "n1", "taints": [{"key": "a"}, {"key": "a"}]}, "taints"),
        ("/v1/nodes", {"name": "n1", "labels": {"zone": "a b"}}, "labels"),
        ("/v1/nodes", {"name": "n1", "labels": {"-zone": "a"}}, "labels"),
        ("/v1/pools", {"name": "p1", "gpu_types": ["h100"]}, "gpu_types"),
        ("/v1/pools", {"name": "p1", "guaranteed": {"a100-80g": -1}}, "guaranteed"),
        ("/v1/teams", {"name": "t1", "pool": "nopool"}, "pool"),
        (
            "/v1/teams",
            {"name": "t1", "pool": "mixed", "default_priority": "P7"},
            "default_priority",
        ),
        ("/v1/teams", {"name": "t1", "pool": "mixed", "quota_units": -3}, "quota_units"),
        ("/v1/priority-classes", {"name": "", "value": 1}, "name"),
        ("/v1/teams", {"name": "ops\n", "pool": "mixed"}, "name"),  # was 201
        ("/v1/teams", {"name": "ops", "pool": "mixed", "namespaces": ["ops-jobs\n"]},
         "namespaces"),
    ],
)
def test_bad_catalog_writes(client, admin, path, body, field):
    before = client.get(path, headers=admin).json()
    r = client.post(path, json=body, headers=admin)
    assert 400 <= r.status_code < 500, r.text
    assert field in r.json()["detail"], r.json()
    assert client.get(path, headers=admin).json() == before


@pytest.mark.parametrize(
    ("path", "params", "hint"),
    [
        ("/v1/jobs", {"stauts": "running"}, "did you mean status?"),
        ("/v1/queue", {"team": "nlp", "limt": "5"}, "did you mean limit?"),
        ("/v1/leases", {"": "x"}, "known:"),
        ("/v1/reports/fairness", {"window": "3600"}, "did you mean window_s?"),
    ],
)
def test_an_unknown_query_parameter_is_named(client, admin, path, params, hint):
    """A misspelt filter was ignored and the answer read as filtered (every job for
    ?stauts=running); found by pytest -m long_fuzz."""
    r = client.get(path, params=params, headers=admin)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("query: unknown parameter") and hint in detail, detail


def test_a_lease_filter_naming_a_missing_pool_is_named(client, admin):
    """As GET /v1/jobs and /v1/queue: 422 with the pools there are (it answered 200 [])."""
    r = client.get("/v1/leases", params={"pool": "trainnig"}, headers=admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("pool: unknown pool 'trainnig' (did you mean training?")
    assert client.get("/v1/leases", params={"pool": "training"}, headers=admin).status_code == 200


def test_an_audit_page_past_the_largest_id_is_refused_at_its_parameter(client, admin):
    """Ids are bigints: a larger ``before`` was the database's "invalid value: bigint out
    of range", naming no parameter (found by pytest -m long_fuzz)."""
    r = client.get("/v1/audit", params={"before": 2**63}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"].startswith("before"), r.text
    assert client.get("/v1/audit", params={"before": 2**63 - 1}, headers=admin).status_code == 200

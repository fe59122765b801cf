"""The request schemas of the OpenAPI document say what the server enforces:
a body the document calls valid is accepted, one it
calls invalid is refused with a 422, for the cases that used to differ
(names that are not DNS labels, two resource modes or none, unknown fields,
"2" for 2 or 1 for true, gpu_units with replicas). The schemathesis run
(test_openapi_fuzz.py) checks the same with generated data; this one pins the
known cases down, each judged by the served document itself.
"""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from app.api import examples
from tests.integration.conftest import job_body


@pytest.fixture
def document(client) -> dict:
    return client.get("/openapi.json").json()


def validator(document: dict, name: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    )


def gpus(**resources) -> dict:
    return job_body(resources=resources)


CASES = [
    ("valid", job_body(), True),
    ("integral float is an integer", gpus(gpus=2.0), True),
    ("explicit null for the other modes", gpus(gpus=1, mig=None, gpu_share=None), True),
    ("gpu_units alone", job_body(resources={"gpu_units": 20}), True),
    ("name not a DNS label", job_body(name="Bad_Name"), False),
    ("team not a DNS label", job_body(team="NLP"), False),
    ("pool not a DNS label", job_body(pool="x" * 64), False),
    ("GPU type not a DNS label", gpus(gpus=1, gpu_types=["A100"]), False),
    ("priority not a name", job_body(priority="p 1"), False),
    ("two modes", gpus(gpus=1, gpu_units=4), False),
    ("no mode", job_body(resources={"cpu": 2}), False),
    ("unknown field", job_body(colour="blue"), False),
    ("unknown resources field", gpus(gpus=1, tpus=2), False),
    ("scenario-only field", job_body(runtime_s=5), False),
    ("number as text", gpus(gpus="2"), False),
    ("boolean as number", gpus(gpus=1, allow_mixed_types=1), False),
    ("integer with a fraction", gpus(gpus=1.5), False),
    ("replicas with gpu_units", job_body(resources={"gpu_units": 4}, replicas=2), False),
    ("gpus above the bound", gpus(gpus=65), False),
    ("share not below 1", gpus(gpu_share=1), False),
    ("label owned by gpuq", job_body(labels={"gpuq.io/team": "x"}), False),
    ("label key not a label", job_body(labels={"a b": "x"}), False),
]


@pytest.mark.parametrize(("what", "body", "valid"), CASES, ids=[c[0] for c in CASES])
def test_the_document_and_the_server_agree_on_a_job(client, admin, document, what, body,
                                                     valid):
    assert validator(document, "JobSpec").is_valid(body) is valid, what
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == (201 if valid else 422), (what, r.text)


def test_the_documented_examples_are_valid_and_accepted(client, admin, document):
    for name, example in examples.JOB.items():
        assert validator(document, "JobSpec").is_valid(example["value"]), name
        r = client.post("/v1/jobs", json=example["value"], headers=admin)
        assert r.status_code == 201, (name, r.text)
    batch = examples.BATCH["two"]["value"]
    assert validator(document, "JobBatch").is_valid(batch)
    assert client.post("/v1/jobs:batch", json=batch, headers=admin).status_code == 201
    for kind, route, component in [(examples.TEAM, "/v1/teams", "TeamConfig"),
                                   (examples.POOL, "/v1/pools", "PoolConfig")]:
        for name, example in kind.items():
            assert validator(document, component).is_valid(example["value"]), name
            r = client.post(route, json=example["value"], headers=admin)
            assert r.status_code == 201, (name, r.text)


def test_patch_bodies_are_typed_and_closed(client, admin, document):
    for component in ("TeamPatch", "PoolPatch", "GpuTypePatch", "NodePatch"):
        schema = document["components"]["schemas"][component]
        assert schema["additionalProperties"] is False, component
        assert "name" not in schema["properties"], component
    team_patch = validator(document, "TeamPatch")
    for body, valid in [({"weight": 3}, True), ({"weight": "3"}, False),
                        ({"colour": "blue"}, False), ({"pool": "Mixed"}, False)]:
        assert team_patch.is_valid(body) is valid, body
        r = client.patch("/v1/teams/nlp", json=body, headers=admin)
        assert r.status_code == (200 if valid else 422), (body, r.text)


def test_parameters_carry_their_constraints(client, admin, document):
    op = document["paths"]["/v1/jobs"]["get"]
    params = {p["name"]: p["schema"] for p in op["parameters"]}
    statuses = params["status"]["anyOf"][0]["enum"]
    assert "pending" in statuses and "running" in statuses
    assert "pattern" in params["team"]["anyOf"][0]
    for path in ("/v1/teams/{name}", "/v1/pools/{name}", "/v1/gpu-types/{name}",
                 "/v1/nodes/{name}", "/v1/priority-classes/{name}", "/v1/jobs/{job_id}"):
        (param,) = document["paths"][path]["get"]["parameters"]
        assert "pattern" in param["schema"], path
    assert client.get("/v1/jobs?status=sleeping", headers=admin).status_code == 422
    assert client.get("/v1/jobs?team=NLP", headers=admin).status_code == 422
    assert client.get("/v1/audit?kind=everything", headers=admin).status_code == 422

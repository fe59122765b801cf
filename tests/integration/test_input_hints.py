"""Errors that say how to fix them: a misspelt field gets "did you mean", a
name that is not a valid name is answered as an unknown name with the valid ones."""

from __future__ import annotations

from tests.integration.conftest import job_body


def _detail(client, admin, body) -> str:
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 422, r.text
    return r.json()["detail"]


def test_misspelt_field_suggests_the_right_one(client, admin):
    d = _detail(client, admin, job_body(resources={"gpu": 2}))
    assert d == "resources.gpu: unknown field (did you mean gpus?)", d


def test_a_field_at_the_wrong_level_says_where_it_goes(client, admin):
    """``gpus`` beside ``name`` (or ``priority`` inside ``resources``) is a real field in
    the wrong place: the old hint was "unknown field (did you mean gpus?)"."""
    body = job_body()
    body["gpus"] = 2
    d = _detail(client, admin, body)
    assert d == "gpus: unknown field here (in a job spec it goes in resources: " \
        "resources.gpus)", d
    d = _detail(client, admin, job_body(resources={"gpus": 1, "priority": "P1"}))
    assert d == "resources.priority: unknown field here (in a job spec it goes at the " \
        "top level, beside resources: priority)", d
    r = client.patch("/v1/gpu-types/a100-80g", json={"name": "x"}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"] == "name: unknown field here"


def test_unknown_type_lists_the_types_and_the_nearest(client, admin):
    d = _detail(client, admin, job_body(resources={"gpus": 1, "gpu_types": ["a100-80gb"]}))
    assert "unknown GPU type 'a100-80gb' (did you mean a100-80g?" in d, d
    assert "rtx4090-24g" in d and "v100-16g" in d


def test_unknown_pool_and_priority(client, admin):
    d = _detail(client, admin, job_body(pool="trainig"))
    assert "unknown pool 'trainig' (did you mean training?" in d, d
    d = _detail(client, admin, job_body(priority="P9"))
    assert "unknown priority class 'P9'" in d and "P0, P1, P2" in d, d


def test_a_name_that_is_not_a_dns_label_is_an_unknown_name(client, admin):
    # the catalog is read (and cached) by a submit first, as on a running server
    assert client.post("/v1/jobs", json=job_body(), headers=admin).status_code == 201
    d = _detail(client, admin, job_body(team="NLP"))
    assert d.startswith("team: unknown team 'NLP' (did you mean nlp?"), d
    assert "DNS label" not in d
    d = _detail(client, admin, job_body(resources={"gpus": 1, "gpu_types": ["A100"]}))
    assert "unknown GPU type 'A100'" in d and "known: a100-80g" in d, d
    assert "DNS label" not in d
    d = _detail(client, admin, job_body(pool="Mixed"))
    assert "unknown pool 'Mixed' (did you mean mixed?" in d, d


def test_an_unknown_name_in_the_path_lists_the_names_and_the_nearest(client, admin):
    # `gpuq usage --team nlpp` answered only "team 'nlpp' not found"
    for path, expect in (
        ("/v1/teams/nlpp/usage", "team 'nlpp' not found (did you mean nlp? known: nlp, "),
        ("/v1/pools/mixd/usage", "pool 'mixd' not found (did you mean mixed? known: "),
        ("/v1/nodes/a100-9", "node 'a100-9' not found (did you mean a100-"),
        ("/v1/teams/zzzzzz", "team 'zzzzzz' not found (known: nlp, recsys, research)"),
    ):
        r = client.get(path, headers=admin)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["detail"].startswith(expect), (path, r.text)


def test_a_value_outside_a_fixed_set_gets_the_nearest(client, admin):
    # pydantic's "Input should be 'binpack' or 'spread'" named no nearest value
    d = _detail(client, admin, job_body(placement="binpak"))
    assert d == "placement: unknown placement 'binpak' (did you mean binpack? known: binpack, " \
        "spread)", d
    r = client.get("/v1/jobs", params={"status": "runing"}, headers=admin)
    assert r.status_code == 422, r.text
    assert "unknown status 'runing' (did you mean running? known: admitted, cancelled" in \
        r.json()["detail"], r.text


def test_a_new_name_that_is_not_a_dns_label_gets_the_nearest_one(client, admin):
    d = _detail(client, admin, job_body(name="My_Job"))
    assert d.startswith("name: name 'My_Job' must be a DNS label") and d.endswith(
        "(e.g. 'my-job')"), d


def test_a_number_given_as_text_gets_its_unit(client, admin):
    # pydantic's "Input should be a valid number" for "1h" and "64Gi"
    d = _detail(client, admin, job_body(duration_estimate_s="1h"))
    assert d == "duration_estimate_s: expected a number of seconds (e.g. 3600 for an hour), " \
        "got '1h'", d
    d = _detail(client, admin, job_body(resources={"gpus": 1, "memory_gb": "64Gi"}))
    assert d == "resources.memory_gb: expected a number of GB (e.g. 64), got '64Gi'", d
    d = _detail(client, admin, job_body(resources={"gpus": "two"}))
    assert d == "resources.gpus: expected a whole number of cards (e.g. 2), got 'two'", d

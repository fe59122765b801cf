"""The OpenAPI document says what the server answers:
one error body shape for every error status, the statuses each kind of
operation can answer, and OPTIONS / 405 ``Allow`` naming every method."""

from __future__ import annotations


def test_every_error_status_is_documented_with_the_one_error_body(client):
    doc = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    err = doc["components"]["schemas"]["ErrorOut"]
    assert err["properties"]["detail"]["type"] == "string" and err["required"] == ["detail"]
    ops = doc["paths"]["/v1/gpu-types/{name}"]
    assert {"401", "403", "404", "409", "422", "503"} <= set(ops["delete"]["responses"])
    assert {"401", "403", "404", "409", "413", "422", "503"} <= set(ops["patch"]["responses"])
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            for status, answer in op["responses"].items():
                if status >= "400" and path != "/healthz":
                    ref = answer["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorOut"), (method, path, status)
    # The liveness probe answers its own body, ok or not (a stale informer or an overrun
    # pass is a 503 with the reason in ``detail``), so a kubelet and a person read the same.
    health = doc["paths"]["/healthz"]["get"]["responses"]
    assert set(health) == {"200", "503"}
    assert "detail" in health["503"]["content"]["application/json"]["schema"]["properties"]
    assert "Retry-After" in doc["paths"]["/v1/jobs"]["post"]["responses"]["503"]["headers"]


def test_a_422_body_matches_the_documented_shape(client, admin):
    r = client.post("/v1/jobs", json={"name": "x"}, headers=admin)
    assert r.status_code == 422
    body = r.json()
    assert isinstance(body["detail"], str) and isinstance(body["errors"], list)


def test_options_and_405_list_every_method_of_the_path(client, admin):
    r = client.options("/v1/gpu-types/a100-80g")
    assert r.status_code == 204
    assert r.headers["allow"] == "DELETE, GET, HEAD, OPTIONS, PATCH"
    r = client.put("/v1/gpu-types/a100-80g", headers=admin, json={})
    assert r.status_code == 405
    assert r.headers["allow"] == "DELETE, GET, HEAD, OPTIONS, PATCH"
    assert client.options("/v1/jobs").headers["allow"] == "GET, HEAD, OPTIONS, POST"

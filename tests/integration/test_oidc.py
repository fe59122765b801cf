"""OIDC bearer JWTs (app/api/oidc.py) with keys the test generates: accepted,
and refused for a bad signature, a wrong audience or issuer, an expired token
and a group no scope is mapped to. JWKS from a file, and from a URL."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from jwt.algorithms import RSAAlgorithm

from app.main import create_app
from app.runtime import Services
from app.settings import Settings
from tests.integration.conftest import job_body

ISSUER = "https://idp.example.test/realms/ml"
GROUPS = {"platform-admins": "admin", "ml-nlp": "team:nlp", "ml-viewers": "team:nlp:read"}


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEY = rsa_key()
OTHER = rsa_key()


def jwks(key: rsa.RSAPrivateKey, kid: str = "k1") -> dict:
    pub = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**pub, "kid": kid, "use": "sig", "alg": "RS256"}]}


def make_jwt(key=KEY, kid: str = "k1", **claims) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": "gpuq", "sub": "alice", "iat": now, "exp": now + 300,
            "groups": ["ml-nlp"]}
    body.update(claims)
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


def oidc_client(services: Services, settings: Settings) -> TestClient:
    svc = Services(**{**services.__dict__, "settings": settings})
    return TestClient(create_app(settings, services=svc))


@pytest.fixture
def oidc(services, tmp_path) -> Iterator[TestClient]:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(KEY)))
    settings = services.settings.model_copy(update={
        "oidc_issuer": ISSUER, "oidc_audience": "gpuq", "oidc_jwks_file": path,
        "oidc_group_scopes": GROUPS})
    with oidc_client(services, settings) as c:
        yield c


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_jwt_accepted_and_subject_recorded(oidc):
    me = oidc.get("/v1/whoami", headers=h(make_jwt())).json()
    assert me == {"name": "oidc:alice", "scope": "team:nlp", "team": "nlp", "read_only": False}
    r = oidc.post("/v1/jobs", json=job_body(), headers=h(make_jwt()))
    assert r.status_code == 201 and r.json()["submitted_by"] == "oidc:alice"
    # the first mapped group wins: an admin who is also in ml-nlp is admin
    admin = make_jwt(sub="bob", groups=["ml-nlp", "platform-admins"])
    assert oidc.get("/v1/whoami", headers=h(admin)).json()["scope"] == "admin"
    viewer = make_jwt(sub="carol", groups="ml-viewers")  # a single string claim
    assert oidc.post("/v1/jobs", json=job_body(), headers=h(viewer)).status_code == 403
    assert oidc.get("/v1/jobs", headers=h(viewer)).status_code == 200


@pytest.mark.parametrize(
    "claims, status, words",
    [
        ({"key": OTHER}, 401, "Signature"),
        ({"aud": "someone-else"}, 401, "audience"),
        ({"iss": "https://evil.example.test"}, 401, "issuer"),
        ({"exp": -3600}, 401, "expired"),  # relative to now, see below
        ({"kid": "unknown"}, 401, "unknown"),
        ({"groups": ["marketing"]}, 403, "groups"),
        ({"groups": []}, 403, "groups"),
        ({"groups": 7}, 401, "groups claim must be a string or a list of strings"),  # was 500
        ({"groups": {"ml-nlp": True}}, 401, "not dict"),
        ({"groups": ["ml-nlp", {"a": 1}]}, 401, "not list holding other values"),
    ],
    ids=["bad-signature", "wrong-audience", "wrong-issuer", "expired", "unknown-kid",
         "unknown-group", "no-group", "number-groups", "object-groups", "mixed-groups"],
)
def test_jwt_refused(oidc, claims, status, words):
    claims = dict(claims)
    if "exp" in claims:
        claims["exp"] = int(time.time()) + claims["exp"]
    token = make_jwt(**claims)  # made now: a token made at collection could expire by itself
    r = oidc.get("/v1/pools", headers=h(token))
    assert r.status_code == status, r.text
    assert words.lower() in r.json()["detail"].lower()


def test_jwt_without_sub_is_refused(oidc):
    now = int(time.time())
    token = jwt.encode({"iss": ISSUER, "aud": "gpuq", "exp": now + 60, "groups": ["ml-nlp"]},
                       KEY, algorithm="RS256", headers={"kid": "k1"})
    assert oidc.get("/v1/pools", headers=h(token)).status_code == 401


def test_api_tokens_still_work_next_to_oidc(oidc, admin):
    assert oidc.get("/v1/pools", headers=admin).status_code == 200


def test_jwks_from_a_url(services):
    body = json.dumps(jwks(KEY)).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/jwks"
        settings = services.settings.model_copy(update={
            "oidc_issuer": ISSUER, "oidc_audience": "gpuq", "oidc_jwks_url": url,
            "oidc_group_scopes": GROUPS})
        with oidc_client(services, settings) as c:
            assert c.get("/v1/whoami", headers=h(make_jwt())).json()["name"] == "oidc:alice"
            assert c.get("/v1/pools", headers=h(make_jwt(key=OTHER))).status_code == 401
    finally:
        server.shutdown()

"""One format for people across the whole API: every timestamp ISO 8601 UTC to the second
(``2026-12-01T05:52:58Z``), no epoch seconds, every number rounded (no
``14.286000000000001``). Walks every GET route of the OpenAPI document (and the answers
of a submit and a tuner evaluation) on a seeded, running gpuq."""

from __future__ import annotations

import re
from typing import Any

from app.domain.people import for_people, iso_utc, rounded
from tests.integration.obs_env import AUTH, job, seeded_env

ISO_ANY = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d")
ISO_SECOND = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def problems(x: Any, path: str, out: list[str]) -> None:
    if isinstance(x, dict):
        for k, v in x.items():
            problems(v, f"{path}.{k}", out)
    elif isinstance(x, list):
        for v in x:
            problems(v, f"{path}[]", out)
    elif isinstance(x, str) and ISO_ANY.match(x) and not ISO_SECOND.match(x):
        out.append(f"{path}: timestamp {x!r}")
    elif isinstance(x, float) and not isinstance(x, bool):
        if 1e9 < x < 4e9:
            out.append(f"{path}: epoch seconds? {x}")
        elif x != rounded(x):
            out.append(f"{path}: unrounded {x}")


def test_the_one_serializer():
    from datetime import UTC, datetime

    t = datetime(2026, 12, 1, 5, 52, 58, 987654, tzinfo=UTC)
    assert iso_utc(t) == iso_utc(t.timestamp()) == "2026-12-01T05:52:58Z"
    assert iso_utc(t.replace(tzinfo=None)) == "2026-12-01T05:52:58Z"  # naive = UTC
    assert rounded(14.286000000000001) == 14.286 and rounded(0.4286) == 0.4286
    assert for_people({"generated_at": t.timestamp(), "n": 3, "x": [103.71172800000001],
                       "at": t, "ok": True}) == {
        "generated_at": "2026-12-01T05:52:58Z", "n": 3, "x": [103.712],
        "at": "2026-12-01T05:52:58Z", "ok": True}


def test_every_api_output_is_for_people():
    with seeded_env() as env:
        c = env.client
        answers: dict[str, Any] = {}
        for i in range(3):  # a100 work with odd durations, a MIG slice, a borrowing v100 job
            r = c.post("/v1/jobs", json=job(f"j{i}", "nlp", 1, "a100", duration=100.3),
                       headers=AUTH)
            answers[f"POST /v1/jobs {i}"] = r.json()
        mig = job("slice", "nlp", 1, "a100")
        mig["resources"] = {"mig": "3g.40gb", "gpu_types": ["a100"]}
        answers["POST mig"] = c.post("/v1/jobs", json=mig, headers=AUTH).json()
        answers["POST borrow"] = c.post("/v1/jobs", json=job("borrow", "nlp", 4, "v100"),
                                        headers=AUTH).json()
        c.post("/v1/jobs", json=job("big", "cv", 4, "v100"), headers=AUTH)
        env.dispatch()
        env.advance(7.123456)
        env.dispatch()
        env.advance(200.3)
        env.dispatch()
        r = c.post("/v1/tuning/evaluate", headers=AUTH)
        answers["POST /v1/tuning/evaluate"] = r.json()
        spec = c.get("/openapi.json").json()
        for path, ops in spec["paths"].items():
            if "get" not in ops or not path.startswith("/v1/"):
                continue
            url = (path.replace("{name}", "nlp").replace("{job_id}", "1")
                   .replace("{id}", "1").replace("{token_id}", "1"))
            url = re.sub(r"\{[^}]+\}", "training", url)
            r = c.get(url, headers=AUTH)
            if r.status_code == 200 and r.headers["content-type"].startswith(
                    "application/json"):
                answers[f"GET {url}"] = r.json()
        assert any(k.startswith("GET /v1/reports/fairness") for k in answers)
        assert answers["GET /v1/leases"], "the borrowing job should hold a lease"
        found: list[str] = []
        for where, body in answers.items():
            problems(body, where, found)
        # a configured value is echoed as configured (4 significant digits below 1)
        assert found == [], "\n".join(found)
        assert ISO_SECOND.match(answers["GET /v1/reports/fairness"]["generated_at"])

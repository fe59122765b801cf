"""``time_limit_s``: an estimate the job keeps (the core reads it as the duration estimate
when none is given, or when the estimate is longer)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.domain.spec import JobSpec
from app.domain.spec_to_request import request_from_spec
from app.scheduling.model import PriorityInfo
from app.store.jobs import spec_hash

BASE = {"name": "j", "team": "t", "resources": {"gpus": 1}}


def _request(**kw: object):
    spec = JobSpec.model_validate({**BASE, **kw})
    return request_from_spec(spec, job_id="1", pool="p", priority=PriorityInfo("P1", 500, True),
                             submitted_at=0.0)


def test_the_limit_is_the_estimate_when_none_is_given() -> None:
    assert _request(time_limit_s=300.0).duration_estimate_s == 300.0
    assert _request(time_limit_s=300.0, duration_estimate_s=120.0).duration_estimate_s == 120.0
    assert _request().duration_estimate_s is None


def test_an_estimate_past_the_limit_is_read_as_the_limit() -> None:
    """A run is stopped at its limit, so a longer estimate cannot be met; not a 422 (the
    schema cannot say one field must not exceed another, and a client that sends both
    within their bounds sends a valid request)."""
    assert _request(time_limit_s=60.0, duration_estimate_s=61.0).duration_estimate_s == 60.0
    for bad in (0, -1, 365 * 86400 + 1):
        with pytest.raises(ValidationError):
            JobSpec.model_validate({**BASE, "time_limit_s": float(bad)})


def test_an_unset_limit_leaves_the_idempotency_hash_as_it_was() -> None:
    """Stored hashes of jobs submitted before the field existed still match a retry."""
    spec = JobSpec.model_validate(BASE)
    body = spec.model_dump(mode="json")
    body.pop("time_limit_s")
    import hashlib
    import json
    assert spec_hash(spec) == hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    assert spec_hash(JobSpec.model_validate({**BASE, "time_limit_s": 5.0})) != spec_hash(spec)

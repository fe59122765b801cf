"""Schemathesis over the whole OpenAPI document, every built-in check on
(issue 12): no 5xx, every answer's status and body documented, request
constraints as the server enforces them, negative data refused. Examples
per operation are bounded (MAX_EXAMPLES) so this stays short in ``make test``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, is_check_class
from schemathesis.config import SchemathesisConfig

from app.main import create_app
from app.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN
from tests.live_server import live_server

MAX_EXAMPLES = 5

# Schema-valid requests may still be refused with a 422 for what JSON Schema cannot say:
# names that must exist (a job's team, a pool's GPU types) and cross-field rules
# (min_available <= replicas); a body over GPUQ_MAX_BODY_BYTES (a deployment setting) is
# refused with 413 whatever it holds.
# Every other check runs with its defaults.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "401", "403", "404", "409", "413", "422"]
            },
            # a body over GPUQ_MAX_BODY_BYTES is refused before it is read: 413
            "negative_data_rejection": {
                "expected-statuses": [
                    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422",
                ]
            },
        }
    }
)

# the document the server serves (generated without a database)
schema = schemathesis.openapi.from_dict(
    create_app(Settings(GPUQ_RUN_LOOPS=False)).openapi(), config=CONFIG
)
ALL_CHECKS = [c for c in CHECKS.get_all() if not is_check_class(c)]


@pytest.fixture
def base_url(services, demo) -> Iterator[str]:
    with live_server(create_app(services=services)) as url:
        yield url


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_answers_as_documented(case, base_url):
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, checks=ALL_CHECKS
    )

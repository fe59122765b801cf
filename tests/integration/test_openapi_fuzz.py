"""Schemathesis over the whole OpenAPI document, every built-in check on:
no 5xx, every answer's status and body documented, request
constraints as the server enforces them, negative data refused. Examples
per operation are bounded (MAX_EXAMPLES) so this stays short in ``make test``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from jsonschema import Draft202012Validator
from schemathesis.checks import CHECKS, is_check_class
from schemathesis.config import SchemathesisConfig

from app.main import create_app
from app.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN
from tests.live_server import live_server

MAX_EXAMPLES = 5

# Every check runs with its defaults: positive data must be accepted (2xx, or 401/403/404/
# 409: a token, an object that is not there, a name already taken), negative data refused
# with a 4xx. What JSON Schema cannot say is made true of the positive cases by
# :func:`map_case` below, not by accepting a 422. A body over GPUQ_MAX_BODY_BYTES is
# refused (413) before it is read, whatever it holds: a refusal of negative data too.
NEGATIVE_REFUSED = [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429",
]
CONFIG = SchemathesisConfig.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": NEGATIVE_REFUSED}}}
)

# the document the server serves (generated without a database)
schema = schemathesis.openapi.from_dict(
    create_app(Settings(GPUQ_RUN_LOOPS=False)).openapi(), config=CONFIG
)
ALL_CHECKS = [c for c in CHECKS.get_all() if not is_check_class(c)]

# objects of the demo config (app/config/demo.yaml) that positive cases name
TEAM, POOL_OF_TEAM, TYPE, MIG = "nlp", "training", "a100-80g", "2g.20gb"
QUERY_NAMES = {"team": TEAM, "pool": POOL_OF_TEAM, "priority": "P1", "gpu_type": TYPE}
FITS = {"cpu": 32, "memory_gb": 128, "gpus": 8, "gpu_units": 40, "min_gpu_memory_gb": 16}


def _job(spec: object) -> None:
    """A job spec names an existing team, pool, priority, GPU types and MIG profile,
    and (comparisons JSON Schema cannot state) min_available <= replicas and one
    allow_mixed_types; its
    pod_template is checked against Kubernetes' own schema, not carried here."""
    if not isinstance(spec, dict):
        return
    spec["team"] = TEAM
    spec.pop("pool", None)
    spec.pop("priority", None)
    spec["pod_template"] = {}
    spec.pop("min_available", None)
    # allowed in either place, not in both with different values
    spec.pop("allow_mixed_types", None)
    reps = spec.get("replicas")
    if isinstance(reps, int | float) and not isinstance(reps, bool):  # 58.0 is a count too
        spec["replicas"] = min(reps, 2)
    res = spec.get("resources")
    if isinstance(res, dict):
        # sizes the demo cluster can hold (a request no node could ever run is a 422 at
        # submit, app/store/catalog_feasibility.py): host CPU/memory of its smallest nodes, one
        # node's cards, card memory every type has
        for key, most in FITS.items():
            if isinstance(res.get(key), int | float) and not isinstance(res[key], bool):
                res[key] = min(res[key], most)
        res.pop("gpu_types", None)
        res.pop("avoid_gpu_types", None)
        if res.get("gpus") == 0:  # jobs without GPUs run on CPU-only nodes: the demo has none
            res["gpus"] = 1
        if spec.get("topology") == "same_node" and isinstance(res.get("gpus"), int | float):
            # every replica on one 8-card node
            res["gpus"] = max(1, min(res["gpus"], 8 // max(1, int(spec.get("replicas") or 1))))
        if res.get("mig") is not None:
            res["mig"] = MIG
            res["gpu_types"] = [TYPE]
        if res.get("gpu_share") is not None:  # 4090s are shareable; nlp reaches them in mixed
            res["gpu_types"] = ["rtx4090-24g"]
            spec["pool"] = "mixed"


def _refs(body: dict, **fixed: object) -> None:
    for key, value in fixed.items():
        if key in body:
            if value is None:
                body.pop(key)
            else:
                body[key] = value


def _node(body: dict) -> None:
    """A node with cards names an existing GPU type and has at most one taint per key
    and effect (as the API server's Node; JSON Schema cannot say either)."""
    _refs(body, gpu_type=TYPE, mig_layout=None)
    if body.get("gpus"):
        body["gpu_type"] = TYPE
    taints = body.get("taints")
    if isinstance(taints, list):
        seen: set = set()
        kept = []
        for t in taints:
            key = (t.get("key"), t.get("effect", "NoSchedule")) if isinstance(t, dict) else None
            if key not in seen:
                seen.add(key)
                kept.append(t)
        body["taints"] = kept


# Schemathesis's coverage phase fills the boundary-size arrays of a batch ("maximum
# items", "near-boundary items") with items that break the item schema itself
# (replicas 0, gpus 65): a generator's shortcut, not data the document calls valid.
# Positive batches keep the items that are valid.
DOCUMENT = create_app(Settings(GPUQ_RUN_LOOPS=False)).openapi()
JOB_SPEC = Draft202012Validator(
    {"$ref": "#/components/schemas/JobSpec", "components": DOCUMENT["components"]}
)


def _batch(body: dict) -> None:
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        return
    for spec in jobs:
        _job(spec)
    kept = [j for j in jobs if JOB_SPEC.is_valid(j)]
    body["jobs"] = kept or [{"name": "one", "team": TEAM, "resources": {"gpus": 1}}]


FIXES = {
    ("POST", "/v1/jobs"): _job,
    ("POST", "/v1/jobs:batch"): _batch,
    # a product is a Python regular expression (JSON Schema's "regex" format is ECMA 262's)
    ("POST", "/v1/gpu-types"): lambda b: _refs(b, product="NVIDIA-A100.*80GB"),
    ("PATCH", "/v1/gpu-types/{name}"): lambda b: _refs(b, product="NVIDIA-A100.*80GB"),
    ("POST", "/v1/pools"): lambda b: _refs(b, gpu_types=[TYPE], guaranteed={}, lend_limit={}),
    ("PATCH", "/v1/pools/{name}"): lambda b: _refs(
        b, gpu_types=[TYPE], guaranteed={}, lend_limit={}
    ),
    ("POST", "/v1/teams"): lambda b: _refs(
        b, pool=POOL_OF_TEAM, allowed_pools=[], quota_by_type={}, default_priority="P1",
        max_priority=None, namespaces=None, service_accounts=None,
    ),
    ("PATCH", "/v1/teams/{name}"): lambda b: _refs(
        b, pool=POOL_OF_TEAM, allowed_pools=[], quota_by_type={}, default_priority="P1",
        max_priority=None, namespaces=None, service_accounts=None,
    ),
    ("PUT", "/v1/teams/{name}/quota"): lambda b: _refs(b, quota_by_type={}),
    ("POST", "/v1/nodes"): lambda b: _node(b),
    ("PATCH", "/v1/nodes/{name}"): lambda b: _node(b),
    ("POST", "/v1/tokens"): lambda b: _refs(b, scope="admin", expires_at=None),
    ("POST", "/v1/teams/{name}/tokens"): lambda b: _refs(b, expires_at=None),
    ("POST", "/v1/tokens/{token_id}/rotate"): lambda b: _refs(b, expires_at=None),
    ("PUT", "/v1/tuning"): lambda b: _refs(b, inference_pools=None, training_pools=None),
}


# what an unsendable negative query value becomes: a control character, which no
# query parameter of the document allows
UNSENDABLE = "\x01"


@schema.hook
def map_case(ctx, case):  # noqa: ANN001
    """Positive cases name objects that exist (JSON Schema cannot say "an existing
    team") and carry no cursor (an opaque value a previous page hands out); negative
    cases are left as generated, but for query values HTTP cannot carry."""
    meta = case.meta
    if meta is None:
        return case
    if not meta.generation.mode.is_positive:
        # a query value HTTP cannot carry ({} or []: the transport drops the parameter)
        # made a "negative" case whose request was valid; send a value that is not
        if isinstance(case.query, dict):
            for key, value in case.query.items():
                if isinstance(value, dict) or value == []:
                    case.query[key] = UNSENDABLE
        return case

    fix = FIXES.get((case.operation.method.upper(), case.operation.path))
    if fix is not None and isinstance(case.body, dict):
        fix(case.body)
    if isinstance(case.query, dict):
        case.query.pop("cursor", None)
        for key, value in QUERY_NAMES.items():  # list filters name objects that exist
            if key in case.query:
                case.query[key] = value
    return case


@pytest.fixture
def base_url(services, demo) -> Iterator[str]:
    # a team's caps on its queue (429) are tests/integration/test_team_limits.py's
    # subject; here they would refuse positive data the document calls valid
    services.settings = services.settings.model_copy(update={
        "max_body_bytes": 50_000_000, "team_max_pending": 0, "team_submit_rate": 0})
    with live_server(create_app(services=services)) as url:
        yield url


_TEAM_TOKENS: dict[str, str] = {}


def team_token(base_url: str) -> str:
    """A token of team ``TEAM`` on this server (made once per server)."""
    if base_url not in _TEAM_TOKENS:
        r = httpx.post(f"{base_url}/v1/teams/{TEAM}/tokens", json={},
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
        r.raise_for_status()
        _TEAM_TOKENS[base_url] = r.json()["token"]
    return _TEAM_TOKENS[base_url]


def _fuzz(examples: int, *, derandomize: bool):  # noqa: ANN202
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=list(HealthCheck), derandomize=derandomize)


@schema.parametrize()
@_fuzz(MAX_EXAMPLES, derandomize=True)
def test_every_operation_answers_as_documented(case, base_url):
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, checks=ALL_CHECKS
    )


@schema.parametrize()
@_fuzz(MAX_EXAMPLES, derandomize=True)
def test_every_operation_answers_a_team_as_documented(case, base_url):
    """The same checks with a team's token: admin routes answer 403, other teams' objects
    404, and every answer is one the document lists."""
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {team_token(base_url)}"},
        checks=ALL_CHECKS,
    )


# The long variant, run by hand (``pytest -m long_fuzz``; not in make test): the same
# checks with LONG_EXAMPLES random examples per operation and token, a new draw each run
# (Hypothesis prints how to reproduce a failure).
LONG_EXAMPLES = 100


@pytest.mark.long_fuzz
@schema.parametrize()
@_fuzz(LONG_EXAMPLES, derandomize=False)
def test_long_every_operation_answers_as_documented(case, base_url):
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, checks=ALL_CHECKS
    )


@pytest.mark.long_fuzz
@schema.parametrize()
@_fuzz(LONG_EXAMPLES, derandomize=False)
def test_long_every_operation_answers_a_team_as_documented(case, base_url):
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {team_token(base_url)}"},
        checks=ALL_CHECKS,
    )


def test_every_operation_has_an_id_of_its_own(request):
    """Schemathesis' items (one per operation) carry the operation in their node id
    (tests/conftest.py): with one shared id, pytest-xdist's workers ran 1 of the 110."""
    from tests.conftest import pytest_collection_modifyitems

    def flat(nodes: list) -> list:
        return [i for n in nodes
                for i in ([n] if isinstance(n, pytest.Item) else flat(n.collect()))]

    def fuzz(nodes: list) -> list:
        return [i for i in nodes if i.path == request.node.path
                and i.name.startswith("test_every_operation_answers")]

    items = fuzz(request.session.items)  # as collected for this run (make test: all)
    if len(items) < 100:  # a selection (-k, one test): collect the module again (~6 s)
        items = fuzz(flat(request.node.parent.collect()))
        pytest_collection_modifyitems(request.config, items)
    ids = [i.nodeid for i in items]
    assert len(ids) >= 100 and len(set(ids)) == len(ids), ids[:3]
    assert any(i.endswith("test_every_operation_answers_as_documented[GET /healthz]")
               for i in ids)

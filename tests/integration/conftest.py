"""Integration fixtures: real PostgreSQL, the demo config, a simulated
cluster on a manual clock, and an API client. Every test starts from empty
tables (TRUNCATE after each test keeps tests isolated and fast)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from app.clock import ManualClock
from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import Dispatcher
from app.main import create_app
from app.runtime import Services, load_settings_config
from app.settings import Settings
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import node_info
from app.store.orm import NodeRow
from tests.conftest import truncate_all

ADMIN_TOKEN = "admin-test-token"


@pytest.fixture(autouse=True)
def _clean(engine: Engine) -> Iterator[None]:
    yield
    truncate_all(engine)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(
        GPUQ_DATA_DIR=tmp_path,
        GPUQ_ADMIN_TOKEN=ADMIN_TOKEN,
        GPUQ_RUN_LOOPS=False,
        GPUQ_MAX_BODY_BYTES=20_000,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def demo(session_factory, settings) -> None:
    """The shipped demo config in the database."""
    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, load_settings_config(settings))
        s.commit()


@pytest.fixture
def cluster(session_factory, demo, clock) -> SimulatedCluster:
    with session_factory() as s:
        nodes = [node_info(r) for r in s.scalars(select(NodeRow))]
    return SimulatedCluster(nodes=nodes, clock=clock, speed=1.0)


@pytest.fixture
def dispatcher(session_factory, cluster, clock) -> Dispatcher:
    return Dispatcher(session_factory, cluster, clock=clock)


@pytest.fixture
def services(settings, engine, session_factory, cluster, clock) -> Services:
    return Services(
        settings=settings,
        engine=engine,
        session_factory=session_factory,
        cluster=cluster,
        clock=clock,
        admin_token=ADMIN_TOKEN,
    )


@pytest.fixture
def client(services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


@pytest.fixture
def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def team_token(client, admin):
    """``team_token("nlp")`` -> headers acting as that team."""

    def make(team: str) -> dict[str, str]:
        r = client.post(f"/v1/teams/{team}/tokens", headers=admin)
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    return make


def job_body(name: str = "train", team: str = "nlp", **kw) -> dict:
    body = {
        "name": name,
        "team": team,
        "resources": {"gpus": 2, "gpu_types": ["a100-80g"]},
        "duration_estimate_s": 100,
    }
    body.update(kw)
    return body


def submit_before_shrink(client, admin, body: dict, gpu_type: str = "a100-80g") -> str:
    """Submit a job no node of today's cluster could hold, the way it happens live: the
    job is accepted while a large node exists (submit-time feasibility refuses it
    otherwise), then the node goes away, so the dispatcher's ``unschedulable`` path is
    what the test sees."""
    node = {"name": "tmp-huge", "gpu_type": gpu_type, "gpus": 64, "cpu": 10000,
            "memory_gb": 100000}
    r = client.post("/v1/nodes", json=node, headers=admin)
    assert r.status_code == 201, r.text
    mem = (body.get("resources") or {}).get("min_gpu_memory_gb")
    old = client.get(f"/v1/gpu-types/{gpu_type}", headers=admin).json()["memory_gb"]
    if mem and mem > old:
        r = client.patch(f"/v1/gpu-types/{gpu_type}", json={"memory_gb": mem}, headers=admin)
        assert r.status_code == 200, r.text
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    if mem and mem > old:
        r = client.patch(f"/v1/gpu-types/{gpu_type}", json={"memory_gb": old}, headers=admin)
        assert r.status_code == 200, r.text
    r = client.delete("/v1/nodes/tmp-huge", headers=admin)
    assert r.status_code in (200, 204), r.text
    return jid

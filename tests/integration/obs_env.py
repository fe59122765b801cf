"""A seeded gpuq for the observability tests: own database, manual clock, simulated cluster.

Each test module gets a uniquely named database on ``TEST_DATABASE_URL``
(or on an embedded PostgreSQL when it is unset; several engineers run tests
at once), migrated to head and dropped at the end. Nothing is mocked: the
API, the dispatcher, the store and the simulated cluster are the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from fastapi.testclient import TestClient

from app.clock import ManualClock
from app.cluster.simulated import SimulatedCluster
from app.dispatch.metrics_loop import MeteredDispatcher
from app.domain.config import load_config_text
from app.main import create_app
from app.metrics import GpuqMetrics
from app.runtime import Services
from app.settings import Settings
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import node_info
from app.store.db import make_engine, make_session_factory
from app.store.orm import NodeRow
from tests.pg_server import own_database
from tests.ports import free_port

ADMIN = "admin-test-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}

CONFIG = """
gpu_types:
  - {name: a100, memory_gb: 80, weight: 10,
     mig_profiles: {"3g.40gb": {memory_gb: 40, compute_fraction: 0.4286}}}
  - {name: v100, memory_gb: 16, weight: 4}
nodes:
  - {name: a100-0, gpu_type: a100, gpus: 4, cpu: 64, memory_gb: 512,
     mig_layout: ["3g.40gb", "3g.40gb"]}
  - {name: v100-0, gpu_type: v100, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: training, gpu_types: [a100, v100], guaranteed: {a100: 30}}
  - {name: inference, gpu_types: [v100], guaranteed: {v100: 16}}
teams:
  - {name: nlp, pool: training, quota_units: 1000, default_priority: P1}
  - {name: cv, pool: inference, quota_units: 1000, default_priority: P2}
scheduler:
  alerts: {hol_min_samples: 5, hol_min_p99_s: 60}
"""


@contextmanager
def serving(app) -> Iterator[str]:
    """``app`` on a real port in a thread (uvicorn, no lifespan); yields its base URL."""
    import threading
    import time

    import uvicorn

    port = free_port()
    srv = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(timeout=10)


@contextmanager
def fresh_database() -> Iterator[str]:
    """A database of the caller's own, migrated to head (tests/pg_server.py's template)."""
    with own_database("gpuq_obs", migrated=True) as url:
        yield url


@dataclass
class Env:
    client: TestClient
    services: Services
    clock: ManualClock
    cluster: SimulatedCluster
    dispatcher: MeteredDispatcher

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def dispatch(self) -> None:
        self.dispatcher.run_once()

    def submit(self, spec: dict, token: str = ADMIN) -> dict:
        r = self.client.post("/v1/jobs", json=spec, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 201, r.text
        return r.json()

    def get(self, path: str, **params) -> dict:
        r = self.client.get(path, params=params, headers=AUTH)
        assert r.status_code == 200, r.text
        return r.json()


@contextmanager
def seeded_env(config_text: str = CONFIG, prometheus_url: str | None = None) -> Iterator[Env]:
    with fresh_database() as url:
        engine = make_engine(url, pool_size=4)
        try:
            sf = make_session_factory(engine)
            with sf() as s:
                ensure_priority_classes(s)
                apply_config(s, load_config_text(config_text))
                s.commit()
                nodes = [node_info(r) for r in s.query(NodeRow).order_by(NodeRow.name)]
            clock = ManualClock()
            cluster = SimulatedCluster(nodes=nodes, clock=clock)
            metrics = GpuqMetrics()
            settings = Settings(
                DATABASE_URL=url,
                GPUQ_ADMIN_TOKEN=ADMIN,
                GPUQ_RUN_LOOPS=False,
                GPUQ_PROMETHEUS_URL=prometheus_url,
            )
            services = Services(
                settings=settings,
                engine=engine,
                session_factory=sf,
                cluster=cluster,
                clock=clock,
                admin_token=ADMIN,
                metrics=metrics,
            )
            dispatcher = MeteredDispatcher(sf, cluster, clock=clock, metrics=metrics)
            app = create_app(settings, services)
            app.state.metrics_max_age_s = 0.0  # every scrape recomputes
            app.state.metrics_alerts_every_s = 0.0  # the head-of-line alert too
            with TestClient(app) as client:
                yield Env(client, services, clock, cluster, dispatcher)
        finally:
            engine.dispose()


def job(name: str, team: str, gpus: int, gpu_type: str, duration: float = 60.0, **extra) -> dict:
    spec = {
        "name": name,
        "team": team,
        "resources": {"gpus": gpus, "gpu_types": [gpu_type], "cpu": 1, "memory_gb": 1},
        "duration_estimate_s": duration,
    }
    spec.update(extra)
    return spec


__all__ = [
    "ADMIN", "AUTH", "CONFIG", "Env", "free_port", "job", "seeded_env", "serving", "timedelta"
]

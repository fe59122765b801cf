"""pytest fixtures: a running fake API server, a KubernetesCluster on it, and the
database of a test's own that the Kubernetes integration tests share."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy.orm import Session, sessionmaker

from app.clock import utcnow
from app.cluster.k8s_settings import KubeSettings
from app.cluster.kubernetes import KubernetesCluster
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import LeaderElector
from app.domain.spec import JobSpec
from app.store.db import make_engine, make_session_factory
from app.store.jobs import submit_job
from app.store.node_rows import gpu_type_configs
from app.store.orm import JobRow
from tests.fakekube.db import A100_TRAINING_CONFIG, fresh_database
from tests.fakekube.objects import GPU_TYPES, article_a100
from tests.fakekube.server import FakeKube


def api_client_for(url: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = url
    return client.ApiClient(cfg)


def wait_until(pred: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Poll a condition the background watch makes true (bounded, no timing asserted)."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube(watch_timeout_s=2)
    k.start()
    yield k
    k.stop()


def make_cluster(kube: FakeKube, **settings: object) -> KubernetesCluster:
    """gpuq's cluster on ``kube``: the fake, or the real control plane (tests/realkube),
    where gpuq talks with its own ServiceAccount token in the test's namespace."""
    ks = KubeSettings(watch_timeout_s=2, **{**getattr(kube, "settings", {}), **settings})
    api = kube.gpuq_api_client() if hasattr(kube, "gpuq_api_client") else api_client_for(kube.url)
    return KubernetesCluster(api, GPU_TYPES, ks)


@pytest.fixture
def cluster(kube: FakeKube) -> Iterator[KubernetesCluster]:
    c = make_cluster(kube)
    c.start(wait_s=10)
    yield c
    c.close()


def started_cluster(
    kube: FakeKube, sf: sessionmaker[Session], pod_policy_for: Any = None
) -> KubernetesCluster:
    """A cluster on the fake API server that knows the database's GPU types (as the
    runtime configures it) and, when given, the Pod policy reader; informers synced."""
    with sf() as s:
        types = gpu_type_configs(s)
    c = make_cluster(kube)
    c.set_gpu_types(types)
    if pod_policy_for is not None:
        c.pod_policy_for = pod_policy_for
    c.start(wait_s=10)
    return c


def elector(db_url: str, lock: str | None = None) -> LeaderElector:
    """A leader elector on ``db_url``; a lock name of its own unless replicas share ``lock``."""
    return LeaderElector(db_url, lock or f"gpuq-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database of the test's own, configured with its module's ``CONFIG``
    (the A100 training world of :data:`A100_TRAINING_CONFIG` when it has none)."""
    yield from fresh_database(getattr(request.module, "CONFIG", A100_TRAINING_CONFIG))


@pytest.fixture
def sf(db_url: str) -> Iterator[sessionmaker[Session]]:
    """Sessions on the test's database; the engine is disposed after the test."""
    engine = make_engine(db_url, pool_size=6)
    yield make_session_factory(engine)
    engine.dispose()


def submit_a100_job(sf: sessionmaker[Session], gpus: int = 1, name: str = "sft",
                    **extra: Any) -> int:
    """Submit one job of team nlp on a100-80g (the world of :data:`A100_TRAINING_CONFIG`);
    ``extra``: more fields of the job spec."""
    with sf() as s:
        spec = JobSpec.model_validate({
            "name": name, "team": "nlp",
            "resources": {"gpus": gpus, "gpu_types": ["a100-80g"], "cpu": 4, "memory_gb": 16},
            **extra})
        job_id = submit_job(s, spec, now=utcnow()).job.id
        s.commit()
    return job_id


def job_row(sf: sessionmaker[Session], job_id: int) -> JobRow:
    """The job's row as it is now (detached: read its fields after the session)."""
    with sf() as s:
        row = s.get(JobRow, job_id)
        assert row is not None, f"job {job_id} does not exist"
        s.expunge(row)
        return row


@pytest.fixture
def a100_dispatcher(kube: FakeKube, sf: sessionmaker[Session]) -> Iterator[Dispatcher]:
    """One dispatcher (no elector) on the fake API server with one A100 node."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    yield Dispatcher(sf, c)
    c.close()


@pytest.fixture
def a100_replicas(kube: FakeKube, db_url: str,
        sf: sessionmaker[Session]) -> Iterator[tuple[Dispatcher, Dispatcher]]:
    """Two dispatcher replicas on one lock and one A100 node; the first to run leads."""
    kube.add_node(article_a100("a100-0"))
    lock = f"gpuq-{uuid.uuid4().hex[:8]}"
    made = []
    for _ in range(2):
        c = started_cluster(kube, sf)
        made.append((Dispatcher(sf, c, elector=elector(db_url, lock)), c))
    yield made[0][0], made[1][0]
    for d, c in made:
        d.elector.release()
        c.close()

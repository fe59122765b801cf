"""pytest fixtures: a running fake API server and a KubernetesCluster on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from app.cluster.k8s_settings import KubeSettings
from app.cluster.kubernetes import KubernetesCluster
from tests.fakekube.objects import GPU_TYPES
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
    ks = KubeSettings(watch_timeout_s=2, **settings)
    return KubernetesCluster(api_client_for(kube.url), GPU_TYPES, ks)


@pytest.fixture
def cluster(kube: FakeKube) -> Iterator[KubernetesCluster]:
    c = make_cluster(kube)
    c.start(wait_s=10)
    yield c
    c.close()

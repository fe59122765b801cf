"""The Pod watch of bench/throughput_kube.py, which times every bind it measures."""

from __future__ import annotations

from kubernetes import client

from bench.throughput_kube import BindWatch
from tests.fakekube.fixtures import api_client_for, kube, wait_until  # noqa: F401
from tests.fakekube.server import FakeKube


def bound_pod(name: str, ns: str = "bench") -> dict:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": "n-0", "containers": [{"name": "c", "image": "x"}]}}


def test_bind_watch_relists_after_410_gone(kube: FakeKube) -> None:  # noqa: F811
    """A watch answered 410 Gone (the version left the watch cache, or etcd compacted
    it) lists again and watches from the list's version, as client-go's reflector does.
    The bench's watch retried the same version, answered 410 forever: the Pods bound
    meanwhile were never seen, and a phase waited for them until its deadline."""
    kube.watch_timeout_s = 0.3
    core = client.CoreV1Api(api_client_for(kube.url))
    w = BindWatch(core, "bench", watch_s=1, start=False)
    kube.add_pod(bound_pod("p-0"))
    kube.add_pod(bound_pod("other", ns="elsewhere"))
    w.step()  # the first list
    assert set(w.bound) == {"p-0"} and w.relists == 1
    kube.add_pod(bound_pod("p-1"))
    w.step()  # a watch from the list's version
    assert set(w.bound) == {"p-0", "p-1"} and w.rv is not None
    kube.compact()  # while no watch is open: the version it resumes from is gone
    kube.add_pod(bound_pod("p-2"))
    w.step()  # 410 Gone: the version is dropped
    assert w.rv is None and "p-2" not in w.bound
    w.step()  # relist
    assert set(w.bound) == {"p-0", "p-1", "p-2"} and w.relists == 2
    kube.add_pod(bound_pod("p-3"))
    w.step()  # and the watch goes on from the relist's version
    assert "p-3" in w.bound and w.relists == 2


def test_bind_watch_relists_after_410_gone_as_http(kube: FakeKube) -> None:  # noqa: F811
    """The same 410 answered as the HTTP status of the watch request."""
    kube.watch_timeout_s = 0.3
    kube.gone_as_http = True
    core = client.CoreV1Api(api_client_for(kube.url))
    w = BindWatch(core, "bench", watch_s=1, start=False)
    kube.add_pod(bound_pod("p-0"))
    w.step()
    w.step()
    kube.compact()
    kube.add_pod(bound_pod("p-1"))
    w.step()
    assert w.rv is None
    w.step()
    assert set(w.bound) == {"p-0", "p-1"}


def test_bind_watch_thread_sees_pods_bound_across_a_410(kube: FakeKube) -> None:  # noqa: F811
    """Its own thread: Pods bound before and after an expiry are all seen."""
    kube.watch_timeout_s = 0.3
    core = client.CoreV1Api(api_client_for(kube.url))
    w = BindWatch(core, "bench", watch_s=1)
    try:
        for i in range(20):
            kube.add_pod(bound_pod(f"p-{i}"))
            if i % 5 == 4:
                kube.compact()
        wait_until(lambda: len(w.bound) == 20, 15)
    finally:
        w.stop()

"""Informers that scale: gpuq's own Pods by label, other workloads'
Pods only while bound and running (field selector), slimmed; lists in pages.

The first tests run the same requests on the fake API server and on the real
kube-apiserver (``@BOTH``), so the fake's selectors and pages are checked against the
real thing, not against themselves.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.cluster.k8s_usage import FOREIGN_PODS_FIELDS, FOREIGN_PODS_LABELS, REQUESTS
from tests.fakekube.fixtures import api_client_for, make_cluster, wait_until
from tests.fakekube.objects import article_a100, pod
from tests.realkube.both import BOTH, kube

OTHER = {"team": "vision", "tier": "batch"}


def _core(kube) -> client.CoreV1Api:
    api = kube.gpuq_api_client() if hasattr(kube, "gpuq_api_client") else api_client_for(kube.url)
    return client.CoreV1Api(api)


def _names(items: list[dict]) -> set[str]:
    return {i["metadata"]["name"] for i in items}


def _list_all(core: client.CoreV1Api, **kw) -> tuple[list[dict], int, set[str]]:
    """Every page of one list: (items, pages, resourceVersions the pages carried)."""
    items, pages, versions, token = [], 0, set(), None
    while True:
        extra = {"_continue": token} if token else {}
        data = json.loads(core.list_pod_for_all_namespaces(
            _preload_content=False, **kw, **extra).data)
        items += data["items"]
        pages += 1
        versions.add(data["metadata"]["resourceVersion"])
        token = data["metadata"].get("continue")
        if not token:
            return items, pages, versions


def _world(kube) -> dict[str, str]:
    """Two nodes; five Pods of other workloads; returns name -> namespace."""
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}"))
    made = {}
    for i in range(4):
        p = kube.add_pod(pod(f"other-{i}", f"a100-{i % 2}", {"cpu": "1", "nvidia.com/gpu": "1"},
                             labels={**OTHER, "idx": str(i)}))
        made[p["metadata"]["name"]] = p["metadata"]["namespace"]
    p = kube.add_pod(pod("unlabelled", "a100-0", {"cpu": "1"}))
    made[p["metadata"]["name"]] = p["metadata"]["namespace"]
    return made


@BOTH
def test_label_selectors_fields_and_pages_as_the_apiserver_answers(kube):
    made = _world(kube)
    ns = next(iter(made.values()))
    core = _core(kube)
    mine = lambda items: [i for i in items if i["metadata"]["namespace"] == ns]  # noqa: E731

    cases = {
        "team=vision": {"other-0", "other-1", "other-2", "other-3"},
        "team in (vision,audio),idx notin (1,2)": {"other-0", "other-3"},
        "!team": {"unlabelled"},
        "team,idx!=0": {"other-1", "other-2", "other-3"},
        "idx>1": {"other-2", "other-3"},
    }
    for selector, want in cases.items():
        items, _, _ = _list_all(core, label_selector=selector)
        assert _names(mine(items)) == want, selector

    items, _, _ = _list_all(core, field_selector="spec.nodeName=a100-1")
    assert _names(mine(items)) == {"other-1", "other-3"}
    items, _, _ = _list_all(core, field_selector=f"metadata.namespace={ns},metadata.name!=other-0")
    assert _names(items) == set(made) - {"other-0"}

    # pages of two: every Pod once, in three pages, all of one resourceVersion
    items, pages, versions = _list_all(core, label_selector="team=vision", limit=2)
    assert sorted(i["metadata"]["name"] for i in mine(items)) == [f"other-{i}" for i in range(4)]
    assert pages >= 2 and len(versions) == 1

    with pytest.raises(ApiException) as e:
        core.list_pod_for_all_namespaces(field_selector="spec.containers=x")
    assert e.value.status == 400 and "field label not supported" in e.value.body


@BOTH
def test_finished_foreign_pods_leave_the_cache_and_free_the_node(kube):
    made = _world(kube)
    c = make_cluster(kube)
    c.start(wait_s=20)
    try:
        wait_until(lambda: len(c.other_pods.items()) >= 5, 20)
        used = lambda: c.usage.by_node().get("a100-0", {})  # noqa: E731
        wait_until(lambda: used().get("nvidia.com/gpu") == 2, 20)
        # nothing but what accounting reads is kept: no managedFields, no labels, no env
        slim = next(p for p in c.other_pods.items() if p["metadata"]["name"] == "other-0")
        assert set(slim) == {"metadata", "spec", "status", REQUESTS}
        assert set(slim["metadata"]) <= {"name", "namespace", "resourceVersion"}
        assert slim[REQUESTS]["nvidia.com/gpu"] == 1

        kube.set_pod_phase(made["other-0"], "other-0", "Succeeded",
                           terminated={"exitCode": 0, "reason": "Completed"})
        # the filtered watch says DELETED once the Pod finishes (it stopped matching)
        wait_until(lambda: "other-0" not in _names(c.other_pods.items()), 20)
        wait_until(lambda: used().get("nvidia.com/gpu") == 1, 20)
        free = {n.name: len(n.free_whole_devices()) for n in c.list_nodes()}
        assert free["a100-0"] == 7 and free["a100-1"] == 6
    finally:
        c.close()


def test_lists_are_paged_and_filtered_by_the_server(kube):
    """Fails on the unfiltered, unpaged informer: every Pod came in one list."""
    _world(kube)
    for i in range(3):
        kube.add_pod(pod(f"done-{i}", "a100-1", {"cpu": "1"}, phase="Succeeded"))
    kube.add_pod(pod("pending", None, {"cpu": "1"}, phase="Pending"))
    c = make_cluster(kube, list_page_size=2)
    c.sync()
    try:
        pod_lists = [parse_qs(urlparse(p).query) for m, p in kube.requests
                     if m == "GET" and urlparse(p).path == "/api/v1/pods"
                     and "watch" not in parse_qs(urlparse(p).query)]
        assert all(q["limit"] == ["2"] for q in pod_lists)
        assert any("continue" in q for q in pod_lists)  # 5 other Pods: pages of two
        others = [q for q in pod_lists if q.get("labelSelector") == [FOREIGN_PODS_LABELS]]
        assert others and all(q["fieldSelector"] == [FOREIGN_PODS_FIELDS] for q in others)
        # finished and unbound Pods of other workloads are never sent
        assert _names(c.other_pods.items()) == {f"other-{i}" for i in range(4)} | {"unlabelled"}
        assert c.pods.items() == []  # gpuq's own: none yet
    finally:
        c.close()


def test_expired_continue_token_relists_in_one_piece(kube):
    """A continue token whose snapshot was compacted answers 410 (as etcd's store
    does); the informer lists again without pages instead of failing the relist."""
    _world(kube)
    c = make_cluster(kube, list_page_size=2)
    real_list = c.other_pods.list_fn
    calls = []

    def compacting_list(**kw):
        calls.append(kw)
        if kw.get("_continue") and len(calls) == 2:
            kube.compact()
        return real_list(**kw)

    c.other_pods.list_fn = compacting_list
    try:
        c.other_pods.relist()
        assert len(c.other_pods.items()) == 5
        assert "limit" not in calls[-1]  # the fallback: one list, no pages
    finally:
        c.close()

"""The fake API server answers as kube-apiserver, the kubelet and the controllers do,
where the Kubernetes-backend tests lean on it (tests/fakekube: each behaviour names the
upstream file it models)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.cluster.interface import BindRequest
from app.scheduling.model import ReplicaPlacement
from tests.fakekube.fixtures import api_client_for, make_cluster, wait_until
from tests.fakekube.objects import article_a100


def _core(kube) -> client.CoreV1Api:
    return client.CoreV1Api(api_client_for(kube.url))


def _pod(name: str = "p", **container) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x:1", **container}]}}


@pytest.mark.parametrize(("pod", "words"), [
    (_pod(bogus=1), "Additional properties are not allowed ('bogus' was unexpected)"),
    (_pod("Bad_Name"), "a lowercase RFC 1123 subdomain"),
    (_pod(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
     "must be less than or equal to cpu limit of 1"),
])
def test_a_pod_body_the_apiserver_refuses_is_a_422(kube, pod, words):
    """kubernetes-validate, strict, plus the name and requests <= limits rules of
    pkg/apis/core/validation/validation.go (raw HTTP: the client checks fields itself)."""
    req = urllib.request.Request(f"{kube.url}/api/v1/namespaces/ns/pods", method="POST",
                                 data=json.dumps(pod).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 422
    assert words in json.loads(e.value.read())["message"]


def test_binding_a_pod_being_deleted_is_a_409(kube):
    kube.honour_grace = True
    api = _core(kube)
    api.create_namespaced_pod("ns", _pod(), _preload_content=False)
    kube.pods[("ns", "p")]["spec"]["nodeName"] = ""
    kube.pods[("ns", "p")]["metadata"]["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n"}}
    with pytest.raises(ApiException) as e:
        api.create_namespaced_pod_binding("p", "ns", binding, _preload_content=False)
    assert e.value.status == 409 and "is being deleted" in json.loads(e.value.body)["message"]


@pytest.fixture
def kcluster(kube):
    """gpuq's Kubernetes cluster on the fake (tests/integration's ``cluster`` is the
    simulated one)."""
    c = make_cluster(kube)
    c.start(wait_s=10)
    yield c
    c.close()


def test_a_quiet_watch_ends_with_a_bookmark_the_informer_resumes_from(kube, kcluster):
    """Nothing changes for a whole watch: the stream still ends with a BOOKMARK at the
    current resourceVersion, so the informer moves on (and counts it as progress)."""
    kube.add_node(article_a100("a100-0"))  # the version moves on past the list
    before = kcluster.nodes.resource_version
    wait_until(lambda: kcluster.nodes.resource_version != before, timeout_s=15)
    rv = int(kcluster.nodes.resource_version)
    kube.add_pod({"metadata": {"name": "other", "namespace": "x"}, "spec": {}})
    # nodes see no event for the pod, only the bookmark at the deadline
    wait_until(lambda: int(kcluster.nodes.resource_version) > rv, timeout_s=15)
    assert kcluster.nodes.stale_for() < 15


def test_a_graceful_deletion_by_someone_else_requeues_not_fails(kube, kcluster):
    """DisruptionTarget, then Failed with exit 143, then DELETED (FakeKube.disrupt, the
    real control plane's order): gpuq reports the job gone (requeued), not failed."""
    kube.add_node(article_a100("a100-0"))
    wait_until(lambda: kcluster.list_nodes())
    kcluster.bind(BindRequest(job_id="9", name="t", team="nlp", pool="training",
                             priority="P1", world_size=1, placements=[ReplicaPlacement(
                                 0, "a100-0", "a100-80g", (0,), units=10, cpu=1,
                                 memory_gb=1)]))
    (pod,) = kube.gpuq_pods()
    kube.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Running")
    got: list = []
    wait_until(lambda: got.extend(kcluster.poll_events()) or got)
    kube.disrupt(pod["metadata"]["namespace"], pod["metadata"]["name"])
    wait_until(lambda: got.extend(kcluster.poll_events()) or len(got) > 1)
    assert [e.phase for e in got] == ["running", "gone"]

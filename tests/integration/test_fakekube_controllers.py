"""The fake API server's kubelet restarts, node lifecycle, taint eviction, PodGC, watch
cache window and slow answers behave as the upstream files they name say
(tests/fakekube/containers.py, controllers.py, server.py), over real HTTP with the
official client, so gpuq's tests on them meet what a real cluster does."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.fakekube import containers
from tests.fakekube.fixtures import api_client_for
from tests.fakekube.objects import article_a100


def _core(kube) -> client.CoreV1Api:
    return client.CoreV1Api(api_client_for(kube.url))


def _pod(name: str, restart: str | None = None, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "x:1"}]}
    if restart:
        spec["restartPolicy"] = restart
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
           "spec": spec}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _created(kube, name: str, restart: str | None = None, node: str = "a100-0") -> dict:
    """Created through the API (admission applies), bound, running."""
    _core(kube).create_namespaced_pod("ns", _pod(name, restart), _preload_content=False)
    _core(kube).create_namespaced_pod_binding(name, "ns", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, _preload_content=False)
    kube.set_pod_phase("ns", name, "Running")
    return kube.pods[("ns", name)]


# ------------------------------------------------------------------ kubelet restarts
def test_crash_loop_back_off_doubles_from_10_s_to_5_min():
    assert [containers.backoff_s(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert containers.go_duration(10) == "10s" and containers.go_duration(80) == "1m20s"


@pytest.mark.parametrize(("policy", "exit_code", "phase", "restarted"), [
    ("Never", 137, "Failed", False),
    ("Never", 0, "Succeeded", False),
    ("OnFailure", 137, "Running", True),
    ("OnFailure", 0, "Succeeded", False),
    ("Always", 0, "Running", True),
])
def test_a_container_exit_follows_the_restart_policy(kube, policy, exit_code, phase, restarted):
    kube.add_node(article_a100("a100-0"))
    _created(kube, "p", policy)
    reason = "OOMKilled" if exit_code == 137 else "Completed"
    kube.crash("ns", "p", exit_code, reason)
    pod = kube.pods[("ns", "p")]
    (cs,) = pod["status"]["containerStatuses"]
    assert pod["status"]["phase"] == phase
    if restarted:
        assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert "back-off 10s restarting failed container=main pod=p_ns" in \
            cs["state"]["waiting"]["message"]
        assert cs["lastState"]["terminated"] == {**cs["lastState"]["terminated"],
                                                 "exitCode": exit_code, "reason": reason}
    else:
        assert cs["state"]["terminated"]["exitCode"] == exit_code
        assert cs["state"]["terminated"]["reason"] == reason


def test_the_kubelet_restarts_after_the_back_off_and_the_next_one_doubles(kube):
    kube.add_node(article_a100("a100-0"))
    _created(kube, "p", "OnFailure")
    kube.crash("ns", "p", 137, "OOMKilled")
    kube.advance(9)
    assert "waiting" in kube.pods[("ns", "p")]["status"]["containerStatuses"][0]["state"]
    kube.advance(1)
    (cs,) = kube.pods[("ns", "p")]["status"]["containerStatuses"]
    assert "running" in cs["state"] and cs["restartCount"] == 1
    kube.crash("ns", "p", 137, "OOMKilled")
    (cs,) = kube.pods[("ns", "p")]["status"]["containerStatuses"]
    assert "back-off 20s" in cs["state"]["waiting"]["message"]


# ------------------------------------------------------------------ node loss
def test_default_toleration_seconds_are_added_at_create(kube):
    _core(kube).create_namespaced_pod("ns", _pod("p"), _preload_content=False)
    tols = kube.pods[("ns", "p")]["spec"]["tolerations"]
    assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 300} in tols
    assert {t["key"] for t in tols} == {"node.kubernetes.io/unreachable",
                                        "node.kubernetes.io/not-ready"}


def test_a_lost_node_goes_unknown_tainted_and_its_pods_are_evicted_after_300_s(kube):
    """node lifecycle: Unknown after the grace period, unreachable NoExecute taint, Pods
    NotReady; taint eviction after tolerationSeconds: DisruptionTarget
    DeletionByTaintManager and a deletionTimestamp, the Pod still Running (no kubelet)."""
    kube.add_node(article_a100("a100-0"))
    _created(kube, "p")
    kube.lose_node("a100-0")
    # the fake's clock is wall time plus the offsets: the checks before a deadline leave
    # seconds of margin, so a loaded machine's slow steps do not cross it
    kube.advance(45)
    assert kube.nodes["a100-0"]["status"]["conditions"][-1]["status"] == "True"
    kube.advance(5)
    node = kube.nodes["a100-0"]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule")}
    pod = kube.pods[("ns", "p")]
    assert not pod["metadata"].get("deletionTimestamp")
    assert next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")["status"] \
        == "False"
    kube.advance(290)
    assert not kube.pods[("ns", "p")]["metadata"].get("deletionTimestamp")
    kube.advance(11)
    pod = kube.pods[("ns", "p")]
    assert pod["metadata"]["deletionTimestamp"] and pod["status"]["phase"] == "Running"
    target = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "DeletionByTaintManager"


def test_a_pod_without_the_toleration_is_evicted_at_once_and_a_kubelet_ends_it(kube):
    kube.add_node(article_a100("a100-0"))
    kube.add_pod(_pod("foreign", node="a100-0"))  # no admission: no default tolerations
    kube.update_node("a100-0", lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "maintenance", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}))
    kube.advance()
    assert ("ns", "foreign") not in kube.pods  # the node's kubelet stopped it
    kinds = [(t, o["status"].get("phase")) for _rv, k, t, o, _p in kube.log
             if k == "pods" and o["metadata"]["name"] == "foreign"]
    assert kinds[-2:] == [("MODIFIED", "Failed"), ("DELETED", "Failed")]


def test_a_recovered_node_is_untainted_and_ends_the_pods_deleted_meanwhile(kube):
    kube.add_node(article_a100("a100-0"))
    _created(kube, "p")
    kube.lose_node("a100-0")
    kube.advance(400)
    assert kube.pods[("ns", "p")]["metadata"]["deletionTimestamp"]
    kube.recover_node("a100-0")
    assert ("ns", "p") not in kube.pods
    assert "taints" not in kube.nodes["a100-0"]["spec"]


def test_podgc_fails_and_deletes_the_pods_of_a_deleted_node_after_quarantine(kube):
    kube.add_node(article_a100("a100-0"))
    _created(kube, "p")
    kube.delete_node("a100-0")
    kube.advance(39)
    assert ("ns", "p") in kube.pods
    kube.advance(1)
    assert ("ns", "p") not in kube.pods
    _rv, _k, type_, last, prev = [e for e in kube.log if e[1] == "pods"][-1]
    assert type_ == "DELETED" and last["status"]["phase"] == "Failed"
    target = next(c for c in last["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "DeletionByPodGC"


# ------------------------------------------------------------------ watch cache
def _watch_types(kube, rv: str) -> list:
    """(type, code) of each event of one watch from ``rv``, raw (the client's Watch
    would retry a 410 on its own)."""
    url = f"{kube.url}/api/v1/nodes?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    return [(e["type"], e["object"].get("code")) for e in events]


def test_a_watch_from_before_the_watch_cache_window_is_410_gone(kube):
    kube.watch_timeout_s = 1
    kube.watch_cache_size = 3
    kube.add_node(article_a100("n-0"))
    start = str(kube.rv)
    for i in range(1, 4):
        kube.add_node(article_a100(f"n-{i}"))
    assert [t for t, _c in _watch_types(kube, start)] == ["ADDED"] * 3  # in the window
    kube.add_node(article_a100("n-4"))
    assert _watch_types(kube, start) == [("ERROR", 410)]


def test_an_exact_list_of_a_compacted_version_is_410(kube):
    kube.add_node(article_a100("n-0"))
    rv = str(kube.rv)
    kube.compact()
    with pytest.raises(ApiException) as e:
        _core(kube).list_node(resource_version=rv, resource_version_match="Exact",
                              _preload_content=False)
    assert e.value.status == 410 and "too old resource version" in json.loads(
        e.value.body)["message"]


def test_a_quiet_watch_gets_a_bookmark_every_period(kube):
    kube.watch_timeout_s = 3
    kube.bookmark_every_s = 0.5
    kube.add_node(article_a100("n-0"))
    types = []
    w = watch.Watch()
    for ev in w.stream(_core(kube).list_node, resource_version=str(kube.rv),
                       allow_watch_bookmarks=True, timeout_seconds=3,
                       _preload_content=False):
        types.append(ev["type"])
    assert types.count("BOOKMARK") >= 3  # periodic ones, then one at the deadline


# ------------------------------------------------------------------ slow answers
def test_a_slow_path_answers_late_and_a_client_timeout_cuts_it(kube):
    kube.slow(r"^GET /api/v1/nodes", 1.0)
    api = _core(kube)
    with pytest.raises(Exception) as e:  # urllib3's ReadTimeoutError
        api.list_node(_request_timeout=(1, 0.2), _preload_content=False)
    assert "timed out" in str(e.value).lower()
    done = threading.Event()

    def late() -> None:
        api.list_node(_request_timeout=(5, 5), _preload_content=False)
        done.set()

    t = threading.Thread(target=late)
    t.start()
    t.join(10)
    assert done.is_set()
    kube.unhang()  # slowness cleared too
    assert not kube.delay_for("GET /api/v1/nodes")


def test_a_watch_ending_at_its_deadline_sends_every_event_before_its_bookmark(kube):
    """A watch whose deadline passes just as events arrive ends with a bookmark; the
    watcher resumes from the bookmark's version, so that version must not be past events
    it was not sent (the fake sent the current version: the events between were lost
    for good, and gpuq never saw a PyTorchJob's recreated Pods)."""
    kube.add_node(article_a100("a100-early"))
    since = kube.rv  # the watcher has seen a100-early
    kube.add_node(article_a100("a100-late"))
    got: list[tuple[str, int]] = []

    class Handler:
        def send_event(self, type_: str, obj: dict) -> bool:
            got.append((type_, int(obj["metadata"]["resourceVersion"])))
            return True

        def hung(self) -> bool:
            return False

    kube.watch_events("nodes", str(since), None, Handler(), timeout_s=0, bookmarks=True)
    sent = [rv for t, rv in got if t != "BOOKMARK"]
    resumed_from = max(rv for t, rv in got if t == "BOOKMARK")
    assert sent or resumed_from == since, got  # sent now, or left for the next watch

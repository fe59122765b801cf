"""Pod creation, gang Binding with undo, eviction, and job status from Pods."""

from __future__ import annotations

import pytest

from app.cluster.interface import BindError, BindRequest, JobStatusEvent
from app.scheduling.model import ReplicaPlacement
from tests.fakekube.fixtures import cluster, make_cluster, wait_until
from tests.fakekube.objects import article_a100, gfd_v100
from tests.realkube.both import BOTH, kube


def gang(job_id="job-1", nodes=("a100-0", "a100-1"), gpus=4, template=None):
    placements = [
        ReplicaPlacement(i, n, "a100-80g", tuple(range(gpus)), units=10 * gpus, cpu=8,
                         memory_gb=64)
        for i, n in enumerate(nodes)
    ]
    return BindRequest(job_id=job_id, name="train", team="nlp", pool="training",
                       priority="P1", placements=placements, pod_template=template or {},
                       world_size=len(placements))


@pytest.fixture
def nodes(kube, cluster):
    for i in range(3):
        kube.add_node(article_a100(f"a100-{i}", taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]))
    kube.add_node(gfd_v100("v100-0"))
    wait_until(lambda: len(cluster.list_nodes()) == 4)


def _posts(kube, suffix=""):
    return [p for m, p in kube.requests if m == "POST" and p.endswith(suffix)]


def test_gang_pods_all_created_before_any_bound(kube, cluster, nodes):
    cluster.bind(gang())
    pods = sorted(kube.gpuq_pods(), key=lambda p: p["metadata"]["name"])
    assert [p["spec"]["nodeName"] for p in pods] == ["a100-0", "a100-1"]
    assert all(p["spec"]["schedulerName"] == "gpuq" for p in pods)
    assert pods[0]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    posts = [p for m, p in kube.requests if m == "POST" and "/pods" in p]
    kinds = ["bind" if p.endswith("/binding") else "create" for p in posts]
    assert kinds == ["create", "create", "bind", "bind"]
    assert sorted(b[2] for b in kube.bindings) == ["a100-0", "a100-1"]


@BOTH
def test_a_job_of_one_pod_is_created_bound(kube, cluster, nodes):
    """One write for a Pod of its own: the create names its node (no Binding), half of
    what the API server and etcd did per bound Pod (bench/throughput_kube.py)."""
    cluster.bind(gang(nodes=("a100-2",)))
    wait_until(lambda: [p["spec"].get("nodeName") for p in kube.gpuq_pods()] == ["a100-2"])
    if hasattr(kube, "requests"):  # the fake records the calls
        posts = [p for m, p in kube.requests if m == "POST" and "/pods" in p]
        assert [p.endswith("/binding") for p in posts] == [False]
    wait_until(lambda: cluster.live_job_ids() == {"job-1"})


def test_bind_failure_undoes_the_whole_gang(kube, cluster, nodes):
    # the second replica's Binding fails (e.g. the node vanished under us)
    orig_bind = kube.bind

    def failing(ns, name, body):
        if name.endswith("-1"):
            return 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "message": "etcd timeout", "reason": "InternalError", "code": 500}
        return orig_bind(ns, name, body)

    kube.bind = failing
    with pytest.raises(BindError, match="etcd timeout"):
        cluster.bind(gang())
    assert kube.gpuq_pods() == []  # the bound one and the unbound one are both gone
    # grace 1, never 0 (a force delete)
    assert len(kube.deletes) == 2 and all(g == 1 for _ns, _n, g in kube.deletes)
    kube.bind = orig_bind
    # the undo is not reported as the job's Pods vanishing
    wait_until(lambda: cluster.pods.relists + cluster.pods.watches > 0
               and not any("gpuq.io/job-id" in (p["metadata"].get("labels") or {})
                           for p in cluster.pods.items()))
    assert [e for e in cluster.poll_events() if e.phase == "gone"] == []
    # a retry creates fresh Pods (new names: nothing collides with terminating ones)
    cluster.bind(gang())
    assert len(kube.gpuq_pods()) == 2


def test_create_conflict_undoes_created_pods(kube, cluster, nodes):
    req = gang()
    orig = kube.create_pod
    calls = []

    def conflict_second(ns, body):
        calls.append(body["metadata"]["name"])
        if len(calls) == 2:
            return 409, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "message": "pods already exists", "reason": "AlreadyExists",
                         "code": 409}
        return orig(ns, body)

    kube.create_pod = conflict_second
    with pytest.raises(BindError, match="409"):
        cluster.bind(req)
    assert kube.gpuq_pods() == [] and kube.bindings == []


@BOTH
def test_bind_to_unknown_node_fails_before_creating(kube, cluster, nodes):
    with pytest.raises(BindError, match="gone"):
        cluster.bind(gang(nodes=("a100-0", "nowhere")))
    assert kube.gpuq_pods() == []


def test_evict_with_grace_and_fall_back_to_delete_on_429(kube, cluster, nodes):
    cluster.bind(gang())
    for p in kube.gpuq_pods():
        kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Running")
    seen: list[JobStatusEvent] = []
    wait_until(lambda: seen.extend(cluster.poll_events()) or seen)
    assert seen == [JobStatusEvent("job-1", "running")]
    assert cluster.running_job_ids() == {"job-1"}
    protected = sorted(p["metadata"]["name"] for p in kube.gpuq_pods())[0]
    kube.pdb_protected.add(protected)
    cluster.stop("job-1", "preempted by P0 job", grace_seconds=15)
    assert [(n, g) for _ns, n, g in kube.evictions] != []
    assert all(g == 15 for _ns, _n, g in kube.evictions)
    assert [(n, g) for _ns, n, g in kube.deletes] == [(protected, 15)]
    assert kube.gpuq_pods() == []
    assert any(e["reason"] == "GpuqStopped" and e["message"] == "preempted by P0 job"
               for e in kube.k8s_events)
    wait_until(lambda: cluster.running_job_ids() == set())
    assert cluster.poll_events() == []  # stopped by gpuq: not reported as "gone"
    cluster.stop("job-1", "again")  # idempotent


def test_a_gang_with_one_replica_not_started_is_not_running(kube, cluster, nodes):
    """One replica Running, the other still Pending (an image pull back-off, say): the
    job is not running, its peers wait on the rendezvous. On the fake:
    kwok starts every bound Pod of a template alike."""
    cluster.bind(gang(job_id="half"))
    pods = sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in kube.gpuq_pods())
    kube.set_pod_phase(*pods[0], "Running")
    got: list[JobStatusEvent] = []
    wait_until(lambda: any(p["status"].get("phase") == "Running"
                           for p in kube.gpuq_pods() if p["metadata"]["name"] == pods[0][1]))
    got.extend(cluster.poll_events())
    assert "running" not in [e.phase for e in got]
    kube.set_pod_phase(*pods[1], "Running")
    wait_until(lambda: got.extend(cluster.poll_events()) or got)
    assert [e.phase for e in got] == ["running"]


@BOTH
def test_status_events_running_succeeded_failed_gone(kube, cluster, nodes):
    """On the real cluster a Pod deleted by someone else ends Failed (exit 143, the
    kubelet's graceful stop) before it goes: that is a deletion (gone: requeued), not
    the workload's failure."""
    # three 4-card gangs over three 8-card nodes (the kubelet refuses a fourth 4 cards)
    for jid, on in (("ok", ("a100-0", "a100-1")), ("bad", ("a100-0", "a100-2")),
                    ("lost", ("a100-1", "a100-2"))):
        cluster.bind(gang(job_id=jid, nodes=on))
    pods = {}
    for p in kube.gpuq_pods():
        pods.setdefault(p["metadata"]["labels"]["gpuq.io/job-id"], []).append(
            (p["metadata"]["namespace"], p["metadata"]["name"]))
    for ns, n in pods["ok"]:
        kube.set_pod_phase(ns, n, "Running")
    for ns, n in pods["ok"]:
        kube.set_pod_phase(ns, n, "Succeeded")
    for ns, n in pods["bad"] + pods["lost"]:  # a gang runs once every replica runs
        kube.set_pod_phase(ns, n, "Running")
    kube.set_pod_phase(*pods["bad"][1], "Failed",
                       terminated={"reason": "OOMKilled", "exitCode": 137})
    got: list[JobStatusEvent] = []
    wait_until(lambda: got.extend(cluster.poll_events()) or
               sum(e.job_id == "lost" for e in got) == 1)
    kube.delete_pod(*pods["lost"][0])
    wait_until(lambda: got.extend(cluster.poll_events()) or len(got) >= 6)
    by_job = {}
    for e in got:
        by_job.setdefault(e.job_id, []).append(e.phase)
    assert by_job == {"ok": ["running", "succeeded"], "bad": ["running", "failed"],
                      "lost": ["running", "gone"]}
    assert "OOMKilled" in next(e.message for e in got if e.phase == "failed")


def test_stopped_job_with_only_finished_pods_is_off_the_cluster(kube, cluster, nodes):
    cluster.bind(gang(job_id="bad"))
    pods = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in kube.gpuq_pods()]
    kube.set_pod_phase(*pods[0], "Running")
    kube.set_pod_phase(*pods[1], "Failed", terminated={"reason": "Error", "exitCode": 2})
    wait_until(lambda: any(e.phase == "failed" for e in cluster.poll_events()))
    # a failed replica stops the gang at once: the running replica is evicted,
    # the failed one kept; the dispatcher's own stop afterwards changes nothing
    cluster.stop("bad", "job failed")
    assert [n for _ns, n, _g in kube.evictions] == [pods[0][1]]
    assert [p["metadata"]["name"] for p in kube.gpuq_pods()] == [pods[1][1]]  # for its logs
    wait_until(lambda: "bad" not in cluster.running_job_ids())


def test_binding_conflict_409_undoes_the_gang(kube, cluster, nodes):
    """Another scheduler bound one of the Pods first: 409 Conflict, all undone."""
    orig = kube.bind

    def bound_elsewhere(ns, name, body):
        if name.endswith("-1"):
            with kube.cond:
                kube.pods[(ns, name)]["spec"]["nodeName"] = "v100-0"
        return orig(ns, name, body)

    kube.bind = bound_elsewhere
    with pytest.raises(BindError, match="409.*already assigned"):
        cluster.bind(gang(job_id="raced"))
    kube.bind = orig
    assert kube.gpuq_pods() == []


def test_finished_pods_are_deleted_after_the_ttl_and_the_job_forgotten(kube, nodes):
    """Finished Pods count toward the cluster's terminated-Pod GC threshold: gpuq deletes
    them GPUQ_K8S_FINISHED_POD_TTL_S after the job ended (0 here) and prunes its tracking
    state."""
    c = make_cluster(kube, finished_pod_ttl_s=0)
    c.start(wait_s=10)
    try:
        c.bind(gang(job_id="done"))
        for p in kube.gpuq_pods():
            kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Succeeded")
        got: list[JobStatusEvent] = []

        def recorded() -> list[JobStatusEvent]:  # the dispatcher's ingest: poll, commit, ack
            evs = c.poll_events()
            c.acknowledge(evs)
            return evs

        wait_until(lambda: got.extend(recorded()) or kube.gpuq_pods() == [])
        assert [e.phase for e in got] == ["succeeded"]
        wait_until(lambda: c.poll_events() == [] and "done" not in c._tracks)
        assert c.running_job_ids() == set()
    finally:
        c.close()


def _connections_opened(c) -> int:
    pm = c.api.api_client.rest_client.pool_manager
    return sum(pm.pools[k].num_connections for k in pm.pools.keys())  # noqa: SIM118


@BOTH
def test_binds_reuse_their_connections(kube, cluster, nodes):
    """A bind's create and Binding answers are read, so their connection goes back to
    the pool: ten one-Pod binds (20 calls) open at most a couple of new connections
    (the old code opened one, and a TLS handshake, per call)."""
    before = _connections_opened(cluster)
    for i in range(10):
        cluster.bind(gang(job_id=f"job-{i}", nodes=(f"a100-{i % 3}",), gpus=1))
    assert len(kube.gpuq_pods()) == 10
    assert _connections_opened(cluster) - before <= 3

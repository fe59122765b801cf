"""A Pod is a job's only where the job's Pods may be. Anyone who may create a Pod may
give it gpuq's labels (the job id and bind id of another team's job: job ids are
sequential, bind ids follow the job's revision), and before this gpuq's watch took such
a Pod, in any namespace, for one of the job's: a failed one failed the job, a deleted one
requeued it, and the card it held was counted by nobody. Now a Pod outside the namespaces
the job was bound to (its team's; a workload's own) is not the job's, and what it requests
counts on its node as another workload's. Run on the fake API server and on the real
control plane."""

from __future__ import annotations

from app.cluster import k8s_labels as L
from app.dispatch.dispatcher import Dispatcher
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import job_row, started_cluster, submit_a100_job, wait_until
from tests.fakekube.objects import article_a100
from tests.realkube.both import BOTH, kube  # noqa: F401  (the fixture: fake and real)
from tests.realkube.fixtures import job_namespace

CONFIG = A100_TRAINING_CONFIG
COPIED = (L.MANAGED_BY, L.JOB_ID, L.BIND_ID, L.REPLICAS, L.TEAM)


def _running_job(kube, sf, d) -> tuple[int, str, dict]:
    job_id = submit_a100_job(sf)
    wait_until(lambda: d.run_once() or kube.gpuq_pods(), 30)
    [pod] = kube.gpuq_pods()
    ns = job_namespace(kube)
    kube.set_pod_phase(ns, pod["metadata"]["name"], "Running")
    wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "running", 30)
    return job_id, ns, pod


def _forge(kube, pod: dict, phase: str) -> dict:
    """Another tenant's Pod, in a namespace of its own, wearing ``pod``'s labels."""
    labels = {k: pod["metadata"]["labels"][k] for k in COPIED}
    forged = kube.add_pod({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forged", "namespace": "default", "labels": labels},
        "spec": {"nodeName": "a100-0", "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox", "resources": {
                     "limits": {"nvidia.com/gpu": "1"}}}]},
    })
    assert forged["metadata"]["namespace"] != pod["metadata"]["namespace"]
    kube.set_pod_phase(forged["metadata"]["namespace"], "forged", phase)
    return forged


def _external_cards(c, node: str, booked=None) -> int:
    [n] = [n for n in c.list_nodes(booked) if n.name == node]
    return sum(1 for d in n.devices if d.external)


@BOTH
def test_a_pod_with_a_jobs_labels_in_another_namespace_does_not_end_the_job(kube, sf):
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        job_id, ns, pod = _running_job(kube, sf, d)
        name = pod["metadata"]["name"]
        forged = _forge(kube, pod, "Running")
        # while it runs, its card is another workload's (it was counted by nobody)
        wait_until(lambda: _external_cards(c, "a100-0") == 1, 30)
        kube.set_pod_phase(forged["metadata"]["namespace"], "forged", "Failed")
        wait_until(lambda: _external_cards(c, "a100-0") == 0, 30)
        for _ in range(5):
            d.run_once()
        row = job_row(sf, job_id)
        assert row.status == "running", (row.status, row.reason)
        # nor does its deletion (a Pod of the job deleted outside gpuq requeues the job)
        kube.delete_pod(forged["metadata"]["namespace"], "forged")
        for _ in range(5):
            d.run_once()
        row = job_row(sf, job_id)
        assert row.status == "running", (row.status, row.reason)
        # the job's own Pod still tells its end
        kube.set_pod_phase(ns, name, "Succeeded")
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "succeeded", 30)
    finally:
        c.close()


@BOTH
def test_after_a_restart_the_forged_pod_is_not_the_jobs_either(kube, sf):
    """The Pod shows while no dispatcher runs: the next one's watch and reconcile find both
    Pods, and take only the one in the job's namespace for the job's."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        job_id, ns, pod = _running_job(kube, sf, Dispatcher(sf, c))
    finally:
        c.close()
    _forge(kube, pod, "Failed")
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        for _ in range(5):
            d.run_once()
        row = job_row(sf, job_id)
        assert row.status == "running", (row.status, row.reason)
        kube.set_pod_phase(ns, pod["metadata"]["name"], "Succeeded")
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "succeeded", 30)
    finally:
        c.close()


RESTRICTED = {"securityContext": {"runAsNonRoot": True,
                                  "seccompProfile": {"type": "RuntimeDefault"}}}
CONTAINER_SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@BOTH
def test_a_pod_with_gpuqs_labels_for_a_job_gpuq_does_not_run_is_removed(kube, sf):
    """A Pod wearing gpuq's labels for a job that is over (in the job's own namespace),
    and one naming a job that never existed (elsewhere), each holding a card: gpuq stops
    both as orphans, and an 8-card job then gets the node. Until a stray is gone its card
    counts as another workload's (the database holds nothing for its job), so the 8-card
    job waits for the node instead of being bound onto the strays' cards, where it met
    the kubelet's device refusal (before: gpuq took a stray for one of its own Pods, and
    its card was in nobody's books)."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        job_id, ns, pod = _running_job(kube, sf, d)
        kube.set_pod_phase(ns, pod["metadata"]["name"], "Succeeded")
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "succeeded", 30)
        labels = {k: pod["metadata"]["labels"][k] for k in COPIED}
        strays = [(ns, "stray", labels), ("default", "stray2", {**labels, L.JOB_ID: "99999"})]
        made = []
        for where, name, lab in strays:
            made.append(kube.add_pod({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": where, "labels": lab},
                "spec": {"nodeName": "a100-0", "restartPolicy": "Never", **RESTRICTED,
                         "containers": [{"name": "c", "image": "busybox",
                                         "securityContext": CONTAINER_SC,
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            }))

        # the watch sees them before the next pass plans
        keys = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in made}
        wait_until(lambda: keys <= {(p["metadata"]["namespace"], p["metadata"]["name"])
                                    for p in c.pods.items()}, 30)
        big = submit_a100_job(sf, gpus=8, name="big")
        d.run_once()
        [node] = [n for n in d.live_nodes or [] if n.name == "a100-0"]
        assert sum(1 for dev in node.devices if dev.external) == 2
        # not bound onto them: it waits for the cards (pending, not "unschedulable": a card
        # another workload holds is freed when that Pod ends)
        row = job_row(sf, big)
        assert row.status == "pending", (row.status, row.reason)
        print("REASON", row.reason)
        assert not [p for p in kube.gpuq_pods() if p["metadata"]["labels"].get(L.JOB_ID)
                    == str(big)]
        # what the cluster alone sees (no books): gpuq's labels, taken for its own
        assert _external_cards(c, "a100-0") == 0

        def gone() -> bool:
            d.run_once()
            left = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in c.pods.items()
                    if not p["metadata"].get("deletionTimestamp")
                    and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
            return not left & keys

        wait_until(gone, 30)
        wait_until(lambda: d.run_once() or job_row(sf, big).status == "admitted"
                   or bool([p for p in kube.gpuq_pods()
                            if p["metadata"]["labels"].get(L.JOB_ID) == str(big)]), 30)
        assert job_row(sf, big).status in ("admitted", "running")
    finally:
        c.close()


@BOTH
def test_only_the_pods_gpuq_cannot_vouch_for_are_looked_up_in_the_books(kube, sf):
    """Every pass asks the books about gpuq-labelled Pods, but only about those of no
    attempt this process bound (or adopted among the database's active jobs): a running
    job's own Pods are not looked up -- reading the allocations of a full cluster of
    10,000 nodes each pass took 0.19 s -- and a stray's job is."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        _job_id, ns, pod = _running_job(kube, sf, d)
        asked: list[set[str]] = []

        def nothing_booked(ids: set[str]) -> set[str]:
            asked.append(set(ids))
            return set()

        assert _external_cards(c, "a100-0", nothing_booked) == 0  # vouched for: its own
        assert asked == []
        labels = {k: pod["metadata"]["labels"][k] for k in COPIED}
        stray = kube.add_pod({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "stray", "namespace": ns,
                         "labels": {**labels, L.JOB_ID: "99999"}},
            "spec": {"nodeName": "a100-0", "restartPolicy": "Never", **RESTRICTED,
                     "containers": [{"name": "c", "image": "busybox",
                                     "securityContext": CONTAINER_SC,
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        })
        key = (stray["metadata"]["namespace"], "stray")
        wait_until(lambda: key in {(p["metadata"]["namespace"], p["metadata"]["name"])
                                   for p in c.pods.items()}, 30)
        assert _external_cards(c, "a100-0", nothing_booked) == 1
        assert asked == [{"99999"}]
    finally:
        c.close()


@BOTH
def test_a_job_waits_pending_for_cards_another_workload_holds(kube, sf):
    """Another workload's Pod holds one card of the only node: an 8-card job waits
    ``pending`` for it (reason ``capacity``) and starts once that Pod has ended. It turned
    ``unschedulable``, and as the inventory (nodes, types, pools) had not changed when the
    Pod ended, nothing sent it back to the queue."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        other = kube.add_pod({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "inference", "namespace": "default"},
            "spec": {"nodeName": "a100-0", "restartPolicy": "Never", **RESTRICTED,
                     "containers": [{"name": "c", "image": "busybox",
                                     "securityContext": CONTAINER_SC,
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        })
        ns = other["metadata"]["namespace"]
        kube.set_pod_phase(ns, "inference", "Running")
        wait_until(lambda: _external_cards(c, "a100-0") == 1, 30)
        big = submit_a100_job(sf, gpus=8, name="big")
        for _ in range(3):
            d.run_once()
        row = job_row(sf, big)
        assert row.status == "pending", (row.status, row.reason)
        assert row.reason_code == "capacity", (row.reason_code, row.reason)
        assert row.reason.endswith("cards held by workloads gpuq did not start: a100-80g 1"), (
            row.reason)
        kube.set_pod_phase(ns, "inference", "Succeeded")
        wait_until(lambda: d.run_once() or job_row(sf, big).status in ("admitted", "running"),
                   30)
    finally:
        c.close()

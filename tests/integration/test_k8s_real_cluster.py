"""gpuq's Kubernetes backend against the real control plane (tests/realkube): etcd,
kube-apiserver (RBAC, ServiceAccount tokens, Pod Security admission), the
controller-manager's controllers and kwok's simulated kubelets.

What only a real cluster shows: gpuq's own ServiceAccount token and k8s/rbac.yaml
are enough and no more; the apiserver's validation (422) and admission (403) answers;
the Binding and Eviction subresources; watches that end and resume from a
resourceVersion; list pagination; DisruptionTarget conditions on graceful deletion;
node loss through the node lifecycle and taint eviction controllers; Pods of other
workloads (a batch/v1 Job scheduled by kube-scheduler) using the nodes' GPUs; a suspended
Job queued through the front door and run by the Job controller.
Where the real behaviour exposes a defect not fixed yet, the test states the right
behaviour and is marked ``xfail(strict=True)`` naming the defect, so it turns red (and
the mark must go) the moment the defect is fixed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select

from app.clock import ManualClock, utcnow
from app.cluster.interface import BindError, BindRequest, InvalidPodError
from app.cluster.k8s_settings import KubeSettings
from app.cluster.kubernetes import KubernetesCluster
from app.dispatch.dispatcher import Dispatcher
from app.domain.pod_policy import PodPolicy, check_pod, token_violations
from app.domain.spec import JobSpec
from app.scheduling.model import ReplicaPlacement
from app.store.jobs import submit_job
from app.store.orm import JobEventRow, JobRow
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import elector, make_cluster, started_cluster
from tests.fakekube.objects import article_a100, gfd_v100
from tests.realkube.fixtures import GPUQ_SA, OUTCOME_END, OUTCOME_START, RealKube, raw, wait_for

CONFIG = A100_TRAINING_CONFIG
EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
SC = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _req(job_id: str = "job-1", nodes: tuple[str, ...] = ("a100-0",), gpus: int = 4,
         template: dict | None = None, priority: str = "P1") -> BindRequest:
    placements = [ReplicaPlacement(i, n, "a100-80g", tuple(range(gpus)), units=10 * gpus,
                                   cpu=2, memory_gb=8) for i, n in enumerate(nodes)]
    return BindRequest(job_id=job_id, name="train", team="nlp", pool="training",
                       priority=priority, placements=placements,
                       pod_template=template or {}, world_size=len(placements))


@pytest.fixture
def kube(real_kube: RealKube) -> RealKube:
    return real_kube


@pytest.fixture
def nodes(kube: RealKube) -> None:
    for i in range(2):
        kube.add_node(article_a100(f"a100-{i}", taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]))
    kube.add_node(gfd_v100("v100-0"))


@pytest.fixture
def cluster(kube: RealKube, nodes: None) -> Iterator[KubernetesCluster]:
    c = make_cluster(kube)
    c.start(wait_s=20)
    wait_for(lambda: len(c.list_nodes()) == 3, what="gpuq sees the 3 nodes")
    yield c
    c.close()


def _recorded(c: KubernetesCluster) -> list:
    """What the dispatcher's ingest does each pass: poll the events, commit them, and
    acknowledge them (gpuq's outcome finalizer then comes off the Pods)."""
    evs = c.poll_events()
    c.acknowledge(evs)
    return evs


def _events_until(c: KubernetesCluster, pred, timeout_s: float = 20.0) -> list:  # noqa: ANN001
    got: list = []
    wait_for(lambda: got.extend(_recorded(c)) or pred(got), timeout_s, "gpuq job events")
    return got


def _ns_name(p: dict) -> tuple[str, str]:
    return p["metadata"]["namespace"], p["metadata"]["name"]


def _running(kube: RealKube, cluster: KubernetesCluster, job_id: str) -> dict:
    """A one-Pod job bound to a100-0, running, and reported running by gpuq: its Pod."""
    cluster.bind(_req(job_id=job_id))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Running")
    _events_until(cluster, lambda g: any(e.phase == "running" for e in g))
    return p


# ------------------------------------------------------------------ RBAC, credentials
def test_gpuq_serviceaccount_has_exactly_the_rights_of_rbac_yaml(kube):
    """gpuq's own token (TokenRequest) with k8s/rbac.yaml: reads nodes/pods/services
    cluster-wide, writes Pods only in a job namespace, nothing else."""
    api = client.CoreV1Api(kube.gpuq_api_client())
    api.list_node()
    api.list_pod_for_all_namespaces(limit=1)
    api.list_service_for_all_namespaces(limit=1)
    pod = {"metadata": {"name": "probe"}, "spec": {"containers": [
        {"name": "c", "image": "busybox:1.36", "securityContext": SC}]}}
    api.create_namespaced_pod(kube.namespace, pod)
    api.delete_namespaced_pod("probe", kube.namespace, grace_period_seconds=0)
    kube.make_namespace(f"{kube.namespace}-norole")
    rbac = client.RbacAuthorizationV1Api(kube.s.admin)
    rbac.delete_namespaced_role_binding("gpuq-jobs", f"{kube.namespace}-norole")
    # kube-apiserver's RBAC authorizer reads RoleBindings through an informer
    # (plugin/pkg/auth/authorizer/rbac): the deletion is seen a moment later. Wait until a
    # SubjectAccessReview, answered by that same authorizer, denies the create.
    authz = client.AuthorizationV1Api(kube.s.admin)
    review = {"spec": {"user": f"system:serviceaccount:{GPUQ_SA[0]}:{GPUQ_SA[1]}",
                       "resourceAttributes": {"namespace": f"{kube.namespace}-norole",
                                              "verb": "create", "resource": "pods"}}}
    deadline = time.monotonic() + 30
    while authz.create_subject_access_review(review).status.allowed:
        assert time.monotonic() < deadline, "the RoleBinding's deletion was never seen"
        time.sleep(0.2)
    forbidden = [
        lambda: api.create_namespaced_pod(f"{kube.namespace}-norole", pod),
        lambda: api.list_namespaced_secret(kube.namespace),
        lambda: api.patch_node("v100-x", {"metadata": {"labels": {"x": "y"}}}),
        lambda: api.list_namespaced_config_map(kube.namespace),
        lambda: api.create_namespace({"metadata": {"name": "gpuq-should-not"}}),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403, e.value.body


# ------------------------------------------------------------------ bind, status
def test_gang_binds_through_the_binding_subresource_and_runs(kube, cluster):
    """Create both Pods unbound (schedulerName gpuq: no scheduler takes them), bind each
    with pods/binding; kwok's kubelets start them; gpuq reports running, then the
    kubelet's exit codes decide succeeded."""
    cluster.bind(_req(nodes=("a100-0", "a100-1")))
    pods = kube.gpuq_pods()
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["a100-0", "a100-1"]
    assert {p["spec"]["schedulerName"] for p in pods} == {"gpuq"}
    assert all(p["spec"]["priorityClassName"] == "gpuq-p1" for p in pods)
    assert all(p["spec"]["priority"] == 50000 for p in pods)  # the Priority admission
    got = _events_until(cluster, lambda g: any(e.phase == "running" for e in g))
    assert [e.phase for e in got] == ["running"]
    for p in pods:
        kube.set_pod_phase(*_ns_name(p), "Succeeded")
    got = _events_until(cluster, lambda g: any(e.phase == "succeeded" for e in g))
    assert [e.phase for e in got] == ["succeeded"]


def test_oomkilled_fails_the_job_with_the_kubelets_reason(kube, cluster):
    cluster.bind(_req(job_id="oom"))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Failed", terminated={"reason": "OOMKilled"})
    got = _events_until(cluster, lambda g: any(e.phase == "failed" for e in g))
    failed = next(e for e in got if e.phase == "failed")
    assert "OOMKilled" in failed.message


def test_binding_conflict_with_another_scheduler_undoes_the_gang(kube, cluster):
    """Another scheduler binds replica 1 between gpuq's create and bind: the real
    apiserver answers 409 (pod already assigned) and gpuq removes both Pods."""
    core = kube.core
    orig = cluster.api.create_namespaced_pod_binding

    def race(name, ns, body, **kw):  # noqa: ANN001, ANN003
        if name.endswith("-1"):
            core.create_namespaced_pod_binding(name, ns, {
                "metadata": {"name": name}, "target": {"kind": "Node", "name": "v100-0"}},
                _preload_content=False)
        return orig(name, ns, body, **kw)

    cluster.api.create_namespaced_pod_binding = race
    with pytest.raises(BindError, match="409"):
        cluster.bind(_req(job_id="raced", nodes=("a100-0", "a100-1")))
    assert kube.gpuq_pods() == []


def test_apiserver_validation_422_is_a_permanent_invalid_pod(kube, cluster):
    """What schemas cannot say, the apiserver's validation does (requests above limits):
    422, an invalid Pod, nothing left behind."""
    template = {"spec": {"containers": [
        {"name": "main", "image": "trainer:1", "securityContext": SC},
        {"name": "sidecar", "image": "log:1", "securityContext": SC,
         "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}]}}
    with pytest.raises(InvalidPodError, match="422"):
        cluster.bind(_req(job_id="bad", template=template))
    assert kube.gpuq_pods() == []


def test_a_field_the_apiserver_does_not_know_is_refused_not_dropped(kube, cluster):
    """gpuq sends its Pod as the JSON it built, no client model in between, asking for
    ``fieldValidation=Strict``: a field the apiserver does not know is the job's own
    refusal (400) and nothing is left, as when the client's model refused it; by
    default the apiserver would drop the field and run the Pod without it."""
    template = {"spec": {"containers": [
        {"name": "main", "image": "trainer:1", "securityContext": SC, "colour": "red"}]}}
    with pytest.raises(InvalidPodError, match=r"400 .*colour"):
        cluster.bind(_req(job_id="odd", template=template))
    assert kube.gpuq_pods() == []


BASELINE_ONLY = {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}


def _baseline_cluster(kube: RealKube) -> KubernetesCluster:
    c = make_cluster(kube)
    c.pod_policy_for = lambda team: PodPolicy(level="baseline",
                                              install=c.ks.install_policy())
    c.start(wait_s=20)
    wait_for(lambda: c.list_nodes(), what="nodes")
    return c


def test_pod_security_admission_answers_403_and_nothing_is_left(kube, nodes):
    """A team allowed ``baseline`` by gpuq, a job namespace enforcing ``restricted``
    (k8s/namespace.yaml): the real Pod Security admission refuses with 403."""
    c = _baseline_cluster(kube)
    try:
        with pytest.raises(BindError, match=r"403 .*violates PodSecurity \"restricted:latest\""):
            c.bind(_req(job_id="psa", template=BASELINE_ONLY))
        assert kube.gpuq_pods() == []
    finally:
        c.close()


@pytest.mark.parametrize("case", ["pod-security", "missing-priorityclass"])
def test_admission_403_is_permanent(kube, nodes, case):
    """Pod Security and a missing PriorityClass are the job's own refusals: permanent
    (the job fails with the message), never re-created every pass."""
    c = _baseline_cluster(kube)
    try:
        req = (_req(job_id="psa", template=BASELINE_ONLY) if case == "pod-security"
               else _req(job_id="prio", priority="P7"))
        with pytest.raises(InvalidPodError, match="403"):
            c.bind(req)
    finally:
        c.close()


def test_a_service_account_the_namespace_lacks_is_a_passing_403(kube, nodes):
    """A team allowed the ServiceAccount ``trainer`` that the job namespace does not have:
    the ServiceAccount admission plug-in refuses the Pod, 403 ``error looking up service
    account`` (what the fake's model, tests/fakekube/controllers.py, says). gpuq holds
    the job (a BindError that passes, not the job's own InvalidPodError): once an operator
    makes the account, the same job binds."""
    c = make_cluster(kube)
    c.pod_policy_for = lambda team: PodPolicy(service_accounts=("default", "trainer"),
                                              install=c.ks.install_policy())
    c.start(wait_s=20)
    wait_for(lambda: c.list_nodes(), what="nodes")
    template = {"spec": {"serviceAccountName": "trainer"}}
    try:
        with pytest.raises(BindError) as got:
            c.bind(_req(job_id="sa", gpus=1, template=template))
        assert not isinstance(got.value, InvalidPodError), got.value
        assert "403" in str(got.value), got.value
        assert (f"is forbidden: error looking up service account {kube.namespace}/trainer: "
                'serviceaccount "trainer" not found') in str(got.value), got.value
        assert kube.gpuq_pods() == []
        kube.core.create_namespaced_service_account(kube.namespace,
                                                    {"metadata": {"name": "trainer"}})
        c.bind(_req(job_id="sa", gpus=1, template=template))
        wait_for(lambda: len(kube.gpuq_pods()) == 1, what="the Pod")
        assert kube.gpuq_pods()[0]["spec"]["serviceAccountName"] == "trainer"
    finally:
        c.close()
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_service_account("trainer", kube.namespace)


def test_gpuqs_restricted_check_agrees_with_pod_security_admission(kube, cluster):
    """gpuq's own Pod Security check (app/domain/pod_policy.py) and the apiserver's
    (k8s.io/pod-security-admission) judge the same Pods alike: dry-run creates in a
    restricted namespace as gpuq."""
    api = client.CoreV1Api(kube.gpuq_api_client())
    base = {"name": "c", "image": "x:1"}
    cases = {
        "compliant": {"containers": [{**base, "securityContext": SC}]},
        "no-seccomp": {"containers": [{**base, "securityContext": {
            k: v for k, v in SC.items() if k != "seccompProfile"}}]},
        "root": {"containers": [{**base, "securityContext": {**SC, "runAsUser": 0}}]},
        "escalation": {"containers": [{**base, "securityContext": {
            **SC, "allowPrivilegeEscalation": True}}]},
        "hostpath": {"containers": [{**base, "securityContext": SC}],
                     "volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
        "hostnetwork": {"hostNetwork": True, "containers": [{**base, "securityContext": SC}]},
        "netraw": {"containers": [{**base, "securityContext": {
            **SC, "capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}}}]},
        "pod-level-sc": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {
            "type": "RuntimeDefault"}}, "containers": [{**base, "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]},
    }
    policy = PodPolicy(install=KubeSettings(namespace=kube.namespace).install_policy())
    for name, spec in cases.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        ours = check_pod(pod, policy)
        try:
            api.create_namespaced_pod(kube.namespace, pod, dry_run="All")
            theirs = True
        except ApiException as e:
            assert e.status == 403, e.body
            theirs = False
        assert (not ours) == theirs, (name, ours)


def test_a_pod_that_leaves_the_token_unset_gets_one_and_gpuq_refuses_it(kube, cluster):
    """What the front door's token rule rests on (``token_violations``): the
    apiserver's ServiceAccount admission mounts the token into a Pod whose spec leaves
    ``automountServiceAccountToken`` unset, so the check at bind (``check_pod``, the
    default policy: no token) refuses the Pod the apiserver made of such a template,
    and takes the one made of a template that says false."""
    api = client.CoreV1Api(kube.gpuq_api_client())
    policy = PodPolicy(install=KubeSettings(namespace=kube.namespace).install_policy())
    for automount in (None, False):
        spec: dict = {"containers": [{"name": "c", "image": "x:1", "securityContext": SC}]}
        if automount is not None:
            spec["automountServiceAccountToken"] = automount
        template = {"metadata": {"namespace": kube.namespace}, "spec": spec}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "token"}, "spec": spec}
        made = raw(api.create_namespaced_pod(kube.namespace, pod, dry_run="All",
                                             _preload_content=False))
        mounted = any("serviceAccountToken" in src
                      for v in made["spec"].get("volumes") or []
                      for src in (v.get("projected") or {}).get("sources") or [])
        refused = check_pod(made, policy)
        assert mounted == (automount is None), made["spec"].get("volumes")
        assert bool(refused) == mounted, refused
        assert bool(token_violations(template, policy)) == mounted


# ------------------------------------------------------------------ eviction, disruption
def test_stop_evicts_and_falls_back_to_delete_when_a_pdb_answers_429(kube, cluster):
    """The Eviction subresource against a real PodDisruptionBudget (status computed by
    the disruption controller): 429, then gpuq deletes with the grace period."""
    cluster.bind(_req(job_id="victim"))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Running")
    client.PolicyV1Api(kube.s.admin).create_namespaced_pod_disruption_budget(kube.namespace, {
        "metadata": {"name": "keep"}, "spec": {"minAvailable": 1, "selector": {
            "matchLabels": {"gpuq.io/job-id": "victim"}}}})
    wait_for(lambda: (raw(client.PolicyV1Api(kube.s.admin)
                          .read_namespaced_pod_disruption_budget(
                              "keep", kube.namespace, _preload_content=False))
                      .get("status") or {}).get("currentHealthy") == 1, what="PDB status")
    cluster.stop("victim", "preempted by P0 job", grace_seconds=5)
    wait_for(lambda: kube.pod(*_ns_name(p)) is None, what="victim Pod gone")
    reasons = [(e["reason"], e.get("message")) for e in kube.events()]
    assert ("GpuqStopped", "preempted by P0 job") in reasons


def _watch_pod(kube: RealKube, name: str, seen: list, stop: threading.Event) -> None:
    w = watch.Watch()
    for ev in w.stream(kube.core.list_namespaced_pod, kube.namespace,
                       field_selector=f"metadata.name={name}", timeout_seconds=30,
                       _preload_content=False):
        obj = ev["raw_object"]
        st = obj.get("status") or {}
        seen.append((ev["type"], st.get("phase"),
                     {c["type"]: c.get("reason") for c in st.get("conditions") or []}))
        if ev["type"] == "DELETED" or stop.is_set():
            w.stop()


def test_graceful_eviction_shows_disruption_target_and_a_terminal_phase_first(kube, cluster):
    """An eviction by someone else (a drain): the apiserver adds DisruptionTarget
    (EvictionByEvictionAPI), the kubelet reports Failed (exit 143), only then the object
    goes (registry/core/pod/storage/eviction.go; kubelet status_manager)."""
    cluster.bind(_req(job_id="drained"))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Running")
    seen: list = []
    stop = threading.Event()
    t = threading.Thread(target=_watch_pod, args=(kube, p["metadata"]["name"], seen, stop))
    t.start()
    kube.core.create_namespaced_pod_eviction(p["metadata"]["name"], kube.namespace, {
        "metadata": {"name": p["metadata"]["name"]}}, _preload_content=False)
    # gpuq records the Pod's end (its finalizer holds the object until then)
    wait_for(lambda: _recorded(cluster) is None or not t.is_alive(), 40, "the Pod deleted")
    stop.set()
    types = [s[0] for s in seen]
    assert types[-1] == "DELETED"
    disrupted = next(i for i, s in enumerate(seen) if "DisruptionTarget" in s[2])
    assert seen[disrupted][2]["DisruptionTarget"] == "EvictionByEvictionAPI"
    failed = next(i for i, s in enumerate(seen) if s[1] == "Failed")
    assert disrupted <= failed < len(seen) - 1


def test_drain_requeues_the_job_instead_of_failing_it(kube, cluster):
    p = _running(kube, cluster, "drained")
    kube.core.create_namespaced_pod_eviction(p["metadata"]["name"], kube.namespace, {
        "metadata": {"name": p["metadata"]["name"]}}, _preload_content=False)
    got = _events_until(cluster, lambda g: any(e.phase == "gone" for e in g), timeout_s=20)
    # recorded: gpuq's finalizer is off, the object goes
    wait_for(lambda: _recorded(cluster) is None or kube.pod(*_ns_name(p)) is None,
             what="evicted Pod gone")
    assert "failed" not in [e.phase for e in got], got
    assert "EvictionByEvictionAPI" in next(e.message for e in got if e.phase == "gone")


def test_node_pressure_eviction_requeues_the_job(kube, cluster):
    cluster.bind(_req(job_id="pressed"))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Failed", terminated={"reason": "Evicted"})
    assert kube.pod(*_ns_name(p))["status"]["reason"] == "Evicted"
    got = _events_until(cluster, lambda g: any(e.phase == "gone" for e in g))
    assert "failed" not in [e.phase for e in got], got
    assert "Evicted" in next(e.message for e in got if e.phase == "gone")


# ------------------------------------------------------------------ node loss
def _lose_node(kube: RealKube, name: str) -> None:
    """The node's kubelet stops (kwok no longer manages it): its lease expires."""
    kube.update_node(name, lambda n: n["metadata"]["labels"].pop(
        "kwok.gpuq.test/managed", None))


def test_node_loss_goes_not_ready_and_taint_eviction_marks_the_pods(kube, cluster):
    """node lifecycle controller: lease not renewed -> Ready Unknown, unreachable
    NoExecute taint; taint eviction controller: the Pod (DefaultTolerationSeconds) gets
    DisruptionTarget DeletionByTaintManager and a deletionTimestamp, and with no kubelet
    to finish it stays Terminating in phase Running; gpuq stops offering the node."""
    cluster.bind(_req(job_id="lost"))
    (p,) = kube.gpuq_pods()
    kube.set_pod_phase(*_ns_name(p), "Running")
    _lose_node(kube, "a100-0")
    wait_for(lambda: not kube.node_ready("a100-0"), 40, "a100-0 NotReady")
    wait_for(lambda: any(t["key"] == "node.kubernetes.io/unreachable"
                         for t in kube.node("a100-0")["spec"].get("taints") or []), 20,
             "unreachable taint")
    pod = kube.wait_evicted(*_ns_name(p))
    conds = {c["type"]: c.get("reason") for c in pod["status"].get("conditions") or []}
    assert conds.get("DisruptionTarget") == "DeletionByTaintManager"
    assert pod["status"]["phase"] == "Running"  # nobody on the node to stop it
    wait_for(lambda: all(n.name != "a100-0" or not n.schedulable for n in cluster.list_nodes()),
             20, "gpuq stops offering the lost node")


def test_node_loss_requeues_the_job(kube, cluster):
    p = _running(kube, cluster, "lost")
    _lose_node(kube, "a100-0")
    kube.wait_evicted(*_ns_name(p))
    got = _events_until(cluster, lambda g: any(e.phase == "gone" for e in g), timeout_s=15)
    assert "DeletionByTaintManager" in next(e.message for e in got if e.phase == "gone")


def test_kubelets_that_stop_beating_are_restarted_and_the_loss_still_evicts(kube, cluster):
    """The test harness itself: kwok (every simulated kubelet) stopped while a node is
    lost puts the node lifecycle controller in master disruption mode; wait_evicted
    restarts kwok (heal_heartbeats), the other Nodes beat again, and the eviction comes."""
    p = _running(kube, cluster, "lost")
    _lose_node(kube, "a100-0")
    os.kill(kube.s.cp.procs["kwok"].pid, signal.SIGSTOP)
    with pytest.warns(UserWarning, match="KWOK RESTARTED"):
        pod = kube.wait_evicted(*_ns_name(p))
    assert kube.kwok_healed
    conds = {c["type"]: c.get("reason") for c in pod["status"].get("conditions") or []}
    assert conds.get("DisruptionTarget") == "DeletionByTaintManager"
    wait_for(lambda: all(a is not None and a < 3 for a in kube.lease_ages().values()), 20,
             "the other Nodes' Leases renewed by the new kwok")


def test_image_pull_backoff_fails_the_job_after_the_start_deadline(kube, nodes):
    """The kubelet retries an image pull forever (ErrImagePull, ImagePullBackOff, Pod
    Pending); past GPUQ_K8S_START_DEADLINE_S gpuq fails the job with the kubelet's reason
    and deletes the Pod, so the cards are not held forever."""
    c = make_cluster(kube, start_deadline_s=3)
    c.start(wait_s=20)
    try:
        wait_for(lambda: len(c.list_nodes()) == 3, what="gpuq sees the 3 nodes")
        c.bind(_req(job_id="nopull", template={
            "metadata": {"annotations": {OUTCOME_START: "ImagePullBackOff"}},
            "spec": {"containers": [{"name": "main", "image": "nowhere/none:1",
                                     "securityContext": SC}]}}))
        got = _events_until(c, lambda g: any(e.phase == "failed" for e in g), timeout_s=30)
        assert [e.phase for e in got] == ["failed"]
        assert "ImagePullBackOff" in got[0].message
        wait_for(lambda: kube.gpuq_pods() == [], 30, "the stuck Pod deleted")
        wait_for(lambda: "nopull" not in c.running_job_ids() | c.draining_job_ids(), 10,
                 "its cards free")
    finally:
        c.close()


# ------------------------------------------------------------------ watch, pagination
def test_watch_ends_and_resumes_from_its_resource_version(kube, cluster):
    """The apiserver ends each watch after timeoutSeconds (2 here); the informer resumes
    from the last resourceVersion (bookmarks keep it fresh) without relisting."""
    relists = cluster.nodes.relists
    watches = cluster.nodes.watches
    wait_for(lambda: cluster.nodes.watches >= watches + 2, 15, "two watch rounds")
    kube.add_node(gfd_v100("v100-1"))
    wait_for(lambda: "v100-1" in {n.name for n in cluster.list_nodes()}, 15, "new node seen")
    assert cluster.nodes.relists == relists


def test_list_pagination_with_limit_and_continue(kube, cluster):
    """The apiserver pages a list (limit/continue) from one consistent snapshot: what
    an informer must do on a cluster with tens of thousands of Pods."""
    api = client.CoreV1Api(kube.gpuq_api_client())
    for i in range(5):
        kube.add_pod({"metadata": {"name": f"other-{i}"}, "spec": {"nodeName": "v100-0",
                      "containers": [{"name": "c", "image": "x:1"}]}})
    other = f"{kube.namespace}-other"
    names, token, pages = [], None, 0
    while True:
        page = raw(api.list_namespaced_pod(other, limit=2, _continue=token,
                                           _preload_content=False))
        pages += 1
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages == 3 and sorted(names) == [f"other-{i}" for i in range(5)]


# ------------------------------------------------------------------ other workloads
def test_a_batch_job_scheduled_by_kube_scheduler_takes_gpus_gpuq_then_sees_free(kube, cluster):
    """A batch/v1 Job (Job controller), its Pod placed by kube-scheduler on a kwok node:
    gpuq counts its GPUs as used while it runs and free once it completed."""
    if "kube-scheduler" not in kube.s.cp.procs:
        pytest.skip("kube-scheduler binary absent: Pods of other workloads stay unscheduled")
    batch = client.BatchV1Api(kube.s.admin)
    batch.create_namespaced_job(kube.namespace, {
        "metadata": {"name": "etl"},
        "spec": {"backoffLimit": 0, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": "etl:1", "securityContext": SC,
                "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
                "nodeSelector": {"kubernetes.io/hostname": "v100-0"}}}}})

    def free_v100() -> int:
        return len(next(n for n in cluster.list_nodes() if n.name == "v100-0")
                   .free_whole_devices())

    wait_for(lambda: free_v100() == 1, 30, "the Job's Pod holds 3 of v100-0's 4 GPUs")
    (pod,) = raw(kube.core.list_namespaced_pod(kube.namespace, label_selector="job-name=etl",
                                               _preload_content=False))["items"]
    kube.core.patch_namespaced_pod(pod["metadata"]["name"], kube.namespace,
                                   {"metadata": {"annotations": {OUTCOME_END: "Succeeded"}}})
    wait_for(lambda: (raw(batch.read_namespaced_job_status("etl", kube.namespace,
                                                          _preload_content=False))
                      .get("status") or {}).get("succeeded") == 1, 30, "Job complete")
    wait_for(lambda: free_v100() == 4, 20, "GPUs free again")


# ------------------------------------------------------------------ the dispatcher
@pytest.fixture
def dispatcher(kube, nodes, db_url, sf) -> Iterator[tuple[Dispatcher, KubernetesCluster]]:
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url), grace_seconds=2)
    try:
        yield d, c
    finally:
        d.elector.release()
        c.close()


def _submit(sf, body: dict) -> str:  # noqa: ANN001
    with sf() as s:
        job_id = submit_job(s, JobSpec.model_validate(body), now=utcnow()).job.id
        s.commit()
    return job_id


def _status(sf, job_id: str) -> str:  # noqa: ANN001
    with sf() as s:
        return s.get(JobRow, job_id).status


def test_dispatcher_runs_a_job_to_success_on_the_real_cluster(kube, sf, dispatcher):
    d, _c = dispatcher
    job_id = _submit(sf, {"name": "sft", "team": "nlp", "duration_estimate_s": 60,
                          "resources": {"gpus": 8, "gpu_types": ["a100-80g"]}})
    wait_for(lambda: d.run_once() or _status(sf, job_id) == "running", 30, "running")
    (p,) = kube.gpuq_pods()
    assert p["spec"]["nodeName"] in ("a100-0", "a100-1")
    kube.set_pod_phase(*_ns_name(p), "Succeeded")
    wait_for(lambda: d.run_once() or _status(sf, job_id) == "succeeded", 30, "succeeded")
    with sf() as s:
        path = [e.to_status for e in s.scalars(select(JobEventRow).where(
            JobEventRow.job_id == job_id).order_by(JobEventRow.id))]
    assert path[-3:] == ["admitted", "running", "succeeded"], path


def test_dispatcher_preempts_with_a_graceful_eviction_on_the_real_cluster(kube, nodes, db_url,
                                                                          sf):
    """Both A100 nodes full of P2 jobs, then a P0 job (after the minimum run time, on
    gpuq's manual clock): one P2 job is evicted with the grace period, the kubelet ends it
    (exit 143, Failed, deleted), and the P0 job's Pod is created only once the victim's is
    gone; the victim is requeued (``pending``), not failed."""
    clock = ManualClock()
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, clock=clock, elector=elector(db_url), grace_seconds=2)

    def submit(name: str, priority: str) -> str:
        with sf() as s:
            job_id = submit_job(s, JobSpec.model_validate({
                "name": name, "team": "nlp", "priority": priority,
                "resources": {"gpus": 8, "gpu_types": ["a100-80g"]}}), now=clock()).job.id
            s.commit()
        return job_id

    try:
        low = [submit(f"low{i}", "P2") for i in (0, 1)]
        wait_for(lambda: d.run_once() or all(_status(sf, j) == "running" for j in low), 30,
                 "both P2 jobs running")
        clock.advance(600)  # past the minimum run time before a job may be preempted
        high = submit("serve", "P0")
        overlap = []

        def step() -> bool:
            d.run_once()
            pods = kube.gpuq_pods()
            jobs = {p["metadata"]["labels"]["gpuq.io/job-id"] for p in pods
                    if (p.get("status") or {}).get("phase") in ("Pending", "Running")}
            if str(high) in jobs and len(jobs) > 2:
                overlap.append(sorted(jobs))
            return _status(sf, high) == "running"

        wait_for(step, 60, "P0 job running")
        assert overlap == []  # never three 8-card jobs' live Pods on two 8-card nodes
        statuses = sorted(_status(sf, j) for j in low)
        assert statuses == ["pending", "running"], statuses
    finally:
        d.elector.release()
        c.close()


# ------------------------------------------------------------------ the front door


def a100_with_product(name: str) -> dict:
    """An A100 node with the GPU feature discovery product label k8s/examples/job.yaml's
    required node affinity names: a node of the type without it is not used for that Job
    (its kubelet would refuse the Pods, NodeAffinity; kwok does not check it)."""
    n = article_a100(name)
    n["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    return n


def test_a_suspended_job_with_a_queue_label_runs_through_gpuq(kube, sf, db_url):
    """k8s/examples/job.yaml as a user applies it: a batch/v1 Job created suspended with
    ``gpuq.io/queue: nlp``. On the real Job controller gpuq queues it as a job, admits it
    by ``spec.suspend: false``, binds the Pods the controller creates (``schedulerName:
    gpuq``) on the cards it reserved, and the Job completes; the job ends ``succeeded``."""
    kube.add_node(a100_with_product("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url), grace_seconds=0)
    job = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    job["metadata"]["namespace"] = kube.namespace
    batch = client.BatchV1Api(kube.s.admin)
    batch.create_namespaced_job(kube.namespace, job)
    name = job["metadata"]["name"]

    def row() -> JobRow | None:
        with sf() as s:
            return s.scalars(select(JobRow).where(JobRow.name == name)).first()

    def pods() -> list[dict]:
        return [p for p in raw(kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"batch.kubernetes.io/job-name={name}",
            _preload_content=False))["items"] if not p["metadata"].get("deletionTimestamp")]

    try:
        wait_for(lambda: d.run_once() or len([p for p in pods()
                                              if p["spec"].get("nodeName")]) == 2,
                 60, "the Job's 2 Pods bound by gpuq")
        r = row()
        assert r is not None and r.team == "nlp" and r.spec["resources"]["gpus"] == 1
        assert r.spec["resources"]["gpu_types"] == ["a100-80g"]  # from the node affinity
        assert r.spec["resources"]["min_gpu_memory_gb"] == 40  # from the annotation
        got = raw(batch.read_namespaced_job(name, kube.namespace, _preload_content=False))
        assert got["spec"]["suspend"] is False
        ps = pods()
        assert {p["spec"]["schedulerName"] for p in ps} == {"gpuq"}
        assert {p["spec"]["nodeName"] for p in ps} == {"a100-0"}
        for p in ps:
            kube.set_pod_phase(*_ns_name(p), "Succeeded")
        wait_for(lambda: d.run_once() or (row() or r).status == "succeeded", 60,
                 "the job succeeded")
        wait_for(lambda: (raw(batch.read_namespaced_job(
            name, kube.namespace, _preload_content=False)).get("status") or {}).get(
                "succeeded") == 2, 30, "the Job complete")
    finally:
        d.elector.release()
        c.close()


def test_a_preempted_workload_is_suspended_again_and_requeued(kube, sf, db_url):
    """The P2 Job of k8s/examples/job.yaml (2 Pods x 4 cards here) holds a100-0 when a P0
    job arrives: gpuq preempts it by setting ``spec.suspend: true`` again, the Job
    controller removes its Pods, the P0 job runs, and the workload's job waits
    ``pending`` to be admitted again."""
    kube.add_node(a100_with_product("a100-0"))
    clock = ManualClock()
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, clock=clock, elector=elector(db_url), grace_seconds=0)
    job = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    job["metadata"]["namespace"] = kube.namespace
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "4"}
    batch = client.BatchV1Api(kube.s.admin)
    batch.create_namespaced_job(kube.namespace, job)
    name = job["metadata"]["name"]

    def workload_status() -> str | None:
        with sf() as s:
            r = s.scalars(select(JobRow).where(JobRow.name == name)).first()
            return r.status if r else None

    def pods() -> list[dict]:
        return [p for p in raw(kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"batch.kubernetes.io/job-name={name}",
            _preload_content=False))["items"] if not p["metadata"].get("deletionTimestamp")]

    def suspended() -> bool:
        return raw(batch.read_namespaced_job(name, kube.namespace, _preload_content=False))[
            "spec"]["suspend"]

    try:
        wait_for(lambda: d.run_once() or workload_status() == "running", 60,
                 "the Job running")
        clock.advance(600)  # past the minimum run time before a job may be preempted
        with sf() as s:
            high = submit_job(s, JobSpec.model_validate({
                "name": "serve", "team": "nlp", "priority": "P0",
                "resources": {"gpus": 8, "gpu_types": ["a100-80g"]}}), now=clock()).job.id
            s.commit()
        wait_for(lambda: d.run_once() or _status(sf, high) == "running", 60,
                 "the P0 job running")
        assert suspended() is True
        wait_for(lambda: d.run_once() or not pods(), 30, "the Job's Pods removed")
        assert workload_status() == "pending"
    finally:
        d.elector.release()
        c.close()

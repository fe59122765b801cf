"""pytest fixtures on the real control plane (tests/realkube/control_plane.py).

* ``control_plane`` (session): one etcd + kube-apiserver + kube-controller-manager + kwok
  for the whole test session, with gpuq's ServiceAccount, its cluster-wide RBAC from
  k8s/rbac.yaml and the PriorityClasses of k8s/priorityclasses.yaml applied.
* ``real_kube`` (per test): a :class:`RealKube` with a fresh job namespace of its own,
  ``gpuq-jobs-N`` (a test reads its name from ``kube.namespace`` / :func:`job_namespace`,
  gpuq from ``kube.settings``), labelled for Pod Security like k8s/namespace.yaml and
  holding the namespaced Role of k8s/rbac.yaml. Afterwards its namespaces are deleted,
  its Pods force-deleted and its Nodes removed; the next test starts once the Pods and
  Nodes are gone, not the namespaces: kube-controller-manager's namespace controller
  waits a fixed 5 s before it empties a deleted namespace (namespaceDeletionGracePeriod),
  and a Terminating namespace takes no new objects. The session ends by checking that
  every test's namespace did go.

:class:`RealKube` offers the world-editing verbs of tests/fakekube's FakeKube that a
real cluster can do (``add_node``, ``update_node``, ``delete_node``, ``add_pod``,
``set_pod_phase``, ``delete_pod``, ``gpuq_pods``), so a Kubernetes-backend test can run
on both (tests/realkube/both.py). Pod outcomes go through kwok's stages (annotations, see
kwok-stages.yaml), never by writing the status over the kubelet's head.

Without the binaries the fixtures skip with the reason, which tests/conftest.py's
summary prints per test group; with ``GPUQ_REQUIRE_REAL_KUBE=1`` (``.ci/run`` sets it)
they fail instead, so CI cannot go green without having run them.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.realkube.control_plane import (
    KWOK_NODE_LABEL,
    LOSS_PATIENCE_S,
    NODE_MONITOR_GRACE_S,
    REPO,
    ControlPlane,
    MissingBinaries,
    find_binaries,
    running_control_plane,
)

GPUQ_SA = ("gpuq", "gpuq")  # namespace, name (k8s/serviceaccount.yaml)
OUTCOME_START = "outcome.gpuq.test/start"
OUTCOME_END = "outcome.gpuq.test/end"


def _docs(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]


def api_client(url: str, token: str, ca_file: Path) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = url
    cfg.ssl_ca_cert = str(ca_file)  # the self-signed chain the apiserver made at start
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def raw(resp: Any) -> dict:
    """The JSON of a ``_preload_content=False`` answer (no client models in between)."""
    return json.loads(resp.data)


def wait_for(pred: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s:.0f} s")
        time.sleep(0.1)


def install_crds(admin: client.ApiClient, folder: Path, what: str) -> None:
    """Every CustomResourceDefinition in ``folder``'s YAML files created, then waited for
    until the API server has established each (a real scheduler's informers fail on a
    resource the server does not serve yet)."""
    ext = client.ApiextensionsV1Api(admin)
    names = set()
    for f in sorted(folder.glob("*.yaml")):
        body = yaml.safe_load(f.read_text())
        names.add(body["metadata"]["name"])
        ext.create_custom_resource_definition(body)

    def established() -> bool:
        crds = [c for c in ext.list_custom_resource_definition().items
                if c.metadata.name in names]
        return len(crds) == len(names) and all(
            any(x.type == "Established" and x.status == "True"
                for x in (c.status.conditions or [])) for c in crds)
    wait_for(established, 60, f"{what} CRDs established")


class Session:
    """The control plane plus admin and gpuq clients, set up once per test session."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.admin = api_client(cp.url, cp.admin_token, cp.ca_file)
        self.core = client.CoreV1Api(self.admin)
        self.rbac_docs = _docs("k8s/rbac.yaml")
        ns, sa = GPUQ_SA
        self.core.create_namespace({"metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}})
        self.core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
        rbac = client.RbacAuthorizationV1Api(self.admin)
        for doc in self.rbac_docs:
            if doc["kind"] == "ClusterRole":
                rbac.create_cluster_role(doc)
            elif doc["kind"] == "ClusterRoleBinding":
                rbac.create_cluster_role_binding(doc)
            elif doc["metadata"].get("namespace") == "default":  # Node events' Role
                (rbac.create_namespaced_role if doc["kind"] == "Role"
                 else rbac.create_namespaced_role_binding)("default", doc)
        #: job namespaces of finished tests, deleted, their deletion not awaited
        self.deleted_namespaces: list[str] = []
        self._namespaces_made = 0
        sched = client.SchedulingV1Api(self.admin)
        for doc in _docs("k8s/priorityclasses.yaml"):
            sched.create_priority_class(doc)
        # gpuq's own credential: a bound ServiceAccount token (TokenRequest API), as the
        # kubelet projects it into gpuq's Pod
        tr = self.core.create_namespaced_service_account_token(
            sa, ns, {"spec": {"audiences": [], "expirationSeconds": 6 * 3600}})
        self.gpuq_token = tr.status.token

    def gpuq_client(self) -> client.ApiClient:
        return api_client(self.cp.url, self.gpuq_token, self.cp.ca_file)

    def next_job_namespace(self) -> str:
        """A job namespace name no earlier test of the session used (an earlier test's
        may still be Terminating)."""
        self._namespaces_made += 1
        return f"gpuq-jobs-{self._namespaces_made}"

    def check_namespaces_gone(self, timeout_s: float = 60.0) -> None:
        """Every finished test's namespace was removed by the namespace controller
        (nothing in one kept it: a finalizer, content it could not delete)."""
        gone = set(self.deleted_namespaces)
        wait_for(lambda: not ({n.metadata.name for n in self.core.list_namespace().items}
                              & gone), timeout_s, f"namespaces {sorted(gone)} deleted")


class RealKube:
    """One test's view of the real cluster (see the module docstring)."""

    backend = "real"

    def __init__(self, session: Session, namespace: str | None = None) -> None:
        self.s = session
        self.core = session.core
        self.url = session.cp.url
        self.namespace = namespace or session.next_job_namespace()
        self.node_names: set[str] = set()
        #: :meth:`heal_heartbeats` restarted kwok during this test
        self.kwok_healed = False
        self._heartbeats_checked = 0.0
        self.extra_namespaces: list[str] = []
        self.make_namespace(self.namespace)

    # ------------------------------------------------------------ setup
    def make_namespace(self, name: str, enforce: str = "restricted") -> None:
        """A job namespace as k8s/namespace.yaml makes gpuq-jobs, with the Role and
        RoleBinding of k8s/rbac.yaml (what k8s/overlays/extra-job-namespace does)."""
        self.core.create_namespace({"metadata": {"name": name, "labels": {
            "pod-security.kubernetes.io/enforce": enforce,
            "pod-security.kubernetes.io/enforce-version": "latest"}}})
        rbac = client.RbacAuthorizationV1Api(self.s.admin)
        for doc in self.s.rbac_docs:
            if doc["kind"] in ("Role", "RoleBinding") and doc["metadata"].get(
                    "namespace") == "gpuq-jobs":
                d = copy.deepcopy(doc)
                d["metadata"]["namespace"] = name
                (rbac.create_namespaced_role if d["kind"] == "Role"
                 else rbac.create_namespaced_role_binding)(name, d)
        if name != self.namespace:
            self.extra_namespaces.append(name)
        # the ServiceAccount admission plugin needs the namespace's default account,
        # which the serviceaccount controller makes a moment later
        wait_for(lambda: self._has_default_sa(name), what=f"default ServiceAccount in {name}")

    def _has_default_sa(self, ns: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", ns)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def gpuq_api_client(self) -> client.ApiClient:
        """gpuq's own credentials: its ServiceAccount token, so RBAC is what decides."""
        return self.s.gpuq_client()

    @property
    def settings(self) -> dict[str, Any]:
        """KubeSettings gpuq runs with on this cluster (its job namespace)."""
        return {"namespace": self.namespace}

    # ------------------------------------------------------------ world edits
    def add_node(self, node: dict, *, managed: bool = True) -> None:
        """A Node a kwok kubelet runs (``managed``), reporting the capacity and labels of
        ``node`` (GPU Feature Discovery's labels in tests/fakekube/objects.py); a Node
        built NotReady gets no kubelet, so the node lifecycle controller judges it."""
        node = copy.deepcopy(node)
        meta = node["metadata"]
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if managed and ready:
            meta.setdefault("labels", {})[KWOK_NODE_LABEL] = "true"
        status = node.get("status") or {}
        # the kubelet (kwok) reports the conditions; a kubelet-less Node reports none
        node["status"] = {k: v for k, v in status.items() if k != "conditions"}
        self.core.create_node(node)
        self.node_names.add(meta["name"])
        if managed and ready:
            wait_for(lambda: self.node_ready(meta["name"]), what=f"node {meta['name']} Ready")

    def node(self, name: str) -> dict:
        return raw(self.core.read_node(name, _preload_content=False))

    def node_ready(self, name: str) -> bool:
        conds = (self.node(name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def wait_evicted(self, namespace: str, name: str) -> dict:
        """Wait (``LOSS_PATIENCE_S``) until the taint eviction controller has deleted the
        Pod of a lost node (its deletionTimestamp is set); the Pod. While waiting, the
        kubelets of the other Nodes must keep beating (:meth:`heal_heartbeats`). A timeout
        carries :meth:`loss_evidence` for the Pod's node."""
        def deleted() -> dict | None:
            pod = self.pod(namespace, name)
            if pod and pod["metadata"].get("deletionTimestamp"):
                return pod
            self.heal_heartbeats()
            return None

        try:
            return wait_for(deleted, LOSS_PATIENCE_S, "taint eviction")
        except AssertionError as e:
            node = ((self.pod(namespace, name) or {}).get("spec") or {}).get("nodeName")
            raise AssertionError(f"{e}; {self.loss_evidence(node)}") from None

    def lease_ages(self) -> dict[str, float | None]:
        """Seconds since the kubelet (kwok) of each of this test's kwok-run Nodes last
        renewed its Lease in kube-node-lease, the heartbeat the node lifecycle controller
        reads (None: no Lease). kwok stamps renewTime from this machine's clock."""
        coord = client.CoordinationV1Api(self.s.admin)
        renewed = {ls.metadata.name: ls.spec.renew_time
                   for ls in coord.list_namespaced_lease("kube-node-lease").items}
        out: dict[str, float | None] = {}
        for n in self.core.list_node().items:
            if n.metadata.name in self.node_names and (
                    n.metadata.labels or {}).get(KWOK_NODE_LABEL) == "true":
                t = renewed.get(n.metadata.name)
                out[n.metadata.name] = None if t is None else time.time() - t.timestamp()
        return out

    def heal_heartbeats(self) -> None:
        """Restart kwok, once per test, when a Node it still runs has not renewed its Lease
        for longer than the node-monitor grace period. Every simulated kubelet lives in
        the one kwok process; when they all stop beating together the node lifecycle
        controller enters "master disruption mode" and evicts nothing
        (handleDisruption in pkg/controller/nodelifecycle/node_lifecycle_controller.go),
        so a node-loss test would wait on the test's kubelets, not on the node it lost.
        A CI run showed that mode flipping on every 8 s for minutes, which fits kwok
        renewing no Lease (its node-lease queue, pkg/kwok/controllers/
        node_lease_controller.go, misbehaves when Nodes are re-created under the same
        names). Said loudly, with the ages."""
        if self.kwok_healed or time.monotonic() < self._heartbeats_checked + 1.0:
            return
        self._heartbeats_checked = time.monotonic()
        ages = self.lease_ages()
        stale = {n: None if a is None else round(a, 1) for n, a in ages.items()
                 if a is None or a > NODE_MONITOR_GRACE_S}
        if not stale:
            return
        self.kwok_healed = True
        warnings.warn(f"KWOK RESTARTED: the Leases of {sorted(stale)} were not renewed "
                      f"(seconds since: {stale}); kwok's last lines:\n"
                      f"{self.s.cp.log_tail('kwok', 10)}", stacklevel=2)
        self.s.cp.restart_kwok()

    def loss_evidence(self, node: str | None) -> str:
        """Why a lost node's Pods may not have been evicted yet: its conditions and taints,
        which Nodes are Ready (all NotReady: the node lifecycle controller's "master
        disruption mode", control_plane.LOSS_PATIENCE_S), how old each kwok-run Node's
        Lease is, whether kwok was restarted, and what the node lifecycle and taint
        eviction controllers and kwok's lease controller logged."""
        n = self.node(node) if node else {}
        conds = {c["type"]: (c["status"], c.get("reason")) for c in
                 (n.get("status") or {}).get("conditions") or []}
        ready = {name: self.node_ready(name) for name in sorted(self.node_names)}
        ages = {k: None if v is None else round(v, 1) for k, v in self.lease_ages().items()}
        lines = [ln for ln in self.s.cp.log_lines("kube-controller-manager")
                 if "node_lifecycle" in ln or "taint" in ln or "isruption" in ln]
        kwok = [ln for ln in self.s.cp.log_lines("kwok") if "ease" in ln]
        return (f"node {node}: conditions {conds}, taints "
                f"{(n.get('spec') or {}).get('taints')}; Ready: {ready}; "
                f"seconds since each Lease was renewed: {ages}; kwok restarted: "
                f"{self.kwok_healed}; controller-manager:\n" + "\n".join(lines[-25:])
                + "\nkwok:\n" + "\n".join(kwok[-10:]))

    def update_node(self, name: str, fn: Callable[[dict], None]) -> None:
        """Read, change, replace; on a conflict read again and retry, as client-go's
        ``retry.RetryOnConflict`` (k8s.io/client-go/util/retry/util.go) does: kwok and
        the node controllers write the Node too (status, taints, annotations), so a
        replace of a copy read a moment earlier may be refused with 409."""
        for attempt in range(5):
            node = self.node(name)
            fn(node)
            try:
                self.core.replace_node(name, node)
                return
            except ApiException as e:
                if e.status != 409 or attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))

    def delete_node(self, name: str) -> None:
        self.core.delete_node(name)
        self.node_names.discard(name)

    def add_pod(self, pod: dict) -> dict:
        """A Pod something other than gpuq created, already bound to its node; the
        fake's ``default`` namespace becomes a namespace of the test's own without Pod
        Security enforcement (another team's workload, not gpuq's)."""
        pod = copy.deepcopy(pod)
        if pod["metadata"].get("namespace", "default") == "default":
            other = f"{self.namespace}-other"
            if other not in self.extra_namespaces:
                self.make_namespace(other, enforce="privileged")
            pod["metadata"]["namespace"] = other
        ns = pod["metadata"]["namespace"]
        pod.pop("status", None)
        created = self.core.create_namespaced_pod(ns, pod, _preload_content=False)
        return raw(created)

    def pod(self, ns: str, name: str) -> dict | None:
        try:
            return raw(self.core.read_namespaced_pod(name, ns, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def set_pod_phase(self, ns: str, name: str, phase: str, **container_state: Any) -> None:
        """Drive the Pod to ``phase`` through kwok's stages and wait until it shows:
        Running is what kwok does to every bound Pod; Succeeded / Failed are asked of
        the kubelet by the outcome annotation (Failed's ``terminated.reason`` picks
        OOMKilled or Error)."""
        if phase in ("Succeeded", "Failed"):
            reason = (container_state.get("terminated") or {}).get("reason", "Error")
            end = "Succeeded" if phase == "Succeeded" else (
                reason if reason in ("OOMKilled", "Evicted") else "Error")
            # the kubelet only ends a started container: let kwok start it first
            wait_for(lambda: (self.pod(ns, name) or {}).get("status", {}).get("phase")
                     != "Pending", what=f"pod {name} started")
            self.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {
                OUTCOME_END: end}}})
        wait_for(lambda: (self.pod(ns, name) or {}).get("status", {}).get("phase") == phase,
                 what=f"pod {ns}/{name} {phase}")

    def delete_pod(self, ns: str, name: str, grace: int | None = None) -> None:
        body = {} if grace is None else {"gracePeriodSeconds": grace}
        self.core.delete_namespaced_pod(name, ns, body=body)

    def gpuq_pods(self) -> list[dict]:
        """gpuq's Pods in the test's namespaces that are not being deleted (what the
        fake's ``gpuq_pods`` holds: a fake delete is immediate)."""
        out = []
        for ns in (self.namespace, *self.extra_namespaces):
            items = raw(self.core.list_namespaced_pod(
                ns, label_selector="app.kubernetes.io/managed-by=gpuq",
                _preload_content=False))["items"]
            out += [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return out

    def events(self, ns: str | None = None) -> list[dict]:
        return raw(self.core.list_namespaced_event(ns or self.namespace,
                                                   _preload_content=False))["items"]

    # ------------------------------------------------------------ teardown
    def cleanup(self) -> None:
        """Delete the test's namespaces (from then on nothing new is made in them, a Job's
        replacement Pod included), force-delete their Pods and Services so that the next
        test's informers never see them, remove the Nodes, and wait for the Pods and
        Nodes to be gone. The namespaces' deletion is not awaited (see the module
        docstring): :meth:`Session.check_namespaces_gone` checks it at session end."""
        spaces = (self.namespace, *self.extra_namespaces)
        for ns in spaces:
            self.core.delete_namespace(ns)
            self.s.deleted_namespaces.append(ns)
        for ns in spaces:
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            for pod in self.core.list_namespaced_pod(ns).items:  # gpuq's outcome finalizer
                if pod.metadata.finalizers:
                    try:
                        self.core.patch_namespaced_pod(pod.metadata.name, ns, {
                            "metadata": {"finalizers": None}},
                            _content_type="application/merge-patch+json")
                    except ApiException as e:
                        if e.status != 404:
                            raise
            for svc in self.core.list_namespaced_service(ns).items:
                self.core.delete_namespaced_service(svc.metadata.name, ns)
        for name in list(self.node_names):
            try:
                self.core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise
        wait_for(lambda: not any(self.core.list_namespaced_pod(ns, limit=1).items
                                 for ns in spaces), 30, f"Pods of {spaces} deleted")
        wait_for(lambda: not any(self.core.list_namespaced_service(ns, limit=1).items
                                 for ns in spaces), 30, f"Services of {spaces} deleted")
        wait_for(lambda: not ({n.metadata.name for n in self.core.list_node().items}
                              & self.node_names), 30, "nodes deleted")
        self.s.cp.check_alive()


def _require() -> bool:
    return os.environ.get("GPUQ_REQUIRE_REAL_KUBE", "") not in ("", "0")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Session]:
    try:
        find_binaries()
    except MissingBinaries as e:
        if _require():
            pytest.fail(f"GPUQ_REQUIRE_REAL_KUBE is set but {e}", pytrace=False)
        pytest.skip(f"REAL CONTROL PLANE NOT RUN: {e}")
    with running_control_plane() as cp:
        session = Session(cp)
        yield session
        session.check_namespaces_gone()


@pytest.fixture
def real_kube(control_plane: Session) -> Iterator[RealKube]:
    k = RealKube(control_plane)
    yield k
    k.cleanup()


def job_namespace(kube: Any) -> str:
    """Where gpuq puts the job Pods on ``kube`` (the fake: KubeSettings' default)."""
    return getattr(kube, "namespace", "gpuq-jobs")



class KubeletThread:
    """A simulated kubelet's loop on its own thread: :meth:`step` every ``period_s``
    until the ``with`` block ends (the fault suites' Pod drivers)."""

    period_s = 0.1

    def __init__(self, kube: Any, run_s: float = 0.6) -> None:
        self.kube = kube
        self.run_s = run_s
        self.started: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KubeletThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.step(time.monotonic())

    def step(self, now: float) -> None:
        raise NotImplementedError


class FinishingKubelet(KubeletThread):
    """The fault suite's kubelet on the real cluster: kwok starts every bound Pod; this
    asks kwok (the outcome annotation) to finish each ``run_s`` after it started, like
    tests/integration/test_k8s_fault_suite.py's FakeKubelet does on the fake. Grace
    periods are kwok's (kwok-stages.yaml)."""

    def step(self, now: float) -> None:
        for pod in self.kube.gpuq_pods():
            meta = pod["metadata"]
            if (pod.get("status") or {}).get("phase") != "Running" or OUTCOME_END in (
                    meta.get("annotations") or {}):
                continue
            start = self.started.setdefault(meta["name"], now)
            if now - start > self.run_s:
                try:
                    # on the version it read: a test that held the Pod meanwhile (its own
                    # outcome annotation) wins, and the next step looks again
                    self.kube.core.patch_namespaced_pod(meta["name"], meta["namespace"], {
                        "metadata": {"resourceVersion": meta["resourceVersion"],
                                     "annotations": {OUTCOME_END: "Succeeded"}}})
                except ApiException as e:
                    if e.status not in (404, 409):  # deleted or changed meanwhile
                        raise

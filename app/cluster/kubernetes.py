"""The real cluster: Nodes and Pods through the Kubernetes API.

* Node sync: informers (list + watch) keep a local cache of the Nodes, of gpuq's
  own Pods (by label) and of the bound, running Pods of other workloads (by label
  and field selector, slimmed to their requests and summed per node as events
  arrive, :mod:`k8s_usage`); :meth:`list_nodes` turns them into the core's nodes
  (:mod:`k8s_nodes`). Lists are paged (``list_page_size``).
* Admission: :meth:`bind` creates every replica's Pod (``schedulerName:
  gpuq``) and only then binds each with the Binding subresource (a job of one
  Pod is created bound, ``spec.nodeName``: one write); if any
  create or bind fails, every Pod of the attempt is deleted and
  :class:`BindError` raised, so the job requeues (the kube-scheduler rule:
  every reserve has an unreserve).
* Preemption / cancel: :meth:`stop` uses the Eviction API (policy/v1) with
  the grace period and falls back to delete when a disruption budget answers
  429 (a preemption decided by gpuq must happen).
* Status: Pod changes become :class:`JobStatusEvent` s (running, succeeded,
  failed, gone) for :meth:`poll_events`; :meth:`reconcile` squares the
  database with the Pods after a restart or a failover.
* Outcomes are never lost: every Pod gpuq makes carries its outcome finalizer
  (``gpuq.io/outcome``), so the apiserver keeps a Pod that finished and was then
  deleted or garbage-collected (PodGC, a user, a TTL) while gpuq could not see it
  (partition, dispatcher down) until gpuq has read it. The finalizer comes off once the
  outcome is committed (:meth:`acknowledge`) or gpuq itself stops the Pod (stop,
  orphans, undo, the finished-Pod TTL): the Job controller's tracking finalizer
  (pkg/controller/job/job_controller.go, ``batch.kubernetes.io/job-tracking``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException

from app.cluster import k8s_labels as L
from app.cluster import k8s_metrics as M
from app.cluster.interface import (
    BindError,
    BindRequest,
    BookedCheck,
    Capabilities,
    InvalidPodError,
    JobStatusEvent,
    NameTaken,
    ReconcileReport,
)
from app.cluster.k8s_client import bound_calls, pool_for, post_json
from app.cluster.k8s_devices import UnsupportedDevice, node_layer
from app.cluster.k8s_nodes import NodeView, node_views, pod_holds_resources
from app.cluster.k8s_pods import (
    build_pod,
    build_service,
    is_gang,
    job_phase,
    placement_key,
    pod_placement_key,
    rejected_on,
    restarted_reason,
    stuck_reason,
)
from app.cluster.k8s_refusals import is_permanent
from app.cluster.k8s_rejections import RejectedNodes
from app.cluster.k8s_settings import KubeSettings
from app.cluster.k8s_usage import (
    FOREIGN_PODS_FIELDS,
    FOREIGN_PODS_LABELS,
    OWN_PODS_LABELS,
    NodeUsage,
    slim_pod,
)
from app.cluster.k8s_watch import Informer
from app.cluster.workloads.client import WorkloadClient
from app.cluster.workloads.pods import WorkloadPods
from app.domain.config import GpuTypeConfig
from app.domain.from_config import gpu_type_from_config
from app.domain.pod_policy import PodPolicy, check_pod, describe
from app.domain.pod_resources import selection_refuses
from app.scheduling.model import Node, ReplicaPlacement

log = logging.getLogger(__name__)

TERMINAL = ("succeeded", "failed", "gone")
# A bind attempt stopped before the watch showed any of its Pods counts as
# draining until the watch shows them (then their own state decides) or, should
# that never happen (the Pods were created and deleted between two lists), for
# at most this long.
UNSEEN_STOPPED_S = 120.0
# A create that got no answer may still be carried out by the API server later (a
# request it holds past the client's timeout); a Pod of it that shows up this long after
# is deleted (:meth:`KubernetesCluster._delete_late_creates`).
LATE_CREATE_S = 300.0


@dataclass(slots=True)
class _Track:
    """What gpuq knows about one job's Pods: the current bind attempt and the
    last phase reported, so each change is reported once."""

    bind_id: str
    expected: int
    reported: str = "pending"
    stopped: bool = False
    seen: bool = True  # False between bind() and the watch showing its Pods
    stopped_at: float | None = None  # monotonic time of the stop (see draining_job_ids)
    # Pods made by a workload's own controller (Job, JobSet): it retries failed Pods,
    # and the workload's status, not a Pod, says when the job is over
    workload: bool = False
    ended_at: float | None = None  # monotonic time its outcome was reported (finished-Pod TTL)
    # a terminal phase was reported and is not yet committed (acknowledge): the attempt's
    # Pods keep their outcome finalizer, whoever deletes them
    outcome_pending: bool = False
    # followed from Pods this process found, not bound (the watch's guess of the current
    # attempt, corrected as more of the job's Pods show: KubernetesCluster._readopt)
    adopted: bool = False
    # where the attempt's Pods may be (the team's namespaces; a workload's own), known
    # when this process bound it: a Pod elsewhere with the job's labels is not the job's
    # (anyone who may create a Pod may write those labels); empty: not known
    namespaces: tuple[str, ...] = ()
    # the database held this attempt's capacity when this process bound it (the commit
    # comes before the bind) or when reconcile() adopted it among the active jobs: its
    # Pods need no look at the books (:meth:`KubernetesCluster.node_views`)
    vouched: bool = False

    def may_hold(self, pod: Mapping) -> bool:
        """Could ``pod`` be one of this job's, by where it is (:attr:`namespaces`)?"""
        return not self.namespaces or (
            (pod.get("metadata") or {}).get("namespace") in self.namespaces)


def _pod_key(pod: Mapping) -> str:
    """``namespace/name``: a Pod's key in :attr:`KubernetesCluster._by_job`."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def attempt_id(attempt: str) -> str:
    """The bind id of an admission: five base-36 digits of the job's revision when it
    was admitted (the same for every leader binding that admission, so their Pod names
    collide at the apiserver, 409, instead of two Pod sets running; attempts of one
    job differ unless 36**5 revisions apart)."""
    n = int(attempt) if attempt.isdigit() else int(hashlib.sha256(attempt.encode())
                                                   .hexdigest(), 16)
    n %= 36**5
    out = ""
    for _ in range(5):
        n, r = divmod(n, 36)
        out = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + out
    return out


class StaleCache(RuntimeError):
    """The informers' cache is not fit to plan on (see KubernetesCluster.health)."""


#: what a call that failed raises: the apiserver's answer, or no answer in time
CALL_ERRORS = (ApiException, urllib3.exceptions.HTTPError)
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def _created_age_s(pod: dict) -> float:
    """Seconds since the Pod was created (its creationTimestamp, RFC 3339 seconds)."""
    ts = (pod.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return 0.0
    try:
        created = dt.datetime.strptime(str(ts), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return 0.0
    return (dt.datetime.now(dt.UTC) - created).total_seconds()


def _holds_or_will_hold(pod: dict) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed")


def _told(pod: dict) -> bool:
    """Has an ended Pod nothing left to tell? A Pod gpuq made carries its outcome finalizer
    (k8s_labels.OUTCOME_FINALIZER) until its end is in the database (acknowledge) or gpuq
    stopped it; an ended Pod without it is history, whatever attempt it was. A requeued
    job's earlier attempt (evicted: Failed, kept for its logs) is the common one: adopted,
    it was reported failed once more, and a job admitted again and not yet bound spent a
    retry (or failed) on a run already counted. Not for Pods a workload's controller makes:
    they never carry the finalizer (``KubernetesCluster._not_told``)."""
    return ((pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            and L.OUTCOME_FINALIZER not in (pod["metadata"].get("finalizers") or ()))


def _current_attempt(pods: list[dict]) -> list[dict]:
    """The Pods of a job's current attempt, for :meth:`KubernetesCluster.reconcile`.

    An earlier attempt's Pods stay on the cluster after they ended (an evicted Pod is
    Failed and kept for its logs) beside the requeued attempt's: those are history, not
    half of a gang. When exactly one attempt has Pods that hold (or will hold)
    resources, it is the current one; when none has, the newest attempt is; when
    several have, all are returned and reconcile judges them an incomplete gang."""
    by_attempt: dict[str, list[dict]] = {}
    for p in pods:
        by_attempt.setdefault(p["metadata"]["labels"].get(L.BIND_ID, ""), []).append(p)
    if len(by_attempt) < 2:
        return pods
    holding = [b for b, ps in by_attempt.items() if any(_holds_or_will_hold(p) for p in ps)]
    if len(holding) == 1:
        return by_attempt[holding[0]]
    if not holding:
        newest = max(by_attempt, key=lambda b: max(
            str(p["metadata"].get("creationTimestamp") or "") for p in by_attempt[b]))
        return by_attempt[newest]
    return pods


def load_api_client(kubeconfig: str | None = None) -> kclient.ApiClient:
    """In-cluster config (the ServiceAccount) when running in a Pod, else KUBECONFIG."""
    try:
        kconfig.load_incluster_config()
    except kconfig.ConfigException:
        # read KUBECONFIG now: the client module captured it at import time
        kconfig.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    return kclient.ApiClient()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(e: ApiException) -> dict:
    try:
        return json.loads(e.body or "{}")
    except (TypeError, ValueError):
        return {}


class KubernetesCluster:
    # The dispatcher schedules on list_nodes() (live capacity and usage by
    # other Pods) rather than on the nodes table of a static/simulated cluster.
    capabilities = Capabilities(live_nodes=True, workloads=True)

    def __init__(
        self,
        api_client: kclient.ApiClient,
        gpu_types: Sequence[GpuTypeConfig],
        settings: KubeSettings | None = None,
    ) -> None:
        self.ks = settings or KubeSettings()
        self.capabilities = Capabilities(live_nodes=True, workloads=True,
                                         bind_workers=self.ks.bind_workers)
        # every call bounded in time (a hung apiserver must not block the one thread)
        api_client = bound_calls(api_client, self.ks.request_timeout_s)
        # a connection for each bind in flight, beside the informers' watches
        pool_for(api_client, self.ks.bind_workers + 8)
        self.api_client = api_client
        self.api = kclient.CoreV1Api(api_client)
        self.set_gpu_types(gpu_types)
        self._lock = threading.RLock()
        self._tracks: dict[str, _Track] = {}
        self._events: list[JobStatusEvent] = []
        # multi-replica jobs that ended: (job id, phase, message); poll_events stops the
        # surviving replicas of a failed gang and deletes the job's Service
        self._gangs_ended: list[tuple[str, str, str]] = []
        self._reported_unmatched: set[tuple[str, str]] = set()
        # (namespace, name) of Pods whose create got no answer -> until when to watch for
        # them (LATE_CREATE_S)
        self._late_creates: dict[tuple[str, str], float] = {}
        self._by_job: dict[str, dict[str, dict]] = {}  # job id -> pod key -> Pod
        self.unmatched: dict[str, str] = {}  # node -> product, from the last list_nodes
        # nodes whose kubelet refused a job's Pod: not offered to that job for a while
        self.rejected = RejectedNodes(self.ks.rejected_node_ttl_s)
        self.nodes = Informer("nodes", self.api.list_node, None, **self._informer_kw())
        # The team's Pod policy at bind time (wired by app.runtime to the catalog);
        # without it, the restricted default of the install.
        self.pod_policy_for: Callable[[str], PodPolicy | None] | None = None
        # Kubernetes-native workloads: started, stopped, their Pods bound
        self.workloads = WorkloadPods(WorkloadClient(api_client, list(self.ks.workload_kinds)))
        # gpuq's own Pods, whole (less managedFields): their outcomes are the jobs'
        self.pods = Informer(
            "pods",
            self.api.list_pod_for_all_namespaces,
            self._on_pod,
            label_selector=OWN_PODS_LABELS,
            **self._informer_kw(),
        )
        # everybody else's, only while bound and not finished, only their requests
        self.usage = NodeUsage()
        self.other_pods = Informer(
            "other-pods",
            self.api.list_pod_for_all_namespaces,
            self.usage.on_event,
            label_selector=FOREIGN_PODS_LABELS,
            field_selector=FOREIGN_PODS_FIELDS,
            transform=slim_pod,
            **self._informer_kw(),
        )

    def _informer_kw(self) -> dict[str, Any]:
        return {"timeout_s": self.ks.watch_timeout_s, "page_size": self.ks.list_page_size,
                "request_timeout_s": self.ks.request_timeout_s,
                "idle_timeout_s": self.ks.watch_idle_timeout_s}

    @classmethod
    def from_settings(
        cls,
        settings: Any = None,
        *,
        gpu_types: Sequence[GpuTypeConfig] = (),
        start: bool = True,
        pod_policy_for: Callable[[str], PodPolicy | None] | None = None,
    ) -> KubernetesCluster:
        """In-cluster config or KUBECONFIG; informers started and synced."""
        ks = KubeSettings()
        cluster = cls(load_api_client(), gpu_types, ks)
        cluster.pod_policy_for = pod_policy_for
        if start:
            cluster.start()
        return cluster

    def set_gpu_types(self, gpu_types: Sequence[GpuTypeConfig]) -> None:
        """GPU types can change at run time (REST); node sync uses the latest."""
        self.type_configs = list(gpu_types)
        self.types = {t.name: gpu_type_from_config(t) for t in self.type_configs}

    # ---------------------------------------------------------------- lifecycle
    def start(self, wait_s: float = 30.0) -> None:
        """Start the informers and wait for the first full lists."""
        for inf in self.informers:
            inf.start()
        if not all(inf.synced.wait(wait_s) for inf in self.informers):
            raise TimeoutError("Kubernetes API: initial node/pod list did not complete")

    @property
    def informers(self) -> tuple[Informer, ...]:
        return (self.nodes, self.pods, self.other_pods)

    def health(self) -> list[str]:
        """What makes the cache unfit to plan on (empty: fit): an informer that has not
        listed yet, or made no progress (list, event, bookmark, watch ended by the
        server) for ``informer_stale_s``. A pass then fails before planning and
        ``/healthz`` fails, so a dispatcher whose watches died is restarted."""
        problems = []
        now = time.monotonic()
        for inf in self.informers:
            age = inf.stale_for(now)
            if age is None:
                problems.append(f"informer {inf.name}: not listed yet")
            elif age > self.ks.informer_stale_s:
                problems.append(f"informer {inf.name}: no list, event or bookmark for "
                                f"{age:.0f} s (bound {self.ks.informer_stale_s:g} s)")
        return problems

    def sync(self) -> None:
        """One list/watch round of each informer (tests drive this by hand)."""
        for inf in self.informers:
            inf.step()

    def close(self) -> None:
        for inf in self.informers:
            inf.stop()

    # ---------------------------------------------------------------- nodes
    def node_views(self, booked: BookedCheck | None = None) -> list[NodeView]:
        """Every node's view; ``booked`` as :meth:`list_nodes` reads it."""
        pods = self.pods.items()
        own: Callable[[Mapping], bool] = self._is_own
        if booked is not None:
            with self._lock:
                unsure = {L.job_id_of(p) for p in pods
                          if pod_holds_resources(p) and self._is_own(p) and not self._vouched(p)}
            held = booked(unsure) if unsure else set()

            def own(pod: Mapping) -> bool:
                return self._is_own(pod) and (self._vouched(pod) or L.job_id_of(pod) in held)
        return node_views(self.nodes.items(), pods, self.type_configs, self.ks,
                          self.usage.by_node(), own)

    def _vouched(self, pod: Mapping) -> bool:
        """Is ``pod`` of an attempt whose capacity the database held when this process
        bound or adopted it, and still follows (not stopped)? Such a Pod is gpuq's own
        without a look at the books; the others' jobs are looked up."""
        t = self._tracks.get(L.job_id_of(pod))
        return (t is not None and t.vouched and not t.stopped
                and (pod.get("metadata") or {}).get("labels", {}).get(L.BIND_ID, "") == t.bind_id)

    def _is_own(self, pod: Mapping) -> bool:
        """A Pod with gpuq's labels is gpuq's unless it sits outside the namespaces of the
        job it names (:attr:`_Track.namespaces`): another tenant's, whose requests count
        on its node like any other workload's, and whose device annotations claim
        nothing."""
        if not L.is_gpuq_pod(pod):
            return False
        t = self._tracks.get(L.job_id_of(pod))
        return t is None or t.may_hold(pod)

    def list_nodes(self, booked: BookedCheck | None = None) -> list[Node]:
        """The nodes as the informers see them; raises :class:`StaleCache` when they
        stopped following the cluster (a pass must not plan on what may be gone).

        ``booked`` (the dispatcher passes it every pass): a Pod with gpuq's labels whose
        job holds no capacity in the database -- one left from a job that is over, or
        naming a job that never existed -- counts on its node as another workload's
        while it holds resources. Only the jobs of Pods this process cannot vouch for
        (:meth:`_vouched`: strays, stopped attempts, Pods found after a restart until
        reconcile adopts them) are looked up, so a pass reads a few ids, not the
        allocations of the whole cluster (80,000 rows at 10,000 nodes took 0.19 s).
        The reconcile stops such Pods, but only after the pass that first sees them has
        planned, and an evicted Pod holds its cards for its grace period: taken for
        gpuq's own meanwhile, its cards were in nobody's books, and a job bound onto
        them met the kubelet's device refusal."""
        problems = self.health()
        if problems:
            raise StaleCache("; ".join(problems))
        views = self.node_views(booked)
        self._report_unmatched(views)
        self._report_unoffered(views)
        return [v.node for v in views]

    def _report_unoffered(self, views: list[NodeView]) -> None:
        """A node whose device layer gpuq refuses (app/cluster/k8s_devices.py) shows why: a
        Warning Event on the Node (once per mode) and a gauge by mode."""
        counts: dict[str, int] = {}
        for v in views:
            if v.layer.offered:
                continue
            counts[v.layer.mode] = counts.get(v.layer.mode, 0) + 1
            key = (v.node.name, "layer:" + v.layer.mode)
            if key in self._reported_unmatched:
                continue
            self._reported_unmatched.add(key)
            log.warning("node %s: device layer %s, GPUs not offered", v.node.name, v.layer.mode)
            self._event("default", {"kind": "Node", "apiVersion": "v1", "name": v.node.name},
                        "GpuqUnsupportedGpuSharing",
                        f"GPUs not offered by gpuq: {v.layer.detail}")
        M.UNOFFERED_GPU_NODES.clear()
        for mode, n in counts.items():
            M.UNOFFERED_GPU_NODES.labels(mode=mode).set(n)

    def _report_unmatched(self, views: list[NodeView]) -> None:
        """A GPU product no configured type matches is an operator's problem to
        see: a Warning Event on the Node (once) and a gauge, never a silent drop."""
        self.unmatched = {v.node.name: v.unmatched_product for v in views if v.unmatched_product}
        counts: dict[str, int] = {}
        for product in self.unmatched.values():
            counts[product] = counts.get(product, 0) + 1
        M.UNMATCHED_GPU_NODES.clear()
        for product, n in counts.items():
            M.UNMATCHED_GPU_NODES.labels(product=product).set(n)
        for node, product in self.unmatched.items():
            if (node, product) in self._reported_unmatched:
                continue
            self._reported_unmatched.add((node, product))
            log.warning("node %s: GPU product %r matches no configured GPU type", node, product)
            self._event(
                "default",
                {"kind": "Node", "apiVersion": "v1", "name": node},
                "GpuqUnknownGpuProduct",
                f"GPU product {product!r} matches no gpuq GPU type; its GPUs are not offered. "
                "Add a gpu_types entry whose product pattern matches it.",
            )

    def _event(self, namespace: str, obj: dict, reason: str, message: str,
               type_: str = "Warning") -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "gpuq-", "namespace": namespace},
            "involvedObject": {**obj, "namespace": namespace} if obj["kind"] != "Node" else obj,
            "reason": reason,
            "message": message[:1000],
            "type": type_,
            "source": {"component": "gpuq"},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        try:
            # the client's hints say its model class; it serializes a dict body too
            self.api.create_namespaced_event(namespace, body, _preload_content=False)  # type: ignore[arg-type]
        except Exception as e:  # events are best effort
            log.info("could not record event %s: %s", reason, e)

    # ---------------------------------------------------------------- pods
    def _job_pods(self, job_id: str, bind_id: str | None = None) -> list[dict]:
        with self._lock:
            pods = list(self._by_job.get(job_id, {}).values())
        if bind_id is None:
            return pods
        return [p for p in pods if p["metadata"]["labels"].get(L.BIND_ID) == bind_id]

    def pod_policy(self, team: str) -> PodPolicy:
        policy = self.pod_policy_for(team) if self.pod_policy_for is not None else None
        return policy or PodPolicy(install=self.ks.install_policy())

    def bind(self, req: BindRequest) -> None:
        """Create all the job's Pods, then bind them; all or nothing.

        A job of one Pod is created bound (``spec.nodeName`` set in the create, as the
        DaemonSet controller did before it left placement to the scheduler): one API
        write and one watch event per Pod instead of a create and a Binding, which at a
        backlog of 10,000 Pods halves what the API server and etcd do for gpuq (the
        bind's cost there, measured with bench/throughput_kube.py). A gang's Pods are
        all created unbound first, so a refused create leaves none of them bound."""
        self._check_selection(req)
        bind_id = attempt_id(req.attempt) if req.attempt else uuid.uuid4().hex[:5]
        with self._lock:
            old = self._tracks.get(req.job_id)
            if old is not None and not old.stopped:
                old.stopped = True
                old.stopped_at = time.monotonic()
            self._tracks[req.job_id] = track = _Track(
                bind_id, len(req.placements), seen=False, workload=req.owner is not None,
                namespaces=(req.owner.namespace,) if req.owner is not None else (),
                vouched=True)
        if req.owner is not None:
            try:
                self.workloads.admit(req, bind_id)  # its controller makes the Pods
            except BindError:
                M.BIND_FAILURES.labels(reason="BindError").inc()
                self._undo(req.job_id, [])
                raise
            return
        policy = self.pod_policy(req.team)
        track.namespaces = policy.allowed_namespaces  # where build_pod may put them
        # one Pod: created on its node; a gang's: unbound (nobody else schedules them)
        bound_on_create = len(req.placements) == 1
        created: list[tuple[str, str]] = []
        try:
            pods = []
            for p in req.placements:
                node = self.nodes.get(p.node)
                if node is None:
                    raise BindError(f"node {p.node} is gone")
                taints = (node.get("spec") or {}).get("taints") or []
                gpu_type = self.types.get(p.gpu_type) if p.gpu_type else None
                layer = node_layer(node, gpu_type.resource_name if gpu_type else "nvidia.com/gpu")
                try:
                    pods.append(build_pod(req, p, bind_id=bind_id, gpu_type=gpu_type,
                                          node_taints=taints, ks=self.ks, policy=policy,
                                          layer=layer, bound=bound_on_create))
                except UnsupportedDevice as e:  # e.g. a share queued before it was refused
                    raise InvalidPodError(f"node {p.node}: {e}") from None
                if req.leader_epoch is not None:  # who bound it (fencing token)
                    pods[-1]["metadata"].setdefault("annotations", {})[
                        L.ANN_LEADER_EPOCH] = str(req.leader_epoch)
            # defence in depth: the finished Pods meet the team's policy of now
            for pod in pods:
                violations = check_pod(pod, policy)
                if violations:
                    raise InvalidPodError(f"refused by the Pod policy of team {req.team}: "
                                          + describe(violations))
            # 0. a gang's headless Service: stable replica hostnames for the rendezvous
            if is_gang(req) and pods:
                self._ensure_service(build_service(req, self.ks, pods[0]["metadata"]["namespace"]))
            # 1. create every Pod
            for pod in pods:
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                try:
                    self.create_pod(ns, pod)
                except ApiException as e:
                    message = str(_body(e).get("message", e.reason))
                    # the job's own refusal fails it; a passing one is held and retried
                    err = InvalidPodError if is_permanent(e.status, message) else (
                        NameTaken if e.status == 409 else BindError)
                    raise err(f"create pod {ns}/{name}: {e.status} {message}") from e
                except (TypeError, ValueError) as e:  # not JSON (nothing was sent)
                    raise InvalidPodError(f"pod {ns}/{name} is invalid: {e}") from e
                except urllib3.exceptions.HTTPError:
                    # no answer (timeout, connection reset): the server may have made it,
                    # or make it later, bound if it was created bound: the undo deletes it,
                    # and so do the passes after, should it show up late
                    created.append((ns, name))
                    with self._lock:
                        self._late_creates[(ns, name)] = time.monotonic() + LATE_CREATE_S
                    raise
                created.append((ns, name))
            # 2. bind each to its node
            for pod, p in zip([] if bound_on_create else pods, req.placements, strict=False):
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": p.node},
                }
                try:
                    # _preload_content=False: the server answers with a Status,
                    # which the generated V1Binding model cannot deserialize.
                    # the client's hints say its model class; it serializes a dict body too
                    self.api.create_namespaced_pod_binding(name, ns, binding,  # type: ignore[arg-type]
                                                           _preload_content=False)
                except ApiException as e:
                    raise BindError(
                        f"bind pod {ns}/{name} to {p.node}: {e.status} "
                        f"{_body(e).get('message', e.reason)}"
                    ) from e
        except Exception as e:
            M.BIND_FAILURES.labels(reason=type(e).__name__).inc()
            self._undo(req.job_id, created)
            if isinstance(e, BindError):
                raise
            raise BindError(f"bind {req.job_id}: {e}") from e

    def create_pod(self, namespace: str, pod: dict) -> None:
        """Create ``pod``: the dict as JSON, not through the client's Pod model
        (:func:`app.cluster.k8s_client.post_json`: a third less of gpuq's CPU per
        create); the answer (the created Pod) is read, not decoded. A field the API
        server does not know is refused (``fieldValidation=Strict``: 400, the job's own
        refusal), as the client's model refused it, never dropped."""
        post_json(self.api_client, "/api/v1/namespaces/{namespace}/pods", pod,
                  [("fieldValidation", "Strict")], namespace=namespace)

    def _ensure_service(self, svc: dict) -> None:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        try:
            # the client's hints say its model class; it serializes a dict body too
            self.api.create_namespaced_service(ns, svc, _preload_content=False)  # type: ignore[arg-type]
        except ApiException as e:
            if e.status == 409:
                return  # an earlier attempt's: same name, same selector
            message = str(_body(e).get("message", e.reason))
            err = InvalidPodError if is_permanent(e.status, message) else BindError
            raise err(f"create service {ns}/{name}: {e.status} {message}") from e

    def _delete_services(self, job_id: str) -> None:
        """Delete the job's Services (found by label, so a new leader finds them too)."""
        sel = f"{L.MANAGED_BY}={L.MANAGED_BY_VALUE},{L.JOB_ID}={L.label_value(job_id)}"
        try:
            resp = self.api.list_service_for_all_namespaces(label_selector=sel,
                                                            _preload_content=False)
            # _preload_content=False: the raw urllib3 response, not the hinted model
            items = json.loads(resp.data).get("items") or []  # type: ignore[attr-defined]
        except CALL_ERRORS as e:
            log.warning("list services of %s failed: %s", job_id, getattr(e, "status", e))
            return
        for svc in items:
            meta = svc.get("metadata") or {}
            name, namespace = meta.get("name"), meta.get("namespace")
            if not name or not namespace:
                continue  # the server names every listed object; nothing to delete by
            try:
                self.api.delete_namespaced_service(name, namespace, _preload_content=False)
            except CALL_ERRORS as e:
                if getattr(e, "status", None) != 404:
                    log.warning("delete service %s failed: %s", meta.get("name"),
                                getattr(e, "status", e))

    def _undo(self, job_id: str, created: list[tuple[str, str]]) -> None:
        with self._lock:
            t = self._tracks.get(job_id)
            if t is not None:
                t.stopped = True
                t.stopped_at = time.monotonic()
                if not created:
                    t.seen = True  # no Pod was made: nothing to wait for
        for ns, name in created:
            self._release(ns, name)  # never ran: no outcome to keep
            self._delete(ns, name, 1)

    def _release(self, ns: str, name: str) -> bool:
        """Take gpuq's outcome finalizer off a Pod (a strategic merge patch that deletes
        just that entry, as the Job controller removes its own); a Pod already gone is
        fine. False when the call failed: a later pass retries (:meth:`acknowledge`)."""
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [L.OUTCOME_FINALIZER]}}
        try:
            self.api.patch_namespaced_pod(name, ns, patch, _preload_content=False,
                                          _content_type=STRATEGIC_MERGE)
        except CALL_ERRORS as e:
            if getattr(e, "status", None) == 404:
                return True
            log.warning("remove the outcome finalizer of %s/%s: %s; the next pass retries",
                        ns, name, getattr(e, "status", e))
            return False
        return True

    def _keeps_outcome(self, pod: dict) -> bool:
        """Must ``pod`` keep its outcome finalizer? (under the lock) Yes while it belongs
        to the current attempt of a job whose end gpuq has not committed: the attempt is
        live, or its terminal phase is reported but not yet acknowledged. Pods of a
        stopped or earlier attempt, and of jobs gpuq does not follow (ended, or not
        active in the database after a reconcile), have nothing left to tell."""
        t = self._tracks.get(L.job_id_of(pod))
        if t is None or t.workload:
            return False
        if pod["metadata"].get("labels", {}).get(L.BIND_ID, "") != t.bind_id:
            return False
        return t.outcome_pending or (not t.stopped and t.reported not in TERMINAL)

    def acknowledge(self, events: Sequence[JobStatusEvent]) -> None:
        """The caller committed these events: their Pods' outcomes are in the database,
        so gpuq's finalizer comes off them (and off any Pod that no longer needs it: a
        call that failed before is retried here, every pass of the leader)."""
        with self._lock:
            for ev in events:
                t = self._tracks.get(ev.job_id)
                if t is not None and ev.phase in TERMINAL and t.reported == ev.phase:
                    t.outcome_pending = False
            loose = [
                (p["metadata"].get("namespace", self.ks.namespace), p["metadata"]["name"])
                for pods in self._by_job.values() for p in pods.values()
                if L.OUTCOME_FINALIZER in (p["metadata"].get("finalizers") or ())
                and not self._keeps_outcome(p)
            ]
        for ns, name in loose:
            self._release(ns, name)

    def _delete(self, ns: str, name: str, grace: int | None) -> bool:
        body: dict[str, str | int] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            # never 0: a zero grace period is a force delete, the object goes while the
            # processes may still hold GPU memory (an unbound Pod goes at once anyway:
            # pkg/registry/core/pod/strategy.go CheckGracefulDelete)
            body["gracePeriodSeconds"] = max(1, grace)
        try:
            # the client's hints say its model class; it serializes a dict body too
            self.api.delete_namespaced_pod(name, ns, body=body, _preload_content=False)  # type: ignore[arg-type]
        except CALL_ERRORS as e:
            if getattr(e, "status", None) == 404:
                return True
            log.warning("delete pod %s/%s failed: %s", ns, name, getattr(e, "status", e))
            return False
        M.EVICTIONS.labels(method="delete").inc()
        return True

    def stop(self, job_id: str, reason: str, grace_seconds: float = 30.0) -> None:
        """Evict the job's Pods (honouring the grace period); a 429 from a
        disruption budget falls back to delete. Idempotent."""
        with self._lock:
            t = self._tracks.get(job_id)
            if t is not None:
                if not t.stopped:
                    t.stopped_at = time.monotonic()
                t.stopped = True
            else:
                self._tracks[job_id] = _Track("", 0, stopped=True)
        if self.workloads.stop(job_id):
            return  # suspended: its controller deletes the Pods
        grace = max(1, int(grace_seconds))  # >= 1 s: 0 would be a force delete
        self._delete_services(job_id)
        for pod in self._job_pods(job_id) or self._list_job_pods(job_id):
            meta = pod.get("metadata") or {}
            ns, name = meta.get("namespace", self.ks.namespace), meta.get("name", "")
            with self._lock:
                # a Pod that ended keeps it while its end is the job's unrecorded outcome;
                # one gpuq stops now ends by gpuq's decision: nothing to read from it
                keep = self._keeps_outcome(pod) and not _holds_or_will_hold(pod)
            if L.OUTCOME_FINALIZER in (meta.get("finalizers") or ()) and not keep:
                self._release(ns, name)
            if meta.get("deletionTimestamp"):
                continue
            if not (pod.get("spec") or {}).get("nodeName"):
                self._delete(ns, name, 1)  # never started: nothing to drain
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            self._event(ns, {"kind": "Pod", "apiVersion": "v1", "name": name},
                        "GpuqStopped", reason, type_="Normal")
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
                "deleteOptions": {"gracePeriodSeconds": grace},
            }
            try:
                # the client's hints say its model class; it serializes a dict body too
                self.api.create_namespaced_pod_eviction(name, ns, eviction,  # type: ignore[arg-type]
                                                        _preload_content=False)
                M.EVICTIONS.labels(method="eviction").inc()
            except urllib3.exceptions.HTTPError as e:  # no answer in time: next pass retries
                log.warning("evict %s/%s: %s; the next pass retries", ns, name, e)
                continue
            except ApiException as e:
                if e.status == 404:
                    continue
                log.info("evict %s/%s: %s; deleting instead", ns, name, e.status)
                if self.ks.eviction_fallback_delete:
                    self._delete(ns, name, grace)

    def _list_job_pods(self, job_id: str) -> list[dict]:
        """Ask the server (the cache may not have seen the Pods yet)."""
        sel = f"{L.MANAGED_BY}={L.MANAGED_BY_VALUE},{L.JOB_ID}={L.label_value(job_id)}"
        try:
            resp = self.api.list_pod_for_all_namespaces(label_selector=sel,
                                                        _preload_content=False)
            # _preload_content=False: the raw urllib3 response, not the hinted model
            return json.loads(resp.data).get("items") or []  # type: ignore[attr-defined]
        except CALL_ERRORS as e:
            log.warning("list pods of %s failed: %s", job_id, getattr(e, "status", e))
            return []

    # ---------------------------------------------------------------- status
    def _on_pod(self, type_: str, pod: dict, prev: dict | None) -> None:
        if not L.is_gpuq_pod(pod):
            return
        labels = pod["metadata"]["labels"]
        job_id, bind_id = L.job_id_of(pod), labels.get(L.BIND_ID, "")
        key = _pod_key(pod)
        with self._lock:
            t = self._tracks.get(job_id)
            if t is not None and not t.may_hold(pod):
                # another team's Pod wearing this job's labels: never the job's (its phase
                # or its deletion would end the job, its node hold the job's place); a
                # deletion only forgets what an earlier attempt's track kept of it
                if type_ == "DELETED":
                    self._forget(job_id, key)
                elif type_ == "ADDED":
                    log.warning("pod %s has the labels of job %s but not its namespace "
                                "(%s): ignored", key, job_id, ", ".join(t.namespaces))
                return
            if type_ == "DELETED":
                self._forget(job_id, key)
            else:
                self._by_job.setdefault(job_id, {})[key] = pod
            if t is None:
                # Pods this process did not create: a previous leader's, or ours
                # before a restart. Adopt the attempt; reconcile() judges it.
                if type_ == "DELETED" or (pod["metadata"].get("deletionTimestamp")):
                    return
                if self._history(job_id, pod):
                    return  # its end is recorded: nothing to follow
                t = _Track(bind_id, int(labels.get(L.REPLICAS, "1") or 1),
                           workload=job_id in self.workloads.owners, adopted=True)
                self._tracks[job_id] = t
            elif t.adopted and not t.stopped and bind_id != t.bind_id:
                t = self._readopt(job_id, t)
            if bind_id == t.bind_id:
                t.seen = True  # even when stopped: draining_job_ids follows its Pods now
            if t.stopped or bind_id != t.bind_id or t.reported in TERMINAL:
                return
            if t.workload:  # running once a Pod runs; the end comes from the workload
                if t.reported == "pending" and any(
                    (p.get("status") or {}).get("phase") in ("Running", "Succeeded")
                    for p in self._job_pods(job_id, bind_id)
                ):
                    t.reported = "running"
                    self._events.append(JobStatusEvent(job_id, "running"))
                return
            if type_ == "DELETED":
                self._report(job_id, t, "gone",
                             f"pod {pod['metadata'].get('name')} was deleted outside gpuq")
                return
            pods = self._job_pods(job_id, bind_id)
            phase, message = job_phase(pods, t.expected)
            if phase != t.reported and phase != "pending":
                if phase == "gone":  # requeued: not straight back to a refusing kubelet
                    for p in pods:
                        node = rejected_on(p)
                        if node:
                            self.rejected.add(job_id, node)
                self._report(job_id, t, phase, message)

    def _forget(self, job_id: str, key: str) -> None:
        """Drop the Pod ``key`` (namespace/name) from the job's Pods (under the lock)."""
        self._by_job.get(job_id, {}).pop(key, None)
        if not self._by_job.get(job_id, True):
            del self._by_job[job_id]

    def _readopt(self, job_id: str, t: _Track) -> _Track:
        """A Pod of another attempt showed for a job followed from Pods found (under the
        lock): follow the job's current attempt (:func:`_current_attempt`) instead of
        whichever Pod showed first, and drop what was queued about the other one.

        A restarted gpuq lists a job's Pods in name order: an earlier attempt's Pod (evicted,
        Failed, kept for its logs) could come before the running attempt's, be adopted, and
        be reported failed; the first pass records events before reconcile judges the Pods,
        so the running job was failed (or spent a retry)."""
        pods = _current_attempt(self._not_told(job_id, self._by_job.get(job_id, {}).values()))
        bind_ids = {p["metadata"]["labels"].get(L.BIND_ID, "") for p in pods}
        if len(bind_ids) != 1 or t.bind_id in bind_ids:
            return t
        expected = max(int(p["metadata"]["labels"].get(L.REPLICAS, "1") or 1) for p in pods)
        t = self._tracks[job_id] = _Track(bind_ids.pop(), expected, workload=t.workload,
                                           adopted=True, namespaces=t.namespaces)
        self._events = [e for e in self._events if e.job_id != job_id]
        self._gangs_ended = [g for g in self._gangs_ended if g[0] != job_id]
        return t

    def _history(self, job_id: str, pod: dict) -> bool:
        """Is ``pod`` of ``job_id`` history (:func:`_told`)? Never for a job a workload's
        controller runs: its Pods never carry the finalizer."""
        return job_id not in self.workloads.owners and _told(pod)

    def _not_told(self, job_id: str, pods: Iterable[dict]) -> list[dict]:
        """The Pods of ``job_id`` that may still tell something (:meth:`_history`)."""
        return [p for p in pods if not self._history(job_id, p)]

    def _report(self, job_id: str, t: _Track, phase: str, message: str) -> None:
        """Report one change of the job's phase (under the lock). A gang that ended in
        any way but success is stopped whole: its survivors must not keep their cards
        (a disrupted replica requeues the whole gang, a failed one fails or restarts it).

        A job that ends while Pods of its attempt still hold resources (a disrupted Pod
        in its grace period, or Terminating on a lost node; a gang's survivors; a Pod
        that never started) is reported with ``pods_gone`` False and its attempt counts
        as stopped, so :meth:`draining_job_ids` holds its capacity until the Pods are
        gone: the cards are not handed to another job while a process may still use
        them."""
        t.reported = phase
        t.outcome_pending = phase in TERMINAL
        pods_gone = True
        if phase in TERMINAL:
            now = time.monotonic()
            t.ended_at = now
            if phase != "succeeded" and any(
                    _holds_or_will_hold(p) for p in self._job_pods(job_id, t.bind_id)):
                pods_gone = False
                t.stopped = True
                t.stopped_at = now
        self._events.append(JobStatusEvent(job_id, phase, message,  # type: ignore[arg-type]
                                           pods_gone=pods_gone))
        if phase in TERMINAL and t.expected > 1:
            self._gangs_ended.append((job_id, phase, message))

    def _check_stuck(self) -> list[tuple[str, str]]:
        """Jobs whose Pod cannot start (image pull, container config) past the start
        deadline, or whose container the kubelet restarts after it failed
        (:func:`restarted_reason`): reported failed with the kubelet's reason; the caller
        stops them (a workload is suspended). A workload's Pods are held to the start
        deadline too -- its controller retries a pull forever while the whole gang keeps
        its cards, which is what Kueue's ``waitForPodsReady`` ends -- but their restarts
        are the workload's own (its controller's ``backoffLimit``), not a failure."""
        out = []
        with self._lock:
            for job_id, t in self._tracks.items():
                if t.stopped or t.reported in TERMINAL:
                    continue
                for pod in self._job_pods(job_id, t.bind_id):
                    why = stuck_reason(pod)
                    restarted = None if t.workload else restarted_reason(pod)
                    if restarted:  # a run that failed, restarted over gpuq's head
                        msg = f"pod {pod['metadata'].get('name')}: {restarted}"
                    elif why and _created_age_s(pod) >= self.ks.start_deadline_s:
                        msg = (f"pod {pod['metadata'].get('name')}: {why} "
                               f"(not started after {self.ks.start_deadline_s:g} s)")
                    else:
                        continue
                    self._report(job_id, t, "failed", msg)
                    out.append((job_id, msg))
                    break
        return out

    def _collect_finished(self) -> None:
        """Delete finished Pods of ended jobs after the TTL, and forget jobs with
        nothing left on the cluster (the tracking state would otherwise grow forever)."""
        now = time.monotonic()
        ttl = self.ks.finished_pod_ttl_s
        doomed: list[tuple[str, str]] = []
        with self._lock:
            for job_id, t in list(self._tracks.items()):
                ended = t.ended_at if t.ended_at is not None else t.stopped_at
                if ended is None or now - ended < ttl or not (t.stopped or t.reported in TERMINAL):
                    continue
                pods = self._by_job.get(job_id, {})
                if not pods:
                    if t.seen or now - ended >= UNSEEN_STOPPED_S:
                        del self._tracks[job_id]
                    continue
                for p in pods.values():
                    meta = p.get("metadata") or {}
                    if (not _holds_or_will_hold(p) and not meta.get("deletionTimestamp")
                            and not self._keeps_outcome(p)):
                        doomed.append((meta.get("namespace", self.ks.namespace),
                                       meta.get("name", "")))
        for ns, name in doomed:
            self._release(ns, name)
            self._delete(ns, name, 1)

    def _check_selection(self, req: BindRequest) -> None:
        """:class:`BindError` before anything is made when a placement's node fails the
        template's node selection (:func:`selection_refuses`): its kubelet would refuse
        the Pods (a workload's controller would then spend its retries on them, the
        same reserved node each time). The node is avoided for the job a while
        (:attr:`rejected`), so the next placement looks elsewhere."""
        for p in req.placements:
            node = self.nodes.get(p.node) or {}
            why = selection_refuses(req.pod_template,
                                    (node.get("metadata") or {}).get("labels") or {})
            if why is not None:
                with self._lock:
                    self.rejected.add(req.job_id, p.node)
                M.BIND_FAILURES.labels(reason="BindError").inc()
                raise BindError(f"node {p.node} does not meet the Pod template's {why}")

    def _pod_refusal(self, team: str, pods: list[dict]) -> str | None:
        """Why the team's Pod policy of now refuses one of a workload's ``pods`` (None:
        it refuses none); what :meth:`bind` checks of the Pods gpuq builds."""
        policy = self.pod_policy(team)  # one read for the lot
        for pod in pods:
            violations = check_pod(pod, policy)
            if violations:
                return (f"pod {pod['metadata'].get('name')} is refused by the Pod policy "
                        f"of team {team}: {describe(violations)}")
        return None

    def _refuse_workload(self, job_id: str, message: str) -> None:
        """A workload job whose Pod was refused at bind: it ends failed (its workload is
        then suspended, :class:`app.dispatch.workloads.FrontDoor`)."""
        self.report_finished(job_id, "failed", message)

    def report_finished(self, job_id: str, phase: str, message: str) -> None:
        """A workload's controller says it is over (the front door reads it)."""
        with self._lock:
            t = self._tracks.get(job_id)
            if t is not None and (t.stopped or t.reported in TERMINAL):
                return
            if t is not None:
                t.reported = phase
            self._events.append(JobStatusEvent(job_id, phase, message))  # type: ignore[arg-type]

    def poll_events(self) -> list[JobStatusEvent]:
        self.workloads.bind_pending(self._job_pods, self._pod_refusal, self._refuse_workload)
        with self._lock:
            out, self._events = self._events, []
            ended, self._gangs_ended = self._gangs_ended, []
        stuck = {job_id for job_id, _msg in self._check_stuck()}
        with self._lock:
            out += self._events
            self._events = []
            ended += self._gangs_ended
            self._gangs_ended = []
        for job_id, phase, message in ended:
            if phase in ("failed", "gone"):
                # one replica failed or was disrupted: the others must not keep their
                # GPUs (whether the dispatcher requeues, restarts or fails the job)
                self.stop(job_id, f"gang stopped: {message}", grace_seconds=1)
                stuck.discard(job_id)
            else:
                self._delete_services(job_id)
        for job_id in stuck:  # its Pod never started: delete it, the cards are free
            self.stop(job_id, "could not start", grace_seconds=1)
        self._delete_late_creates()
        self._collect_finished()
        return out

    def _delete_late_creates(self) -> None:
        """Delete the Pods whose create got no answer (the bind was undone) and that the
        API server made after all, unless one is its job's current attempt: a job of
        one Pod is created bound, so such a Pod would run beside the job's next attempt."""
        now = time.monotonic()
        with self._lock:
            late = []
            for key, until in list(self._late_creates.items()):
                pod = self.pods.get(f"{key[0]}/{key[1]}")
                if pod is None:
                    if now > until:
                        del self._late_creates[key]
                    continue
                del self._late_creates[key]
                t = self._tracks.get(L.job_id_of(pod))
                current = t is not None and not t.stopped and (
                    pod["metadata"]["labels"].get(L.BIND_ID, "") == t.bind_id)
                if not current and not pod["metadata"].get("deletionTimestamp"):
                    late.append(key)
        for ns, name in late:
            log.info("pod %s/%s was created after its create timed out; deleting it", ns, name)
            self._release(ns, name)
            if not self._delete(ns, name, 1):  # the next pass tries again
                with self._lock:
                    self._late_creates[(ns, name)] = now + LATE_CREATE_S

    def forget_events(self) -> None:
        """Unlike :meth:`poll_events`, no bind of a workload's Pods, no stop of a gang
        whose replica ended or of a Pod that cannot start, no delete of finished Pods: a
        standby doing those would act beside the leader on Pods the leader owns."""
        with self._lock:
            self._events = []
            self._gangs_ended = []

    def avoided_nodes(self) -> dict[str, frozenset[str]]:
        """Job id -> nodes whose kubelet refused its Pod a moment ago (k8s_rejections)."""
        with self._lock:
            return self.rejected.current()

    def running_job_ids(self) -> set[str]:
        """Jobs that have Pods on the cluster now, finished ones included (their
        status event may not be ingested yet), plus jobs bound a moment ago
        whose Pods the watch has not shown yet: the caller must never bind a
        job twice because the cache lags."""
        with self._lock:
            out = set()
            for job_id, pods in self._by_job.items():
                t = self._tracks.get(job_id)
                if t is not None and t.stopped and not any(
                    _holds_or_will_hold(p) for p in pods.values()
                ):
                    continue  # stopped by gpuq, only finished Pods left (kept for logs)
                out.add(job_id)
            out.update(j for j, t in self._tracks.items() if not t.seen and not t.stopped)
            return out

    def draining_job_ids(self) -> set[str]:
        """Jobs with Pods of a stopped attempt that still hold (or may hold)
        resources: evicted Pods in their grace period, Pods of an earlier
        attempt, terminating Pods seen after a restart. Their capacity is not
        free until the watch shows them deleted or finished."""
        with self._lock:
            now = time.monotonic()
            out = {  # stopped before the watch showed their Pods: assume they hold
                j
                for j, t in self._tracks.items()
                if t.stopped and not t.seen and t.bind_id and t.stopped_at is not None
                and now - t.stopped_at < UNSEEN_STOPPED_S
            }
            for job_id, pods in self._by_job.items():
                t = self._tracks.get(job_id)
                for p in pods.values():
                    old = t is None or t.stopped or (
                        p["metadata"]["labels"].get(L.BIND_ID, "") != t.bind_id
                    )
                    if old and _holds_or_will_hold(p):
                        out.add(job_id)
                        break
            return out

    def live_job_ids(self) -> set[str]:
        """Jobs whose current (not stopped) attempt has Pods, or was bound a
        moment ago and the watch has not shown its Pods yet."""
        with self._lock:
            out = set()
            for job_id, t in self._tracks.items():
                if t.stopped:
                    continue
                if not t.seen or any(
                    p["metadata"]["labels"].get(L.BIND_ID, "") == t.bind_id
                    for p in self._by_job.get(job_id, {}).values()
                ):
                    out.add(job_id)
            return out

    def reconcile(
        self,
        active_job_ids: set[str],
        placements: Mapping[str, Sequence[ReplicaPlacement]] | None = None,
        grace_seconds: float = 30.0,
        owners: Mapping[str, tuple[str, str | None]] | None = None,
    ) -> ReconcileReport:
        """After a restart or failover: square the database with the Pods.

        A job's Pods are those in the namespaces it may use (``owners``: its team's, a
        workload's own) when it has any there: a Pod elsewhere with its labels is
        another tenant's (:attr:`_Track.namespaces`). Only a job whose Pods all sit
        elsewhere (its team's namespaces changed while it ran) is judged by them, so
        its running Pods are never taken for absent and the job bound twice.

        * active job with its whole gang bound -> adopted (its phase is
          reported again, also for jobs already followed, so the caller
          catches up on whatever a standby or a failed pass dropped);
        * active job without Pods, or with a gang half created/bound (the
          crash came mid-bind) -> its Pods are removed, it is ``missing`` and
          the caller requeues it;
        * Pods holding resources for a job the database does not run ->
          orphans, removed;
        * active job whose Pods sit elsewhere than ``placements[job]`` says
          (it was moved, and the process died before stopping the old Pods)
          -> the old Pods are evicted with the grace period, the job is
          ``missing`` and its new placement gets bound.
        """
        report = ReconcileReport()
        by_job: dict[str, list[dict]] = {}
        for p in self.pods.items():
            meta = p.get("metadata") or {}
            # a Pod being deleted counts while its outcome finalizer holds it: it ended
            # (or is ending) while gpuq could not see it, and its phase says how
            if L.is_gpuq_pod(p) and (not meta.get("deletionTimestamp")
                                     or L.OUTCOME_FINALIZER in (meta.get("finalizers") or ())):
                by_job.setdefault(L.job_id_of(p), []).append(p)
        for jid, pods in by_job.items():
            if jid not in active_job_ids and any(
                pod_holds_resources(p) or not (p.get("spec") or {}).get("nodeName") for p in pods
            ):
                report.orphans.add(jid)
                self.stop(jid, "orphan: gpuq's database does not run this job", 0)
        where = self._namespaces_of(owners or {})
        for job_id in active_job_ids:
            mine = by_job.get(job_id, [])
            allowed = where.get(job_id)
            if allowed:
                inside = [p for p in mine if p["metadata"].get("namespace") in allowed]
                if inside and len(inside) < len(mine):
                    # the watch adopted the job before this judgement and may have
                    # reported what another tenant's Pod did: drop that; the phase of the
                    # job's own Pods is reported below
                    with self._lock:
                        self._events = [e for e in self._events if e.job_id != job_id]
                        self._gangs_ended = [g for g in self._gangs_ended
                                             if g[0] != job_id]
                        for p in mine:
                            if p["metadata"].get("namespace") not in allowed:
                                self._forget(job_id, _pod_key(p))
                mine = inside or mine
            pods = _current_attempt(self._not_told(job_id, mine))
            bind_ids = {p["metadata"]["labels"].get(L.BIND_ID, "") for p in pods}
            expected = max((int(p["metadata"]["labels"].get(L.REPLICAS, "1")) for p in pods),
                           default=0)
            whole = (
                pods
                and len(bind_ids) == 1
                and len(pods) >= expected
                and all((p.get("spec") or {}).get("nodeName") for p in pods)
            )
            if not whole:
                if pods:
                    self.stop(job_id, "incomplete gang after restart; requeued", 0)
                    self._void_running(job_id)
                report.missing.add(job_id)
                continue
            want = (placements or {}).get(job_id)
            if want is not None and {pod_placement_key(p) for p in pods} != {
                placement_key(x) for x in want
            }:
                self.stop(job_id, "pods of an earlier placement (moved); rebinding", grace_seconds)
                self._void_running(job_id)
                report.missing.add(job_id)
                continue
            report.adopted.add(job_id)
            bind_id = bind_ids.pop()
            phase, message = job_phase(pods, expected)
            with self._lock:
                t = self._tracks.get(job_id)
                if t is not None and t.bind_id == bind_id and not t.stopped:
                    t.reported = phase
                else:
                    t = self._tracks[job_id] = _Track(bind_id, expected, reported=phase)
                t.vouched = True  # among the jobs the database runs
                # from now on the watch takes only Pods where the adopted ones are
                t.namespaces = tuple(sorted({p["metadata"].get("namespace", "") for p in pods}))
                t.outcome_pending = phase in TERMINAL
                # Reported again even when already followed: an earlier report may
                # have been polled by a standby or by a pass whose transaction failed
                # (unless that report is still waiting to be polled).
                holding = phase in ("failed", "gone") and any(
                    _holds_or_will_hold(p) for p in pods)
                if holding:  # its capacity waits for the Pods (see _report)
                    t = self._tracks[job_id]
                    t.stopped, t.stopped_at = True, time.monotonic()
                if phase != "pending" and not any(
                    e.job_id == job_id and e.phase == phase for e in self._events
                ):
                    self._events.append(JobStatusEvent(job_id, phase, message,
                                                       pods_gone=not holding))
        return report

    def _namespaces_of(
        self, owners: Mapping[str, tuple[str, str | None]]
    ) -> dict[str, tuple[str, ...]]:
        """Job id -> the namespaces its Pods may be in: a workload's own, else its team's
        (one policy read per team)."""
        by_team: dict[str, tuple[str, ...]] = {}
        out: dict[str, tuple[str, ...]] = {}
        for job_id, (team, workload_ns) in owners.items():
            if workload_ns is not None:
                out[job_id] = (workload_ns,)
                continue
            if team not in by_team:
                by_team[team] = self.pod_policy(team).allowed_namespaces
            out[job_id] = by_team[team]
        return out

    def _void_running(self, job_id: str) -> None:
        """Drop the queued "running" reports of a job whose Pods :meth:`reconcile` has
        just stopped as not its current attempt. The watch adopts Pods it finds before
        reconcile judges them and reports them running; an event carries only the job,
        so applied after a move it marked the new, unbound admission running, and the
        reconcile step then requeued it as lost. How such Pods ended is still reported."""
        with self._lock:
            self._events = [e for e in self._events
                            if not (e.job_id == job_id and e.phase == "running")]

    def __enter__(self) -> KubernetesCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self.close()

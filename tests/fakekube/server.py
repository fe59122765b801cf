"""A threaded fake kube-apiserver speaking the real JSON shapes.

Enough of the core/v1 API for gpuq's backend, driven by the official
``kubernetes`` client over real HTTP:

* ``GET /api/v1/nodes`` and ``GET /api/v1/pods`` (lists with
  ``metadata.resourceVersion``, ``labelSelector``, ``fieldSelector`` and pages of
  ``limit`` with ``continue`` tokens, as tests/fakekube/selectors.py models them;
  ``?watch=1`` streams ``{"type", "object"}`` lines from ``resourceVersion``,
  filtered by the same selectors, ADDED for everything when none is given;
  a compacted version gets an ``ERROR`` event carrying a 410 ``Status``).
* ``POST /api/v1/namespaces/{ns}/pods`` (409 ``AlreadyExists``),
  ``GET``/``DELETE`` one Pod (404 ``NotFound``).
* ``POST .../pods/{name}/binding`` (409 ``Conflict`` when already bound,
  injectable failures; then the node's kubelet admits the Pod or fails it
  ``OutOf<resource>`` / ``NodeAffinity``: tests/fakekube/kubelet.py),
  ``POST .../pods/{name}/eviction`` (policy/v1; 429
  ``TooManyRequests`` for Pods a "disruption budget" protects).
* ``POST /api/v1/namespaces/{ns}/events``.
* Services: ``POST /api/v1/namespaces/{ns}/services`` (409 ``AlreadyExists``; a
  headless one needs ``clusterIP: None``), ``GET /api/v1/services`` and
  ``GET /api/v1/namespaces/{ns}/services`` (``labelSelector``), ``DELETE`` one.

Test code changes the world through methods (``add_node``, ``set_pod_phase``,
``delete_pod``, ``compact``) which emit the watch events a real server would.

What a real control plane cannot produce on demand stays here: :meth:`FakeKube.hang`
makes matching requests wait without an answer (a half-open connection, a proxy or
load balancer whose backend died, an apiserver whose etcd stopped answering: the
apiserver bounds its own handlers, k8s.io/apiserver pkg/server/filters/timeout.go,
at --request-timeout 60 s except watches, but nothing bounds a dead path to it), until
:meth:`FakeKube.unhang`; :meth:`FakeKube.slow` answers matching requests late.

The fake keeps a clock of its own (:meth:`FakeKube.now`, moved on by
:meth:`FakeKube.advance`), so what the control plane does after minutes happens when a
test says: the kubelet's crash-loop back-off (tests/fakekube/containers.py), and the
node lifecycle, taint eviction and PodGC controllers (tests/fakekube/controllers.py)
run on every :meth:`FakeKube.advance`. The watch cache keeps a window of recent events
(``watch_cache_size``); a watch from before it is answered 410 Gone.
"""

from __future__ import annotations

import calendar
import contextlib
import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakekube import containers, controllers, kubelet
from tests.fakekube.selectors import (
    Matcher,
    SelectorError,
    decode_continue,
    encode_continue,
    parse_labels,
    watch_event,
)
from tests.fakekube.validation import invalid

POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/(binding|eviction))?$")
EVENTS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/events$")
SERVICE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$")


def status(code: int, reason: str, message: str, **details: Any) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def _epoch(ts: str | None) -> float:
    """An RFC 3339 stamp (seconds) as seconds since the epoch; 0 when absent."""
    if not ts:
        return 0.0
    return calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))


def _match_labels(selector: str | None, labels: dict[str, str]) -> bool:
    """``labelSelector`` over one object's labels (selectors.py has the grammar)."""
    return parse_labels(selector)(labels)


class FakeKube:
    """The state plus the HTTP server. ``url`` is set once started."""

    def __init__(self, watch_timeout_s: float = 5.0) -> None:
        self.cond = threading.Condition()
        self.rv = 0
        self.compacted_rv = 0
        self.nodes: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.services: dict[tuple[str, str], dict] = {}
        # (rv, kind, type, object, the object as the previous event left it)
        self.log: list[tuple[int, str, str, dict, dict | None]] = []
        self._last: dict[tuple[str, str | None, str], dict] = {}
        # list snapshots that continue tokens read from: (kind, rv) -> [(key, object)]
        self._snapshots: dict[tuple[str, int], list[tuple[str, dict]]] = {}
        self.k8s_events: list[dict] = []
        self.requests: list[tuple[str, str]] = []
        # (ns, pod, node) of every Pod bound: by pods/binding or created with spec.nodeName
        self.bindings: list[tuple[str, str, str]] = []
        self.evictions: list[tuple[str, str, int | None]] = []
        self.deletes: list[tuple[str, str, int | None]] = []
        self.bind_failures: dict[str, tuple[int, str]] = {}  # pod name -> (code, reason)
        self.create_failures: dict[str, tuple[int, str]] = {}
        # admission plug-ins a Pod create passes (tests/fakekube/admission.py): the first
        # that answers refuses it, with the upstream code and message
        self.admission: list[Callable[[str, dict], tuple[int, dict] | None]] = []
        # ServiceAccounts (namespace, name) besides each namespace's ``default``
        self.service_accounts: set[tuple[str, str]] = set()
        self.pdb_protected: set[str] = set()  # pod names whose eviction answers 429
        # the node's kubelet admits each bound Pod (tests/fakekube/kubelet.py): a Pod
        # that does not fit ends Failed OutOf<resource> / NodeAffinity
        self.kubelet_admission = True
        self.rejected: list[tuple[str, str, str]] = []  # (ns, pod, reason)
        # True: an eviction/delete with a grace period > 0 only marks the Pod
        # terminating (deletionTimestamp) like a kubelet draining it; the test
        # removes it with finish_terminating(). False: removed at once.
        self.honour_grace = False
        self.watch_timeout_s = watch_timeout_s
        self.gone_as_http = False  # answer a too-old watch with HTTP 410, not an ERROR event
        self.list_calls: dict[str, int] = {"nodes": 0, "pods": 0}
        # more APIs (tests/fakekube/workloads.py): (method, path, query, body) -> answer
        # or None when the path is not theirs; asked before the core routes
        self.extensions: list[Callable[[str, str, dict, dict], tuple[int, dict] | None]] = []
        self._hang: list[re.Pattern[str]] = []  # "METHOD path?query" that get no answer
        self._slow: list[tuple[re.Pattern[str], float]] = []  # ... answered this late
        # the fake's clock: wall time plus what advance() added
        self.clock_offset = 0.0
        # kube-controller-manager's knobs (tests/fakekube/controllers.py)
        self.node_monitor_grace_s = controllers.NODE_MONITOR_GRACE_S
        self.default_toleration_s = controllers.DEFAULT_TOLERATION_S
        self.podgc_quarantine_s = controllers.PODGC_QUARANTINE_S
        self._heartbeat: dict[str, float] = {}  # node -> last status its kubelet posted
        self._lost: set[str] = set()  # nodes whose kubelet stopped posting status
        self._gone_nodes: dict[str, float] = {}  # deleted node -> when PodGC first saw it
        self._restart_at: dict[tuple[str, str, str], float] = {}  # crash-loop restarts due
        # the watch cache's window (cacher/watch_cache.go: capacity, events per resource);
        # None keeps every event (only compact() expires history)
        self.watch_cache_size: int | None = None
        self.gone_answers = 0  # watches answered 410 Gone (either cause)
        # seconds between the watch cache's bookmarks to a watcher (cacher.go
        # bookmarkFrequency: about a minute); one always ends a stream at its deadline
        self.bookmark_every_s = 60.0
        self._closing = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ------------------------------------------------------------ lifecycle
    def start(self) -> str:
        fake = self

        class Handler(_Handler):
            kube = fake

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # stop()'s shutdown waits for the serving loop to look again: at socketserver's
        # default of every 0.5 s, each test's fake cost a quarter second on average
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        with self.cond:
            self._closing = True
            self.cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeKube:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ world edits
    def _emit(self, kind: str, type_: str, obj: dict) -> None:
        """Caller holds the lock. A Pod about to be removed that still has finalizers
        stays (k8s.io/apiserver pkg/registry/generic/registry/store.go: Delete removes
        an object only when its finalizers are empty; otherwise it sets
        deletionTimestamp and deletionGracePeriodSeconds 0, and the update that empties
        them removes it, :meth:`patch_pod`): every way the fake removes a Pod goes
        through here, so every one honours them."""
        if kind == "pods" and type_ == "DELETED" and obj["metadata"].get("finalizers"):
            meta = obj["metadata"]
            meta.setdefault("deletionTimestamp",
                            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            meta["deletionGracePeriodSeconds"] = 0
            self.pods[(meta["namespace"], meta["name"])] = obj
            type_ = "MODIFIED"
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (kind, obj["metadata"].get("namespace"), obj["metadata"].get("name"))
        now = copy.deepcopy(obj)
        prev = self._last.pop(key, None) if type_ == "DELETED" else self._last.get(key)
        if type_ != "DELETED":
            self._last[key] = now
        self.log.append((self.rv, kind, type_, now, prev))
        self.cond.notify_all()

    @staticmethod
    def _stamp(obj: dict, namespace: str | None = None) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if namespace is not None:
            meta["namespace"] = namespace
        return obj

    def now(self) -> float:
        """The fake's clock (seconds since the epoch)."""
        return time.time() + self.clock_offset

    def advance(self, seconds: float = 0.0) -> None:
        """Move the clock on and let the kubelet and the controllers act on what is due."""
        with self.cond:
            self.clock_offset += seconds
            self._kubelet_restarts()
            self._node_lifecycle()
            self._taint_eviction()
            self._podgc()

    def add_node(self, node: dict) -> None:
        with self.cond:
            node = self._stamp(copy.deepcopy(node))
            node.setdefault("kind", "Node")
            node.setdefault("apiVersion", "v1")
            name = node["metadata"]["name"]
            type_ = "MODIFIED" if name in self.nodes else "ADDED"
            self.nodes[name] = node
            self._emit("nodes", type_, node)

    def update_node(self, name: str, fn: Callable[[dict], None]) -> None:
        with self.cond:
            node = self.nodes[name]
            fn(node)
            self._emit("nodes", "MODIFIED", node)

    def delete_node(self, name: str) -> None:
        with self.cond:
            node = self.nodes.pop(name)
            self._lost.discard(name)
            self._gone_nodes[name] = self.now()  # PodGC's quarantine starts
            self._emit("nodes", "DELETED", node)

    def lose_node(self, name: str) -> None:
        """The node's kubelet stops posting status (the machine died, or its network):
        the node lifecycle controller notices after ``node_monitor_grace_s``
        (tests/fakekube/controllers.py); nothing on the node changes its Pods any more."""
        with self.cond:
            self._lost.add(name)
            self._heartbeat[name] = self.now()  # the last status it posted

    def recover_node(self, name: str) -> None:
        """The kubelet posts status again: Ready, untainted; it ends the Pods that were
        deleted meanwhile (exit 143, Failed, then the object goes) and keeps the rest."""
        with self.cond:
            self._lost.discard(name)
            self._heartbeat[name] = self.now()
            node = self.nodes[name]
            controllers.mark_ready(node, self.now())
            self._emit("nodes", "MODIFIED", node)
            for key, pod in list(self.pods.items()):
                if pod["spec"].get("nodeName") == name and pod["metadata"].get(
                        "deletionTimestamp"):
                    self._kubelet_stop(key)

    def _kubelet_stop(self, key: tuple[str, str]) -> None:
        """The kubelet ends a deleted Pod: containers stopped (exit 143), phase Failed
        (pkg/kubelet/status/status_manager.go: the terminal phase is written before the
        final delete), then the object goes. Caller holds the lock."""
        pod = self.pods[key]
        if pod["status"].get("phase") not in ("Succeeded", "Failed"):
            containers.stop_all(pod, self.now())
            self._emit("pods", "MODIFIED", pod)
        self._emit("pods", "DELETED", self.pods.pop(key))

    def _node_lifecycle(self) -> None:
        """Caller holds the lock (tests/fakekube/controllers.py, node lifecycle)."""
        now = self.now()
        for name in sorted(self._lost):
            node = self.nodes.get(name)
            if node is None or now - self._heartbeat.get(name, now) < self.node_monitor_grace_s:
                continue
            # when the controller, running every --node-monitor-period, noticed
            noticed = min(now, self._heartbeat.get(name, now) + self.node_monitor_grace_s)
            if controllers.mark_unknown(node, noticed):
                self._emit("nodes", "MODIFIED", node)
            for pod in self.pods.values():
                if pod["spec"].get("nodeName") == name and pod["status"].get("phase") not in (
                        "Succeeded", "Failed") and controllers.mark_pod_not_ready(pod, now):
                    self._emit("pods", "MODIFIED", pod)

    def _taint_eviction(self) -> None:
        """Caller holds the lock (tests/fakekube/controllers.py, taint eviction)."""
        now = self.now()
        for key, pod in list(self.pods.items()):
            node = self.nodes.get(pod["spec"].get("nodeName") or "")
            if node is None or pod["metadata"].get("deletionTimestamp"):
                continue
            due = controllers.eviction_due(pod, (node.get("spec") or {}).get("taints") or [],
                                           _epoch)
            if due is None or due > now:
                continue
            evicted = controllers.taint_evicted(pod, now)
            self.pods[key] = evicted
            self._emit("pods", "MODIFIED", evicted)
            if node["metadata"]["name"] not in self._lost:
                self._kubelet_stop(key)  # a kubelet is there to end it

    def _podgc(self) -> None:
        """Caller holds the lock (tests/fakekube/controllers.py, PodGC gcOrphaned)."""
        now = self.now()
        for key, pod in list(self.pods.items()):
            node = pod["spec"].get("nodeName")
            if not node or node in self.nodes:
                continue
            first = self._gone_nodes.setdefault(node, now)
            if now - first < self.podgc_quarantine_s:
                continue
            failed = controllers.podgc_orphaned(pod, now)
            self.pods[key] = failed
            self._emit("pods", "MODIFIED", failed)
            self._emit("pods", "DELETED", self.pods.pop(key))  # grace period 0

    def crash(self, ns: str, name: str, exit_code: int = 1, reason: str = "Error",
              container: str | None = None) -> None:
        """A container of the running Pod exits (``exit_code`` 137 with reason
        ``OOMKilled``: the kernel's OOM killer). The kubelet ends the Pod or restarts the
        container after its crash-loop back-off, per the Pod's restartPolicy
        (tests/fakekube/containers.py); :meth:`advance` performs due restarts."""
        with self.cond:
            pod = self.pods[(ns, name)]
            c = container or pod["spec"]["containers"][0]["name"]
            if not pod["status"].get("containerStatuses"):
                containers.start(pod, self.now())
            due = containers.exit_container(pod, c, exit_code, reason, self.now())
            if due is not None:
                self._restart_at[(ns, name, c)] = due
            self._emit("pods", "MODIFIED", pod)

    def _kubelet_restarts(self) -> None:
        """Caller holds the lock: containers whose crash-loop back-off is over run again."""
        now = self.now()
        for key, due in list(self._restart_at.items()):
            if due > now:
                continue
            del self._restart_at[key]
            pod = self.pods.get(key[:2])
            if pod is None or pod["spec"].get("nodeName") in self._lost:
                continue  # no kubelet there to restart it
            containers.restart_container(pod, key[2], now)
            self._emit("pods", "MODIFIED", pod)

    def add_pod(self, pod: dict) -> dict:
        """A Pod that something other than gpuq created (already bound)."""
        with self.cond:
            ns = pod.get("metadata", {}).get("namespace", "default")
            pod = self._stamp(copy.deepcopy(pod), ns)
            pod.setdefault("kind", "Pod")
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("status", {}).setdefault("phase", "Running")
            self.pods[(ns, pod["metadata"]["name"])] = pod
            self._emit("pods", "ADDED", pod)
            return copy.deepcopy(pod)

    def set_pod_phase(self, ns: str, name: str, phase: str, **container_state: Any) -> None:
        with self.cond:
            pod = self.pods[(ns, name)]
            pod["status"]["phase"] = phase
            if container_state:
                pod["status"]["containerStatuses"] = [{"name": "main", "state": container_state}]
            self._emit("pods", "MODIFIED", pod)

    def disrupt(self, ns: str, name: str, reason: str = "DeletionByTaintManager",
                *, keep_terminating: bool = False) -> None:
        """A graceful deletion gpuq did not ask for, ended by the kubelet, as a real
        cluster does it since 1.27: the ``DisruptionTarget`` condition first (its reason:
        ``EvictionByEvictionAPI`` pkg/registry/core/pod/storage/eviction.go,
        ``DeletionByTaintManager`` pkg/controller/tainteviction/taint_eviction.go,
        ``PreemptionByScheduler`` pkg/scheduler/framework/preemption/preemption.go,
        ``DeletionByPodGC`` pkg/controller/podgc/gc_controller.go), then the kubelet's
        stop, phase Failed with exit 143 (pkg/kubelet/kubelet.go: a Pod deleted while
        running ends in a terminal phase before the object goes), then DELETED.
        ``keep_terminating``: only the first step; the Pod stays Terminating (phase
        Running: its processes still hold the node's devices for the grace period) until
        :meth:`finish_terminating`."""
        with self.cond:
            pod = self.pods[(ns, name)]
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            pod["status"].setdefault("conditions", []).append(
                {"type": "DisruptionTarget", "status": "True", "reason": reason,
                 "message": f"{reason}: the pod is being deleted", "lastTransitionTime": now})
            pod["metadata"]["deletionTimestamp"] = now
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            self._emit("pods", "MODIFIED", pod)
            if keep_terminating:
                return
            pod["status"]["phase"] = "Failed"
            pod["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {
                "exitCode": 143, "reason": "Error"}}}]
            self._emit("pods", "MODIFIED", pod)
            self._emit("pods", "DELETED", self.pods.pop((ns, name)))

    def exceed_deadline(self, ns: str, name: str) -> None:
        """The kubelet ends a Pod past its ``activeDeadlineSeconds``
        (pkg/kubelet/active_deadline.go): phase Failed, reason ``DeadlineExceeded``, its
        containers killed; no ``DisruptionTarget`` condition (not a disruption)."""
        with self.cond:
            pod = self.pods[(ns, name)]
            assert pod["spec"].get("activeDeadlineSeconds"), "no deadline to exceed"
            pod["status"]["phase"] = "Failed"
            pod["status"]["reason"] = "DeadlineExceeded"
            pod["status"]["message"] = (
                "Pod was active on the node longer than the specified deadline")
            pod["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {
                "exitCode": 137, "reason": "Error"}}}]
            self._emit("pods", "MODIFIED", pod)

    def evict_for_pressure(self, ns: str, name: str) -> None:
        """Node-pressure eviction by the kubelet (pkg/kubelet/eviction/eviction_manager.go):
        phase Failed, reason ``Evicted``, ``DisruptionTarget`` ``TerminationByKubelet``;
        the object stays until something deletes it."""
        with self.cond:
            pod = self.pods[(ns, name)]
            pod["status"]["phase"] = "Failed"
            pod["status"]["reason"] = "Evicted"
            pod["status"]["message"] = "The node was low on resource: memory."
            pod["status"].setdefault("conditions", []).append(
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                 "message": "The node was low on resource: memory."})
            self._emit("pods", "MODIFIED", pod)

    def delete_pod(self, ns: str, name: str) -> None:
        with self.cond:
            pod = self.pods.pop((ns, name))
            self._emit("pods", "DELETED", pod)

    def hang(self, pattern: str) -> None:
        """Requests whose ``"METHOD path?query"`` matches ``pattern`` (re.search) get
        no answer (the connection stays open, silent) until :meth:`unhang`; a watch
        already streaming goes silent too."""
        with self.cond:
            self._hang.append(re.compile(pattern))
            self.cond.notify_all()

    def unhang(self) -> None:
        with self.cond:
            self._hang.clear()
            self._slow.clear()
            self.cond.notify_all()

    def slow(self, pattern: str, delay_s: float) -> None:
        """Requests whose ``"METHOD path?query"`` matches ``pattern`` are answered only
        after ``delay_s`` (an overloaded apiserver or etcd, a slow admission webhook: the
        answer comes, late); a watch's stream starts that late. Cleared by :meth:`unhang`."""
        with self.cond:
            self._slow.append((re.compile(pattern), delay_s))

    def delay_for(self, request: str) -> float:
        with self.cond:
            return max((d for p, d in self._slow if p.search(request)), default=0.0)

    def hung(self, request: str) -> bool:
        with self.cond:
            return any(p.search(request) for p in self._hang)

    def wait_unhung(self, request: str) -> None:
        """Hold a matching request until unhang() or shutdown."""
        with self.cond:
            while not self._closing and any(p.search(request) for p in self._hang):
                self.cond.wait(0.2)

    def compact(self) -> None:
        """Forget history: watches from any version seen so far get 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self.rv += 1  # versions handed out before are now too old
            self.cond.notify_all()

    def gpuq_pods(self) -> list[dict]:
        with self.cond:
            return [
                copy.deepcopy(p)
                for p in self.pods.values()
                if p["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "gpuq"
            ]

    # ------------------------------------------------------------ API verbs
    def list(self, kind: str, selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None, cont: str | None = None,
             namespace: str | None = None) -> dict:
        """A list as the apiserver answers it (selectors.py: selectors, pages);
        raises SelectorError (400) or ListExpired (410)."""
        match = Matcher(kind, selector, field_selector)
        with self.cond:
            self.list_calls[kind] = self.list_calls.get(kind, 0) + 1
            if cont:
                rv, start = decode_continue(cont)
                snap = self._snapshots.get((kind, rv))
                if snap is None or rv <= self.compacted_rv:
                    raise ListExpired(rv)
            else:
                rv, start = self.rv, ""
                src = self.nodes if kind == "nodes" else self.pods
                snap = sorted(((o["metadata"].get("namespace", "") + "/"
                                + o["metadata"]["name"]).lstrip("/"), copy.deepcopy(o))
                              for o in src.values())
                if limit:
                    self._snapshots[(kind, rv)] = snap
                    while len(self._snapshots) > 8:  # the oldest are "compacted"
                        del self._snapshots[next(iter(self._snapshots))]
        items, next_key = [], None
        for key, obj in snap:
            if key < start:
                continue
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                continue
            if not match(obj):
                continue
            if limit and len(items) == limit:
                next_key = key
                break
            items.append(copy.deepcopy(obj) if cont or limit else obj)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if next_key is not None:
            meta["continue"] = encode_continue(rv, next_key)
        return {
            "kind": "NodeList" if kind == "nodes" else "PodList",
            "apiVersion": "v1",
            "metadata": meta,
            "items": items,
        }

    def create_pod(self, ns: str, body: dict) -> tuple[int, dict]:
        name = body.get("metadata", {}).get("name")
        if not name:
            return 422, status(422, "Invalid", "metadata.name: Required value")
        problem = invalid(body)
        if problem:  # pkg/apis/core/validation/validation.go ValidatePodCreate
            return 422, status(422, "Invalid", f'Pod "{name}" is invalid: {problem}',
                               name=name, kind="Pod")
        with self.cond:
            if name in self.create_failures:
                code, reason = self.create_failures[name]
                return code, status(code, reason, f"injected failure creating {name}")
            no_account = controllers.missing_service_account(ns, body, self.service_accounts)
            if no_account is not None:  # the ServiceAccount plug-in's Admit
                return 403, status(403, "Forbidden",
                                   f'pods "{name}" is forbidden: {no_account}',
                                   name=name, kind="pods")
            for plugin in self.admission:
                refused = plugin(ns, body)
                if refused is not None:
                    return refused
            if (ns, name) in self.pods:
                return 409, status(
                    409, "AlreadyExists", f'pods "{name}" already exists', name=name, kind="pods"
                )
            pod = self._stamp(copy.deepcopy(body), ns)
            pod["kind"], pod["apiVersion"] = "Pod", "v1"
            pod.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            # the DefaultTolerationSeconds and ServiceAccount admission plug-ins
            # (tests/fakekube/controllers.py)
            controllers.default_tolerations(pod, self.default_toleration_s)
            controllers.service_account(pod)
            target = pod["spec"].get("nodeName")
            if target and name in self.bind_failures:  # created bound: the bind refused
                code, reason = self.bind_failures[name]
                return code, status(code, reason, f"injected failure binding {name}")
            pod["status"] = {"phase": "Pending"}
            self.pods[(ns, name)] = pod
            self._emit("pods", "ADDED", pod)
            if target:  # created bound (spec.nodeName): the node's kubelet admits it
                self.bindings.append((ns, name, target))
                self._kubelet_admit(ns, name, pod)
            return 201, copy.deepcopy(pod)

    def create_service(self, ns: str, body: dict) -> tuple[int, dict]:
        name = body.get("metadata", {}).get("name")
        problem = invalid(body) if name else "metadata.name: Required value"
        if problem:
            return 422, status(422, "Invalid", f'Service "{name}" is invalid: {problem}')
        with self.cond:
            if (ns, name) in self.services:
                return 409, status(
                    409, "AlreadyExists", f'services "{name}" already exists', name=name
                )
            svc = self._stamp(copy.deepcopy(body), ns)
            svc["kind"], svc["apiVersion"] = "Service", "v1"
            self.services[(ns, name)] = svc
            return 201, copy.deepcopy(svc)

    def list_services(self, ns: str | None, selector: str | None) -> dict:
        with self.cond:
            items = [
                copy.deepcopy(s)
                for (sns, _), s in self.services.items()
                if (ns is None or sns == ns)
                and _match_labels(selector, s["metadata"].get("labels", {}))
            ]
            return {"kind": "ServiceList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def delete_service(self, ns: str, name: str) -> tuple[int, dict]:
        with self.cond:
            svc = self.services.pop((ns, name), None)
            if svc is None:
                return 404, status(404, "NotFound", f'services "{name}" not found', name=name)
            return 200, status(200, "", "", name=name)

    def bind(self, ns: str, name: str, body: dict) -> tuple[int, dict]:
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found', name=name)
            if name in self.bind_failures:
                code, reason = self.bind_failures[name]
                return code, status(code, reason, f"injected failure binding {name}")
            target = (body.get("target") or {}).get("name")
            if body.get("kind") != "Binding" or not target or invalid(body):
                return 400, status(400, "BadRequest", "expected a Binding with a target")
            if pod["metadata"].get("deletionTimestamp"):
                # pkg/registry/core/pod/storage/storage.go BindingREST.setPodNodeAndMetadata
                return 409, status(409, "Conflict", f"Operation cannot be fulfilled on "
                                   f'pods/binding "{name}": pod {name} is being deleted, '
                                   "cannot be assigned to a host")
            if pod["spec"].get("nodeName"):
                return 409, status(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is "
                    f"already assigned to node \"{pod['spec']['nodeName']}\"",
                )
            pod["spec"]["nodeName"] = target
            self.bindings.append((ns, name, target))
            self._emit("pods", "MODIFIED", pod)
            self._kubelet_admit(ns, name, pod)
            return 201, status(201, "", "", name=name)

    def _kubelet_admit(self, ns: str, name: str, pod: dict) -> None:
        """The kubelet of the Pod's node admits it, or rejects it (the Pod fails;
        tests/fakekube/kubelet.py). Under ``cond``."""
        node = self.nodes.get(pod["spec"]["nodeName"])
        if self.kubelet_admission and node is not None:
            refused = kubelet.admit(node, pod, [p for k, p in self.pods.items()
                                                if k != (ns, name)])
            if refused is not None:
                pod["status"] = {"phase": "Failed", "reason": refused[0],
                                 "message": refused[1]}
                self.rejected.append((ns, name, refused[0]))
                self._emit("pods", "MODIFIED", pod)

    def patch_pod(self, ns: str, name: str, body: dict, content_type: str) -> tuple[int, dict]:
        """PATCH a Pod's metadata: labels and annotations (maps, merged) and finalizers
        (a JSON merge patch replaces the list; a strategic merge patch may instead
        delete entries with ``$deleteFromPrimitiveList/finalizers``,
        k8s.io/apimachinery pkg/util/strategicpatch/patch.go), the metadata a client may
        change on a Pod (pkg/apis/core/validation ValidatePodUpdate). A Pod being
        deleted whose finalizers become empty is removed then (store.go Update,
        ``shouldDeleteDuringUpdate``)."""
        mime = content_type.split(";")[0].strip()
        if mime not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return 415, status(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - {mime}")
        meta_patch = body.get("metadata") or {}
        drop = meta_patch.get("$deleteFromPrimitiveList/finalizers") if mime.startswith(
            "application/strategic") else None
        allowed = {"labels", "annotations", "finalizers"}
        if drop is not None:
            allowed.add("$deleteFromPrimitiveList/finalizers")
        if set(body) - {"metadata"} or set(meta_patch) - allowed:
            return 422, status(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: '
                               "pod updates may not change fields other than metadata here")
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found', name=name)
            patched = copy.deepcopy(pod)
            meta = patched["metadata"]
            for field in ("labels", "annotations"):
                if field in meta_patch:
                    merged = dict(meta.get(field) or {})
                    for k, v in (meta_patch[field] or {}).items():
                        if v is None:
                            merged.pop(k, None)
                        else:
                            merged[k] = v
                    meta[field] = merged
            if "finalizers" in meta_patch:
                meta["finalizers"] = list(meta_patch["finalizers"] or [])
            if drop is not None:
                meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f not in drop]
            if not meta.get("finalizers"):
                meta.pop("finalizers", None)
            # an update of the Pod validates its metadata and spec (the status is the
            # kubelet's, written through pods/status)
            problem = invalid({k: v for k, v in patched.items() if k != "status"})
            if problem:
                return 422, status(422, "Invalid", f'Pod "{name}" is invalid: {problem}')
            self.pods[(ns, name)] = patched
            if (meta.get("deletionTimestamp") and not meta.get("finalizers")
                    and meta.get("deletionGracePeriodSeconds") == 0):
                self._emit("pods", "DELETED", self.pods.pop((ns, name)))
            else:
                self._emit("pods", "MODIFIED", patched)
            return 200, copy.deepcopy(patched)

    def evict(self, ns: str, name: str, body: dict) -> tuple[int, dict]:
        with self.cond:
            if (ns, name) not in self.pods:
                return 404, status(404, "NotFound", f'pods "{name}" not found', name=name)
            if (body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1"
                    or invalid(body)):
                return 400, status(400, "BadRequest", "expected a policy/v1 Eviction")
            if name in self.pdb_protected:
                return 429, status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )
            grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
            self.evictions.append((ns, name, grace))
            self._remove(ns, name, grace)
            return 201, status(201, "", "", name=name)

    def delete(self, ns: str, name: str, body: dict) -> tuple[int, dict]:
        with self.cond:
            if (ns, name) not in self.pods:
                return 404, status(404, "NotFound", f'pods "{name}" not found', name=name)
            grace = (body or {}).get("gracePeriodSeconds")
            self.deletes.append((ns, name, grace))
            pod = self.pods[(ns, name)]
            self._remove(ns, name, grace)
            return 200, copy.deepcopy(pod)

    def _remove(self, ns: str, name: str, grace: int | None) -> None:
        """Caller holds the lock."""
        pod = self.pods[(ns, name)]
        if self.honour_grace and (grace is None or grace > 0) and pod["spec"].get("nodeName"):
            if not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
                )
                pod["metadata"]["deletionGracePeriodSeconds"] = 30 if grace is None else grace
                self._emit("pods", "MODIFIED", pod)
            return
        self.pods.pop((ns, name))
        self._emit("pods", "DELETED", pod)

    def terminating(self) -> list[tuple[str, str]]:
        with self.cond:
            return [k for k, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]

    def finish_terminating(self) -> list[tuple[str, str]]:
        """The grace periods are over: every terminating Pod is deleted, a running one
        after its kubelet stopped it (Failed, exit 143: :meth:`_kubelet_stop`); none on a
        lost node (no kubelet there to end it)."""
        with self.cond:
            done = [k for k, p in self.pods.items() if p["metadata"].get("deletionTimestamp")
                    and p["spec"].get("nodeName") not in self._lost]
            for k in done:
                if self.pods[k]["spec"].get("nodeName"):
                    self._kubelet_stop(k)
                else:
                    self._emit("pods", "DELETED", self.pods.pop(k))
            return done

    def watch_events(self, kind: str, since: str | None, selector: str | None, handler: Any,
                     timeout_s: float, field_selector: str | None = None,
                     bookmarks: bool = False) -> None:
        """Stream events newer than ``since`` until the timeout or shutdown, filtered by
        the selectors the way the watch cache filters them (selectors.watch_event).
        With ``bookmarks`` (allowWatchBookmarks), a BOOKMARK carrying the current
        resourceVersion ends the stream at its deadline, as the watch cache sends one
        right before a watcher's deadline (k8s.io/apiserver pkg/storage/cacher/
        cache_watcher.go nextBookmarkTime; also about every minute, bookmarkFrequency),
        so a client resumes from there even when nothing it watches changed."""
        deadline = time.monotonic() + timeout_s
        match = Matcher(kind, selector, field_selector)
        with self.cond:
            if since in (None, "", "0"):
                src = self.nodes.values() if kind == "nodes" else self.pods.values()
                initial = [copy.deepcopy(o) for o in src]
                pos = self.rv
                for o in initial:
                    if match(o):
                        handler.send_event("ADDED", o)
            else:
                pos = int(since)
                expired = self.expired(kind, pos)
                if expired:
                    handler.send_event("ERROR", status(410, "Expired", expired))
                    return
        last_bookmark = time.monotonic()
        while True:
            if self._hang and handler.hung():
                handler.wait_unhung()  # silent, the connection open, until unhang()
                return
            with self.cond:
                while (
                    not self._closing
                    and time.monotonic() < deadline
                    and not self._has_after(kind, pos)
                    and not (self._hang and handler.hung())
                    and not (bookmarks and time.monotonic() - last_bookmark
                             >= self.bookmark_every_s)
                ):
                    self.cond.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                if self._hang and handler.hung():
                    continue
                if self._closing:
                    return
                # a bookmark carries a version the watcher has every event up to: the
                # current one, unless events arrived that it has not been sent yet (then
                # the last one it was sent; they go to the next watch). At the current one
                # those events were skipped for good (cache_watcher.go sends a bookmark
                # only in the order of its events)
                bookmark = {"kind": "Node" if kind == "nodes" else "Pod", "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(
                                pos if self._has_after(kind, pos) else self.rv)}}
                if time.monotonic() >= deadline:
                    if bookmarks:
                        handler.send_event("BOOKMARK", bookmark)
                    return
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_every_s \
                        and not self._has_after(kind, pos):
                    last_bookmark = time.monotonic()
                    pos = self.rv
                    if not handler.send_event("BOOKMARK", bookmark):
                        return
                    continue
                batch = [(rv, t, o, p) for rv, k, t, o, p in self.log if rv > pos and k == kind]
            for rv, t, o, p in batch:
                pos = rv
                sent = watch_event(t, o, p, match)
                if sent is not None and not handler.send_event(sent, o):
                    return

    def expired(self, kind: str, rv: int) -> str | None:
        """Why a watch from ``rv`` is answered 410 Gone, or None: history compacted
        (:meth:`compact`, etcd's compaction), or ``rv`` older than the watch cache's
        window of the last ``watch_cache_size`` events of ``kind`` (k8s.io/apiserver
        pkg/storage/cacher/watch_cache.go getAllEventsSinceLocked: "too old resource
        version: <rv> (<oldest - 1>)")."""
        with self.cond:
            if rv <= self.compacted_rv:
                self.gone_answers += 1
                return f"too old resource version: {rv} ({self.compacted_rv + 1})"
            if self.watch_cache_size is None:
                return None
            rvs = [r for r, k, _t, _o, _p in self.log if k == kind]
            if len(rvs) <= self.watch_cache_size:
                return None
            oldest = rvs[-self.watch_cache_size]
            if rv < oldest - 1:
                self.gone_answers += 1
                return f"too old resource version: {rv} ({oldest - 1})"
            return None

    def _has_after(self, kind: str, pos: int) -> bool:
        return any(rv > pos and k == kind for rv, k, _t, _o, _p in self.log)


class ListExpired(Exception):
    """A continue token whose snapshot is gone (etcd compacted it): 410."""

    def __init__(self, rv: int) -> None:
        super().__init__(rv)
        self.rv = rv


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up on a watch is normal


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"  # watches are chunked, like the real server's

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def hung(self) -> bool:
        return self.kube.hung(f"{self.command} {self.path}")

    def wait_unhung(self) -> None:
        self.kube.wait_unhung(f"{self.command} {self.path}")

    def _hold(self) -> None:
        """A request FakeKube.hang() matches gets no answer until unhang(); one
        FakeKube.slow() matches waits its delay first."""
        if self.kube._slow:
            delay = self.kube.delay_for(f"{self.command} {self.path}")
            if delay:
                time.sleep(delay)
        if self.kube._hang and self.hung():
            self.wait_unhung()

    def _hold_slow(self) -> None:
        """A watch FakeKube.slow() matches starts its stream that late (a hang is
        applied inside the stream: FakeKube.watch_events)."""
        delay = self.kube.delay_for(f"{self.command} {self.path}") if self.kube._slow else 0
        if delay:
            time.sleep(delay)

    # -------------------------------------------------------------- helpers
    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        return json.loads(self.rfile.read(n) or b"{}")

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_event(self, type_: str, obj: dict) -> bool:
        try:
            line = (json.dumps({"type": type_, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            return True
        except OSError:
            return False

    def _extension(self, method: str, body: dict | None = None) -> bool:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for ext in self.kube.extensions:
            got = ext(method, url.path, q, body or {})
            if got is not None:
                self._send(*got)
                return True
        return False

    # -------------------------------------------------------------- verbs
    def do_PATCH(self) -> None:
        self._hold()
        self.kube.requests.append(("PATCH", self.path))
        body = self._body()
        if self._extension("PATCH", body):
            return
        m = POD_PATH.match(urlparse(self.path).path)
        if m and m.group(2) and not m.group(3):
            self._send(*self.kube.patch_pod(m.group(1), m.group(2), body,
                                            self.headers.get("Content-Type", "")))
            return
        self._send(405, status(405, "MethodNotAllowed", f"PATCH {self.path}"))

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if q.get("watch"):
            self._hold_slow()
        else:
            self._hold()
        self.kube.requests.append(("GET", self.path))
        if self._extension("GET"):
            return
        kind = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}.get(url.path)
        sm = SERVICE_PATH.match(url.path)
        if url.path == "/api/v1/services" or (sm and not sm.group(2)):
            ns = sm.group(1) if sm else None
            self._send(200, self.kube.list_services(ns, q.get("labelSelector")))
            return
        if kind is None:
            m = POD_PATH.match(url.path)
            if m and not m.group(3):
                ns, name = m.group(1), m.group(2)
                if name:
                    pod = self.kube.pods.get((ns, name))
                    if pod is None:
                        self._send(404, status(404, "NotFound", f'pods "{name}" not found'))
                    else:
                        self._send(200, copy.deepcopy(pod))
                    return
                self._list("pods", q, namespace=ns)
                return
            self._send(404, status(404, "NotFound", f"no route {url.path}"))
            return
        if q.get("watch") in ("1", "true", "True"):
            since = q.get("resourceVersion")
            try:  # a bad selector is a 400 before the stream starts
                Matcher(kind, q.get("labelSelector"), q.get("fieldSelector"))
            except SelectorError as e:
                self._send(400, status(400, "BadRequest", str(e)))
                return
            expired = (self.kube.expired(kind, int(since))
                       if self.kube.gone_as_http and since and since != "0" else None)
            if expired:
                self._send(410, status(410, "Expired", expired))
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            timeout = min(float(q.get("timeoutSeconds", self.kube.watch_timeout_s)),
                          self.kube.watch_timeout_s)
            self.kube.watch_events(kind, since, q.get("labelSelector"), self, timeout,
                                   field_selector=q.get("fieldSelector"),
                                   bookmarks=q.get("allowWatchBookmarks") in ("true", "1"))
            with contextlib.suppress(OSError):
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
            return
        self._list(kind, q)

    def _list(self, kind: str, q: dict[str, str], namespace: str | None = None) -> None:
        rv = q.get("resourceVersion")
        if q.get("resourceVersionMatch") == "Exact" and rv and rv.isdigit() and int(
                rv) <= self.kube.compacted_rv:
            # an exact list is read from etcd at that revision (k8s.io/apiserver
            # pkg/storage/etcd3/store.go GetList): a compacted one is 410 Expired
            self._send(410, status(410, "Expired", f"too old resource version: {rv} "
                                                   f"({self.kube.compacted_rv + 1})"))
            return
        try:
            limit = int(q["limit"]) if q.get("limit") else None
            self._send(200, self.kube.list(kind, q.get("labelSelector"), q.get("fieldSelector"),
                                           limit, q.get("continue"), namespace))
        except SelectorError as e:
            self._send(400, status(400, "BadRequest", str(e)))
        except ValueError as e:
            self._send(400, status(400, "BadRequest", f"limit: {e}"))
        except ListExpired:
            # etcd3/store.go: the snapshot of a continue token was compacted
            self._send(410, status(
                410, "Expired", "The provided continue parameter is too old to display a "
                "consistent list result. You can start a new list without the continue "
                "parameter."))

    def do_POST(self) -> None:
        url = urlparse(self.path)
        body = self._body()
        self._hold()
        self.kube.requests.append(("POST", self.path))
        if self._extension("POST", body):
            return
        m = EVENTS_PATH.match(url.path)
        if m:
            body.setdefault("metadata", {})["namespace"] = m.group(1)
            problem = invalid(body)
            if problem:
                self._send(422, status(422, "Invalid", f"Event is invalid: {problem}"))
                return
            self.kube.k8s_events.append(body)
            self._send(201, body)
            return
        sm = SERVICE_PATH.match(url.path)
        if sm and not sm.group(2):
            self._send(*self.kube.create_service(sm.group(1), body))
            return
        m = POD_PATH.match(url.path)
        if not m:
            self._send(404, status(404, "NotFound", f"no route {url.path}"))
            return
        ns, name, sub = m.groups()
        if name is None:
            self._send(*self.kube.create_pod(ns, body))
        elif sub == "binding":
            self._send(*self.kube.bind(ns, name, body))
        elif sub == "eviction":
            self._send(*self.kube.evict(ns, name, body))
        else:
            self._send(405, status(405, "MethodNotAllowed", "POST not allowed"))

    def do_DELETE(self) -> None:
        url = urlparse(self.path)
        body = self._body()
        self._hold()
        self.kube.requests.append(("DELETE", self.path))
        if self._extension("DELETE", body):
            return
        sm = SERVICE_PATH.match(url.path)
        if sm and sm.group(2):
            self._send(*self.kube.delete_service(sm.group(1), sm.group(2)))
            return
        m = POD_PATH.match(url.path)
        if not m or not m.group(2) or m.group(3):
            self._send(404, status(404, "NotFound", f"no route {url.path}"))
            return
        self._send(*self.kube.delete(m.group(1), m.group(2), body))

"""Pods bound per second on a real control plane: kube-scheduler beside gpuq.

One run starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(tests/realkube/control_plane.py, the same harness the real-cluster tests use), creates
``--nodes`` kwok Nodes with 8 GPUs each labelled as GPU Feature Discovery labels an
A100-80GB node, then measures, on the same Nodes one after the other:

- ``kube-scheduler``: its default profile (schedulerName default-scheduler). The scheduler
  is stopped (SIGSTOP) while the backlog of ``--pods`` one-GPU Pods is created, then
  resumed; Pods/s = backlog / (resume -> last Pod bound). Its client rate limit is raised
  (``--kube-api-qps``, as an operator tuning for throughput would; the default 50 QPS
  would cap it at 50 binds/s) unless ``--scheduler-default-qps``.
- ``gpuq``: the same backlog submitted to gpuq's store (4 teams, fair sharing on, as
  configured below) before the dispatcher starts; the dispatcher (app/dispatch) creates
  each Pod and binds it; Pods/s = backlog / (first pass -> last Pod bound). With
  ``--gangs`` also that many 8-Pod gangs (one GPU per Pod), gangs/s. Once per
  ``--bind-workers`` value (GPUQ_K8S_BIND_WORKERS; 1 binds one job after another, as
  the dispatcher did before parallel binds).

Each gpuq phase runs in a process of its own (``--phase``, this file run with the
``app`` package of a tree): this tree's, and with ``--baseline-tree PATH`` first that
tree's (a checkout of the old commit, e.g. ``git worktree add /tmp/gpuq-old main``), so
old and new code run on the same control plane and Nodes in one run. ``--profile N``
profiles each gpuq phase (cProfile; binds in the pass's own thread only with one bind
worker) and prints its N costliest functions.

Bound times come from one Pod watch per phase (spec.nodeName first seen). The control
plane's own CPU seconds per phase (from /proc of each process) are printed beside.
Needs the binaries (``make kube-bin``) and TEST_DATABASE_URL (a PostgreSQL server).

    nice -n 10 .venv/bin/python -m bench.throughput_kube --nodes 200 --pods 2000
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from app import runtime
from app.clock import utcnow
from app.cluster.k8s_client import bound_calls
from app.cluster.k8s_watch import check_status
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.store.db import make_engine, make_session_factory
from app.store.jobs import submit_jobs
from app.store.node_rows import gpu_type_configs
from tests.fakekube.db import fresh_database
from tests.fakekube.fixtures import elector, make_cluster
from tests.realkube.control_plane import KWOK_NODE_LABEL, running_control_plane
from tests.realkube.fixtures import RealKube, Session, api_client, wait_for

#: the bench's own calls (not gpuq's) go through gpuq's bound_calls, which reads every
#: answer but a watch's: an unread raw answer (``_preload_content=False``) keeps its
#: connection, so each call opened and handshook a new one (the cleanup of 10,000 Pods
#: took minutes of TLS handshakes, py-spy); 120 s outlasts the API server's own 60 s
CALL_TIMEOUT_S = 120
GPUS_PER_NODE = 8  # --gpus-per-node: a backlog larger than 8 x nodes needs more per node
TEAMS = ("nlp", "vision", "speech", "recsys")
#: the restricted Pod Security profile's container fields (the job namespace enforces it)
SC = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def config(total_gpus: int) -> str:
    """One pool of A100s, four teams sharing it (fair share decides between them)."""
    teams = "\n".join(f"  - {{name: {t}, pool: training, quota_units: {10 * total_gpus}}}"
                      for t in TEAMS)
    return f"""
gpu_types:
  - {{name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}}
pools:
  - {{name: training, gpu_types: [a100-80g], guaranteed: {{a100-80g: {total_gpus}}}}}
teams:
{teams}
"""


def gfd_node(name: str, gpus: int = GPUS_PER_NODE) -> dict:
    """A kwok Node as GPU Feature Discovery labels a ``gpus`` x A100-80GB machine."""
    cap = {"cpu": "128", "memory": "1024Gi", "pods": "250", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {
        KWOK_NODE_LABEL: "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.count": str(gpus)}},
        "status": {"capacity": cap, "allocatable": cap}}


class BindWatch:
    """The time each Pod of ``namespace`` was first seen bound: a list, then a watch
    resumed from the last version seen (bookmarks included). On 410 Gone (the version
    left the API server's watch cache or etcd compacted it) it lists again and watches
    from the list's version, as client-go's reflector does
    (staging/src/k8s.io/client-go/tools/cache/reflector.go); repeating the watch from
    the same version would be answered 410 forever and the phase would never end. A
    Pod first seen bound in a relist gets the relist's time (an upper bound)."""

    def __init__(self, core: Any, namespace: str, *, watch_s: int = 5,
                 start: bool = True) -> None:
        self.core, self.namespace, self.watch_s = core, namespace, watch_s
        self._in_ns = f"metadata.namespace={namespace}"  # one field selector: the fake
        # API server of the tests serves list and watch of all namespaces' Pods
        self.bound: dict[str, float] = {}
        self.rv: str | None = None  # None: list first (at the start, after a 410)
        self.relists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        if start:
            self._thread.start()

    def _seen(self, obj: dict, at: float) -> None:
        if (obj.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(obj["metadata"]["name"], at)

    def relist(self) -> None:
        """Every Pod of the namespace, in pages; the version to watch from."""
        token, rv = None, None
        while True:
            resp = check_status(self.core.list_pod_for_all_namespaces(
                field_selector=self._in_ns, limit=500, _preload_content=False,
                _request_timeout=60,
                **({"_continue": token} if token else {})))
            data = json.loads(resp.data)
            at = time.monotonic()
            for o in data.get("items") or []:
                self._seen(o, at)
            rv = rv or data["metadata"]["resourceVersion"]
            token = data["metadata"].get("continue")
            if not token:
                break
        self.rv = rv
        self.relists += 1

    def watch_once(self) -> None:
        """One watch from :attr:`rv`, until the server ends it; 410 Gone drops the
        version so the next step relists."""
        try:
            resp = check_status(self.core.list_pod_for_all_namespaces(
                field_selector=self._in_ns, watch=True, resource_version=self.rv,
                timeout_seconds=self.watch_s, allow_watch_bookmarks=True,
                _preload_content=False, _request_timeout=(10, self.watch_s + 30)))
        except ApiException as e:
            if e.status == 410:
                self.rv = None
                return
            raise
        try:
            for line in iter_resp_lines(resp):
                if not line.strip():
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        self.rv = None
                        return
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                self.rv = (obj.get("metadata") or {}).get("resourceVersion") or self.rv
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    self._seen(obj, time.monotonic())
        finally:
            resp.release_conn()

    def step(self) -> None:
        if self.rv is None:
            self.relist()
        else:
            self.watch_once()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as e:  # the API server busy or a connection reset: go on
                print(f"bind watch: {e!r}; retrying", file=sys.stderr, flush=True)
                self._stop.wait(1)

    def stop(self) -> None:
        self._stop.set()

    def pod_bytes(self) -> int:
        """The size of one bound Pod as the API server stores and serves it (JSON, with
        its defaults, status and managedFields): every component that reads or writes a
        Pod (etcd, the watch fan-out, kwok's stages, the informers) pays per byte."""
        name = next(iter(self.bound))
        return len(self.core.read_namespaced_pod(name, self.namespace,
                                                 _preload_content=False).data)


def settle(cpu: Callable[[], dict[str, float]], *, idle_cores: float = 0.15,
           busy_cores: float = 0.6, step_s: float = 2.0, max_s: float = 120.0) -> float:
    """Wait until the control plane is quiet and return the seconds waited: its
    processes together under ``idle_cores`` over ``step_s``, or under ``busy_cores`` and
    no longer falling (kwok's Node heartbeats keep 1,000 Nodes' control plane from ever
    being idle); at most ``max_s``.
    Creating 10,000 Pods leaves the API server, etcd, kwok and the controllers minutes
    of watch events to digest; a phase that started at once was charged for them (one
    run: kube-scheduler 127 Pods/s, another 192, the API server 56 and 38 CPU s in the
    window), so every phase starts from a quiet control plane."""
    t0 = time.monotonic()
    before, last = cpu(), float("inf")
    while time.monotonic() - t0 < max_s:
        time.sleep(step_s)
        now = cpu()
        rate = (sum(now.values()) - sum(before.values())) / step_s
        if rate < idle_cores or (rate < busy_cores and rate >= 0.9 * last):
            break
        before, last = now, rate
    return time.monotonic() - t0


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    return ", ".join(f"{k} {after[k] - before.get(k, 0):.1f}" for k in after)


def bench_kube_scheduler(s: Session, kube: RealKube, n: int, round_: int = 1
                         ) -> tuple[float, str]:
    ns = f"bench-default-{round_}"  # a namespace per round: the last one's may be going
    kube.make_namespace(ns)
    watch = BindWatch(s.core, ns)
    sched = s.cp.procs["kube-scheduler"]
    sched.send_signal(signal.SIGSTOP)

    def create(i: int) -> None:
        s.core.create_namespaced_pod(ns, {"metadata": {"name": f"p-{i}"}, "spec": {
            "schedulerName": "default-scheduler", "containers": [{
                "name": "c", "image": "x", "securityContext": SC, "resources": {
                    "requests": {"nvidia.com/gpu": "1", "cpu": "100m"},
                    "limits": {"nvidia.com/gpu": "1"}}}]}}, _preload_content=False)

    try:
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(create, range(n)))
        waited = settle(s.cp.cpu_seconds)
    finally:
        sched.send_signal(signal.SIGCONT)
    cpu0, t0 = s.cp.cpu_seconds(), time.monotonic()
    wait_for(lambda: len(watch.bound) >= n, 60 + n / 10, "kube-scheduler bound all")
    rate = n / (max(watch.bound.values()) - t0)
    cost = cpu_delta(cpu0, s.cp.cpu_seconds())
    watch.stop()
    cost += f" (Pod {watch.pod_bytes():,} B)"
    print(f"kube-scheduler: {rate:.1f} Pods/s; {cost} (settled {waited:.0f} s)",
          flush=True)  # before the cleanup
    delete_pods(s.core, ns)
    return rate, cost


def delete_pods(core: Any, ns: str) -> None:
    """Delete every Pod of ``ns`` and wait until they are gone. Deleting a collection of
    10,000 takes longer than the API server's request timeout (60 s): it answers 504 and
    stops there (5,549 of 10,000 left at 1,000 nodes), so the call is repeated."""

    def gone() -> bool:
        if not core.list_namespaced_pod(ns, limit=1).items:
            return True
        # gpuq's Pods carry its outcome finalizer, which only a running gpuq takes off: a
        # phase's Pods would stay Terminating, holding their GPUs, for the next phase
        held = [p.metadata.name for p in core.list_namespaced_pod(ns).items
                if p.metadata.finalizers]
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda name: core.patch_namespaced_pod(
                name, ns, {"metadata": {"finalizers": None}}, _preload_content=False), held))
        try:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 504:
                raise
        except urllib3.exceptions.HTTPError:
            # at 5,000 nodes the API server dropped the connection of this delete (no
            # answer, "RemoteDisconnected") and the run ended before printing its rate
            pass
        return False
    wait_for(gone, 900, "pods deleted")


#: gpuq's threads, by name prefix, as :func:`thread_cpu` groups them
THREAD_GROUPS = (("pass", "MainThread"), ("binds", "gpuq-bind"), ("informers", "informer-"),
                 ("bench watch", "bench-watch"))


def thread_cpu() -> dict[str, float]:
    """User + system CPU seconds of this process's live threads so far, summed per
    :data:`THREAD_GROUPS` entry (``other`` for the rest): where gpuq's CPU goes, and the
    bench's own Pod watch, which runs in gpuq's process, set apart."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        group = next((g for g, prefix in THREAD_GROUPS if t.name.startswith(prefix)), "other")
        with contextlib.suppress(OSError, TypeError):
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1]
            f = fields.split()
            out[group] = out.get(group, 0.0) + (int(f[11]) + int(f[12])) / tick
    return out


class GcTime:
    """CPU seconds the garbage collector took in this process (every thread, every
    generation), from ``gc.callbacks``: a collection's cost lands on whatever code
    allocated when it ran, so a profile shows it nowhere of its own."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0: float = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            g = info["generation"]
            self.seconds[g] += time.thread_time() - self._t0
            self.count[g] += 1


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process so far (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
    return out


class _Kube:
    """What tests.fakekube.fixtures.make_cluster reads of a cluster: gpuq's client and
    its settings (the job namespace)."""

    def __init__(self, p: dict) -> None:
        self.p = p
        self.settings = {"namespace": p["namespace"]}

    def gpuq_api_client(self) -> client.ApiClient:
        return api_client(self.p["url"], self.p["token"], Path(self.p["ca_file"]))


def gpuq_phase(p: dict) -> dict:
    """One gpuq phase (run by ``--phase`` in a process of its own, so the ``gpuq`` on
    its path is the tree's under test): the backlog in a fresh store, the dispatcher
    passing until every Pod is bound; the rate and the control plane's CPU seconds."""
    n, replicas, nodes = p["count"], p["replicas"], p["nodes"]
    db = fresh_database(config(nodes * p["gpus_per_node"]))
    url = next(db)
    engine = make_engine(url, pool_size=6)
    sf = make_session_factory(engine)
    body = {"duration_estimate_s": 3600, "resources": {"gpus": 1, "gpu_types": ["a100-80g"]},
            **({"replicas": replicas} if replicas > 1 else {})}
    specs = [JobSpec.model_validate({**body, "name": f"j{i}", "team": TEAMS[i % len(TEAMS)]})
             for i in range(n)]
    with sf() as ses:
        for i in range(0, n, 500):
            submit_jobs(ses, specs[i:i + 500], now=utcnow())
        ses.commit()
        types = gpu_type_configs(ses)
    # the collector as a dispatcher's process sets it (app/runtime.py), where the tree has it
    getattr(runtime, "tune_collector", lambda: None)()
    kube = _Kube(p)
    # binds in flight at once (GPUQ_K8S_BIND_WORKERS; 1: the dispatcher before parallel
    # binds), as the setting gives them: its connection pool is sized from it too (given
    # only the workers, a pool of the default's size closed and handshook a connection
    # for each bind beyond it); the capabilities too, for a tree that ignores the setting
    c = make_cluster(kube, bind_workers=p["workers"])
    c.capabilities = replace(c.capabilities, bind_workers=p["workers"])
    c.set_gpu_types(types)
    c.start(wait_s=300)
    wait_for(lambda: len(c.list_nodes()) == nodes, 300, "gpuq sees the nodes")
    admin = client.CoreV1Api(bound_calls(
        api_client(p["url"], p["admin_token"], Path(p["ca_file"])), CALL_TIMEOUT_S))
    watch = BindWatch(admin, p["namespace"])
    d = Dispatcher(sf, c, elector=elector(url), grace_seconds=2)
    prof = cProfile.Profile() if p["profile"] else None
    passes = 0

    def one_pass() -> bool:
        nonlocal passes
        passes += 1
        d.run_once()
        return len(watch.bound) >= n * replicas

    waited = settle(lambda: cpu_of(p["pids"]))
    cpu0, t0 = cpu_of(p["pids"]), time.monotonic()
    own0, threads0 = resource.getrusage(resource.RUSAGE_SELF), thread_cpu()
    gct = GcTime()
    try:
        if prof is not None:
            prof.enable()
        wait_for(one_pass, 120 + n * replicas / 5, "gpuq bound all")
        if prof is not None:
            prof.disable()
        took = max(watch.bound.values()) - t0
        cpu1 = cpu_of(p["pids"])
        own1, threads1 = resource.getrusage(resource.RUSAGE_SELF), thread_cpu()
        # gpuq's own process (every thread: the pass, the binds, the informers)
        cpu1["gpuq"] = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
        pod_bytes = watch.pod_bytes()
    finally:
        watch.stop()
        d.elector.release()
        c.close()
        engine.dispose()
        delete_pods(admin, p["namespace"])
        # a gang's headless Service (gpuq deletes it when the job ends, which no job here
        # does): 500 per gang phase were left behind, and the next phases' Pods were matched
        # against every one of them by the endpoint controllers
        for svc in admin.list_namespaced_service(p["namespace"]).items:
            admin.delete_namespaced_service(svc.metadata.name, p["namespace"])
        db.close()
    out: dict[str, Any] = {"rate": n / took, "passes": passes, "settled_s": waited,
                           "pod_bytes": pod_bytes,
                           "cpu": {k: cpu1[k] - cpu0.get(k, 0) for k in cpu1},
                           "threads": {k: v - threads0.get(k, 0) for k, v in threads1.items()},
                           "gc": {"seconds": gct.seconds, "count": gct.count}}
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(p["profile"])
        out["profile"] = buf.getvalue()
    return out


def bench_gpuq(s: Session, kube: RealKube, tree: Path, **phase: Any) -> tuple[float, str]:
    """:func:`gpuq_phase` in a process running ``tree``'s app package (this file's own
    code for the phase, so the phase is the same for every tree)."""
    cp = s.cp
    p = {**phase, "url": cp.url, "token": s.gpuq_token, "admin_token": cp.admin_token,
         "ca_file": str(cp.ca_file), "namespace": kube.namespace,
         "pids": {k: v.pid for k, v in cp.procs.items()}}
    if not (tree / "app" / "__init__.py").exists():  # this file imports app.*
        raise SystemExit(f"{tree} has no app package (a tree of the time it was named gpuq): "
                         "run that tree's own bench/throughput_kube.py")
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--phase", json.dumps(p)],
                       env=env, cwd=tree, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"gpuq phase on {tree} failed:\n{r.stderr[-4000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out.get("profile"):
        print(out["profile"])
    cost = ", ".join(f"{k} {v:.1f}" for k, v in out["cpu"].items())
    if out.get("threads"):  # gpuq's process by thread (the bench's own watch included)
        cost += " [" + ", ".join(f"{k} {v:.1f}" for k, v in out["threads"].items()) + "]"
    if out.get("gc"):
        g = out["gc"]
        cost += (" (garbage collector " + ", ".join(
            f"gen{i} {n}x {t:.2f} s" for i, (n, t) in enumerate(zip(g["count"], g["seconds"],
                                                                     strict=True))) + ")")
    return out["rate"], (f"{cost} ({out['passes']} passes; settled {out['settled_s']:.0f} s; "
                         f"Pod {out['pod_bytes']:,} B)")


def tree_name(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "app", "gpuq"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (r.stdout.strip() or str(tree)) + ("+changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--gangs", type=int, default=0, help="8-Pod gangs for gpuq (0: none)")
    ap.add_argument("--scheduler-default-qps", action="store_true")
    ap.add_argument("--bind-workers", default="32",
                    help="gpuq phases, one per value of GPUQ_K8S_BIND_WORKERS (1: binds in "
                    "turn, the code before parallel binds; default 32, the default setting)")
    ap.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE)
    ap.add_argument("--baseline-tree", type=Path,
                    help="also run the gpuq phases with that checkout's app package, first")
    ap.add_argument("--profile", type=int, default=0,
                    help="cProfile each gpuq phase, print its N costliest functions")
    ap.add_argument("--no-kube-scheduler", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every phase this many times, alternating (kube-scheduler, "
                    "then each gpuq), and print each one's median beside its runs")
    ap.add_argument("--phase", help=argparse.SUPPRESS)  # one gpuq phase (bench_gpuq)
    a = ap.parse_args()
    if a.phase:
        print(json.dumps(gpuq_phase(json.loads(a.phase))))
        return
    gpn = a.gpus_per_node
    if max(a.pods, 8 * a.gangs) > a.nodes * gpn:  # phases run one after another
        raise SystemExit("backlog larger than the cluster's GPUs: every Pod must fit")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
          f"load {os.getloadavg()[0]:.1f}; {a.nodes} kwok nodes x {gpn} GPUs")
    with running_control_plane(node_lease_s=40, node_grace_s=120,
                               scheduler_qps=0 if a.scheduler_default_qps else 1000) as cp:
        s = Session(cp)
        bound_calls(s.core.api_client, CALL_TIMEOUT_S)  # see CALL_TIMEOUT_S
        kube = RealKube(s)
        t = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: s.core.create_node(gfd_node(f"gpu-{i}", gpn),
                                                     _preload_content=False), range(a.nodes)))

        def ready() -> bool:
            items = s.core.list_node().items
            return sum(any(c.type == "Ready" and c.status == "True"
                           for c in (n.status.conditions or [])) for n in items) == a.nodes
        wait_for(ready, 300, "nodes Ready")
        print(f"{a.nodes} nodes Ready in {time.monotonic() - t:.1f} s")
        print(f"load before the phases: {os.getloadavg()[0]:.1f}")
        rows = []
        trees = [*([a.baseline_tree] if a.baseline_tree else []), Path(__file__).parents[1]]
        names = {tree: tree_name(tree) for tree in trees}  # once: a commit meanwhile is not
        for round_ in range(1, a.rounds + 1):
            if not a.no_kube_scheduler:
                rate, cost = bench_kube_scheduler(s, kube, a.pods, round_)
                rows.append(("kube-scheduler (default profile)", "1-Pod jobs", a.pods, rate,
                             cost))
                print(f"measured: {rows[-1]}", flush=True)  # kept if a later phase fails
            for tree in trees:
                for w in (int(x) for x in a.bind_workers.split(",")):
                    who = (f"gpuq {names[tree]} (4 teams, fair share), {w} bind "
                           f"worker{'s' if w > 1 else ''}")
                    common = {"nodes": a.nodes, "gpus_per_node": gpn, "workers": w,
                              "profile": a.profile}
                    rate, cost = bench_gpuq(s, kube, tree, count=a.pods, replicas=1, **common)
                    rows.append((who, "1-Pod jobs", a.pods, rate, cost))
                    print(f"measured: {rows[-1]}", flush=True)
                    if a.gangs:
                        rate, cost = bench_gpuq(s, kube, tree, count=a.gangs, replicas=8,
                                                **common)
                        rows.append((who, "8-Pod gangs", a.gangs, rate, cost))
                        print(f"measured: {rows[-1]}", flush=True)
            print(f"load after round {round_}: {os.getloadavg()[0]:.1f}", flush=True)
        print("| scheduler | backlog | count | per s | control plane CPU s in the phase |")
        print("|---|---|---:|---:|---|")
        for who, what, count, r, c in rows:
            print(f"| {who} | {what} | {count:,} | {r:.1f} | {c} |")
        if a.rounds > 1:
            print("| scheduler | backlog | per s, each round | median |")
            print("|---|---|---|---:|")
            for who, what in dict.fromkeys((w, b) for w, b, *_ in rows):
                rates = [r for w, b, _, r, _ in rows if (w, b) == (who, what)]
                print(f"| {who} | {what} | {', '.join(f'{r:.1f}' for r in rates)} | "
                      f"{statistics.median(rates):.1f} |")


if __name__ == "__main__":
    main()

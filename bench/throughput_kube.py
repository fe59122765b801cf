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
  configured below) before the dispatcher starts; the dispatcher (gpuq/dispatch) creates
  each Pod and binds it through pods/binding; Pods/s = backlog / (first pass -> last Pod
  bound). With ``--gangs`` also that many 8-Pod gangs (one GPU per Pod), gangs/s. Once
  per ``--bind-workers`` value (GPUQ_K8S_BIND_WORKERS; 1 binds one job after another,
  as the dispatcher did before parallel binds), so old and new run in one run.

Bound times come from one Pod watch per phase (spec.nodeName first seen). The control
plane's own CPU seconds per phase (from /proc of each process) are printed beside.
Needs the binaries (``make kube-bin``) and TEST_DATABASE_URL (a PostgreSQL server).

    nice -n 10 .venv/bin/python bench/throughput_kube.py --nodes 200 --pods 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from kubernetes import client

from gpuq.clock import utcnow
from gpuq.dispatch.dispatcher import Dispatcher
from gpuq.domain.spec import JobSpec
from gpuq.store.db import make_engine, make_session_factory
from gpuq.store.jobs import submit_jobs
from gpuq.store.node_rows import gpu_type_configs
from tests.fakekube.db import fresh_database
from tests.fakekube.fixtures import elector, make_cluster
from tests.realkube.control_plane import KWOK_NODE_LABEL, running_control_plane
from tests.realkube.fixtures import RealKube, Session, wait_for

GPUS_PER_NODE = 8
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


def gfd_node(name: str) -> dict:
    """A kwok Node as GPU Feature Discovery labels an 8 x A100-80GB machine."""
    cap = {"cpu": "128", "memory": "1024Gi", "pods": "110",
           "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {"metadata": {"name": name, "labels": {
        KWOK_NODE_LABEL: "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.count": str(GPUS_PER_NODE)}},
        "status": {"capacity": cap, "allocatable": cap}}


class BindWatch:
    """The time each Pod of ``namespace`` was first seen bound (one raw watch)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rv = "0"
        while not self._stop.is_set():
            resp = self.core.list_namespaced_pod(
                self.namespace, watch=True, resource_version=rv, timeout_seconds=5,
                allow_watch_bookmarks=True, _preload_content=False)
            for line in resp:
                ev = json.loads(line)
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] in ("ADDED", "MODIFIED") and obj.get("spec", {}).get("nodeName"):
                    self.bound.setdefault(obj["metadata"]["name"], time.monotonic())

    def stop(self) -> None:
        self._stop.set()


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    return ", ".join(f"{k} {after[k] - before.get(k, 0):.1f}" for k in after)


def bench_kube_scheduler(s: Session, kube: RealKube, n: int) -> tuple[float, str]:
    ns = "bench-default"
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
    finally:
        sched.send_signal(signal.SIGCONT)
    cpu0, t0 = s.cp.cpu_seconds(), time.monotonic()
    wait_for(lambda: len(watch.bound) >= n, 60 + n / 10, "kube-scheduler bound all")
    rate = n / (max(watch.bound.values()) - t0)
    cost = cpu_delta(cpu0, s.cp.cpu_seconds())
    watch.stop()
    s.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for(lambda: not s.core.list_namespaced_pod(ns, limit=1).items, 120, "pods deleted")
    return rate, cost


def bench_gpuq(s: Session, kube: RealKube, nodes: int, n: int,
               replicas: int, workers: int) -> tuple[float, str]:
    db = fresh_database(config(nodes * GPUS_PER_NODE))
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
    c = make_cluster(kube)
    # binds in flight at once (GPUQ_K8S_BIND_WORKERS; 1: the dispatcher before parallel binds)
    c.capabilities = replace(c.capabilities, bind_workers=workers)
    c.set_gpu_types(types)
    c.start(wait_s=120)
    wait_for(lambda: len(c.list_nodes()) == nodes, 60, "gpuq sees the nodes")
    watch = BindWatch(s.core, kube.namespace)
    d = Dispatcher(sf, c, elector=elector(url), grace_seconds=2)
    cpu0, t0 = s.cp.cpu_seconds(), time.monotonic()
    try:
        wait_for(lambda: d.run_once() or len(watch.bound) >= n * replicas, 120 + n * replicas / 5,
                 "gpuq bound all")
        rate = n / (max(watch.bound.values()) - t0)
        cost = cpu_delta(cpu0, s.cp.cpu_seconds())
    finally:
        watch.stop()
        d.elector.release()
        c.close()
        engine.dispose()
        kube.core.delete_collection_namespaced_pod(kube.namespace, grace_period_seconds=0)
        wait_for(lambda: not s.core.list_namespaced_pod(kube.namespace, limit=1).items, 120,
                 "pods deleted")
        db.close()
    return rate, cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--gangs", type=int, default=0, help="8-Pod gangs for gpuq (0: none)")
    ap.add_argument("--scheduler-default-qps", action="store_true")
    ap.add_argument("--bind-workers", default="1,16",
                    help="gpuq phases, one per value of GPUQ_K8S_BIND_WORKERS (1: binds in "
                    "turn, the code before parallel binds; default 1,16)")
    a = ap.parse_args()
    if max(a.pods, 8 * a.gangs) > a.nodes * GPUS_PER_NODE:  # phases run one after another
        raise SystemExit("backlog larger than the cluster's GPUs: every Pod must fit")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
          f"load {os.getloadavg()[0]:.1f}; {a.nodes} kwok nodes x {GPUS_PER_NODE} GPUs")
    with running_control_plane(node_lease_s=40, node_grace_s=120,
                               scheduler_qps=0 if a.scheduler_default_qps else 1000) as cp:
        s = Session(cp)
        kube = RealKube(s)
        t = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: s.core.create_node(gfd_node(f"gpu-{i}"),
                                                     _preload_content=False), range(a.nodes)))

        def ready() -> bool:
            items = s.core.list_node().items
            return sum(any(c.type == "Ready" and c.status == "True"
                           for c in (n.status.conditions or [])) for n in items) == a.nodes
        wait_for(ready, 300, "nodes Ready")
        print(f"{a.nodes} nodes Ready in {time.monotonic() - t:.1f} s")
        rows = []
        rate, cost = bench_kube_scheduler(s, kube, a.pods)
        rows.append(("kube-scheduler (default profile)", "1-Pod jobs", a.pods, rate, cost))
        for w in (int(x) for x in a.bind_workers.split(",")):
            who = f"gpuq (4 teams, fair share), {w} bind worker{'s' if w > 1 else ''}"
            rate, cost = bench_gpuq(s, kube, a.nodes, a.pods, 1, w)
            rows.append((who, "1-Pod jobs", a.pods, rate, cost))
            if a.gangs:
                rate, cost = bench_gpuq(s, kube, a.nodes, a.gangs, 8, w)
                rows.append((who, "8-Pod gangs", a.gangs, rate, cost))
        print(f"load after: {os.getloadavg()[0]:.1f}")
        print("| scheduler | backlog | count | per s | control plane CPU s in the phase |")
        print("|---|---|---:|---:|---|")
        for who, what, count, r, c in rows:
            print(f"| {who} | {what} | {count:,} | {r:.1f} | {c} |")


if __name__ == "__main__":
    main()

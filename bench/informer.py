"""The dispatcher's Pod informers on a mid-size cluster: memory and per-pass cost.

One run starts the fake API server (tests/fakekube) with ``--nodes`` GPU nodes and
``--pods`` ordinary Pods of other workloads (bound, Running, about 5 KB of JSON each with
their managedFields, labels, env, volumes and status, as kubelet and kube-scheduler
leave them), then measures, each in a fresh Python process of its own so resident memory
is the informer's and nothing else's:

- ``old``: the informer gpuq had before (every Pod in the cluster, unfiltered, unpaged,
  whole objects; a pass's ``node_views`` walks every Pod to sum each node's usage).
- ``new``: gpuq's informers today (app/cluster/kubernetes.py): its own Pods by label,
  other workloads' only while bound and not finished (field selector), slimmed to what
  node accounting reads and summed per node as events arrive, lists paged.

Figures: resident memory after the informers synced (and what they added to the
process), the initial list's seconds (mostly the fake server's own serialisation, in
the parent process on the same cores), and a pass's ``node_views`` (median of
``--passes``, each after a full collection) beside the same nodes' views without any
Pod, timed in turn: what the Pods add is the difference. Every Pod here is Running and
bound, so the field selector removes nothing: the difference between the informers is
what is kept per Pod and what a pass walks.

    nice -n 10 .venv/bin/python -m bench.informer --nodes 1000 --pods 20000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from kubernetes import client

from app.cluster.k8s_nodes import node_views
from app.cluster.k8s_settings import KubeSettings
from app.cluster.k8s_watch import Informer
from app.cluster.kubernetes import KubernetesCluster
from tests.fakekube.fixtures import api_client_for
from tests.fakekube.objects import GPU_TYPES, article_a100
from tests.fakekube.server import FakeKube


def rss_mib() -> float:
    """This process's resident set (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def ordinary_pod(i: int, node: str) -> dict:
    """A Pod of another workload as the apiserver returns it (about 5 KB of JSON)."""
    name = f"web-{i // 3}-{i:05d}"
    managed = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in ("app", "tier", "team")}},
               "f:spec": {"f:containers": {'k:{"name":"app"}': {
                   ".": {}, "f:env": {f'k:{{"name":"VAR_{j}"}}': {".": {}, "f:name": {},
                                                                   "f:value": {}}
                                      for j in range(8)},
                   "f:image": {}, "f:resources": {"f:requests": {"f:cpu": {}, "f:memory": {}}}}}}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": f"team-{i % 20}", "uid": f"00000000-0000-0000-0000-{i:012d}",
            "labels": {"app": f"web-{i // 3}", "tier": "backend", "team": f"team-{i % 20}",
                       "pod-template-hash": "5d8f7c9b4d"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": f"web-{i // 3}-5d8f7c9b4d", "uid": "1" * 36,
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": managed},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-30T10:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                           "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
                                           "f:startTime": {}}}},
            ],
        },
        "spec": {
            "nodeName": node, "schedulerName": "default-scheduler", "restartPolicy": "Always",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app", "image": "registry.example.com/web:1.4.2",
                "command": ["/bin/server", "--port=8080"],
                "env": [{"name": f"VAR_{j}", "value": f"value-{j}-" + "x" * 20} for j in range(8)],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}",
            "startTime": "2026-11-30T10:00:01Z", "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True",
                            "lastTransitionTime": "2026-11-30T10:00:05Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                     "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0,
                                   "started": True, "image": "registry.example.com/web:1.4.2",
                                   "imageID": "registry.example.com/web@sha256:" + "a" * 64,
                                   "containerID": "containerd://" + "b" * 64,
                                   "state": {"running": {"startedAt": "2026-11-30T10:00:04Z"}}}],
        },
    }


def measure(variant: str, url: str, passes: int) -> dict:
    """In a fresh process: sync the variant's informers, then time passes."""
    # generous call timeouts: the fake API server serialises 20,000 Pods slowly
    ks = KubeSettings(watch_timeout_s=300, request_timeout_s=600)
    api = api_client_for(url)
    base = rss_mib()
    t0 = time.perf_counter()
    if variant == "old":
        core = client.CoreV1Api(api)
        nodes = Informer("nodes", core.list_node, None, page_size=None, transform=None,
                         request_timeout_s=600)
        pods = Informer("pods", core.list_pod_for_all_namespaces, None, page_size=None,
                        transform=None, request_timeout_s=600)
        nodes.relist()
        pods.relist()
        def one_pass() -> int:
            return len(node_views(nodes.items(), pods.items(), GPU_TYPES, ks))
        node_items = nodes.items
        cached = len(pods.items())
    else:
        cluster = KubernetesCluster(api, GPU_TYPES, ks)
        for inf in cluster.informers:
            inf.relist()

        def one_pass() -> int:
            return len(cluster.node_views())
        node_items = cluster.nodes.items
        cached = len(cluster.pods.items()) + len(cluster.usage)
    synced = time.perf_counter() - t0
    after = rss_mib()
    times, bare = [], []
    for _ in range(passes):  # interleaved, so a busy moment of the machine hits both
        gc.collect()  # each timed call starts from the same collector state
        t = time.perf_counter()
        n = one_pass()
        times.append(time.perf_counter() - t)
        gc.collect()
        t = time.perf_counter()
        node_views(node_items(), [], GPU_TYPES, ks)  # the same nodes, no Pods at all
        bare.append(time.perf_counter() - t)
    pass_ms, bare_ms = 1000 * statistics.median(times), 1000 * statistics.median(bare)
    return {"variant": variant, "rss_mib": round(rss_mib(), 1),
            "added_mib": round(after - base, 1), "list_s": round(synced, 2),
            "pass_ms": round(pass_ms, 1), "bare_ms": round(bare_ms, 1), "nodes": n,
            "pods_cached": cached}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--variant", choices=["old", "new"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:  # the child: one variant, figures as JSON on stdout
        print(json.dumps(measure(args.variant, args.url, args.passes)))
        return
    kube = FakeKube(watch_timeout_s=300)
    kube.start()
    names = [f"gpu-{i:04d}" for i in range(args.nodes)]
    for n in names:
        kube.add_node(article_a100(n))
    for i in range(args.pods):
        kube.add_pod(ordinary_pod(i, names[i % len(names)]))
    size = len(json.dumps(ordinary_pod(0, names[0])))
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python "
          f"{platform.python_version()}; fake API server: {args.nodes} nodes, {args.pods} "
          f"Running Pods of other workloads ({size} bytes of JSON each)")
    print(f"{'informer':<8} {'resident MiB':>13} {'added MiB':>10} {'list s':>7} "
          f"{'pass ms':>8} {'no-Pod pass ms':>15} {'objects kept':>13}", flush=True)
    for variant in ("old", "new"):
        out = subprocess.run([sys.executable, "-m", "bench.informer", "--variant", variant,
                              "--url", kube.url, "--passes", str(args.passes)],
                             capture_output=True, text=True)
        if out.returncode:
            print(f"{variant}: failed\n{out.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['variant']:<8} {r['rss_mib']:>13} {r['added_mib']:>10} {r['list_s']:>7} "
              f"{r['pass_ms']:>8} {r['bare_ms']:>15} {r['pods_cached']:>13}", flush=True)
    kube.stop()


if __name__ == "__main__":
    main()

"""Multi-node gangs on the fake Kubernetes API server: a headless Service, a stable
hostname and rendezvous environment on every Pod, and a failed replica stops the gang."""

from __future__ import annotations

from app.cluster.k8s_pods import service_name
from tests.fakekube.fixtures import cluster, kube, wait_until
from tests.fakekube.objects import article_a100, gfd_v100
from tests.integration.test_k8s_bind import gang, nodes

TORCHRUN = {
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                "command": ["sh", "-c"],
                "args": [
                    "torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=4 "
                    "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py"
                ],
                "env": [{"name": "MASTER_PORT", "value": "1"}],  # gpuq's value wins
                # the team's default Pod Security level is restricted (docs/security.md)
                "securityContext": {
                    "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ]
    }
}


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_gang_gets_a_headless_service_hostnames_and_rendezvous_env(kube, cluster, nodes):
    req = gang(job_id="42", nodes=("a100-0", "a100-1", "a100-2"), template=TORCHRUN)
    cluster.bind(req)
    svc_name = service_name(req)
    assert svc_name == "train-42"
    [svc] = [s for (ns, n), s in kube.services.items() if n == svc_name]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"]["gpuq.io/job-id"] == "42"
    assert svc["spec"]["ports"][0]["port"] == 29500
    # the Service came before the Pods (the rendezvous name resolves as soon as they run)
    posts = [p for m, p in kube.requests if m == "POST" and ("/pods" in p or "/services" in p)]
    assert posts[0].endswith("/services")

    pods = sorted(kube.gpuq_pods(), key=lambda p: p["metadata"]["labels"]["gpuq.io/replica"])
    ns = pods[0]["metadata"]["namespace"]
    hosts = [f"train-42-{i}.train-42.{ns}.svc" for i in range(3)]
    for i, pod in enumerate(pods):
        # the Service selects every replica, and each has a stable name under it
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
        assert pod["spec"]["hostname"] == f"train-42-{i}"
        assert pod["spec"]["subdomain"] == "train-42"
        env = env_of(pod)
        assert env["MASTER_ADDR"] == hosts[0] and env["MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "3" and env["NNODES"] == "3"
        assert env["NODE_RANK"] == str(i) and env["RANK"] == str(i)
        assert env["GPUQ_REPLICA_INDEX"] == str(i) and env["GPUQ_HOSTNAME"] == hosts[i]
        assert env["GPUQ_HOSTS"] == ",".join(hosts)
        assert [e["name"] for e in pod["spec"]["containers"][0]["env"]].count("MASTER_PORT") == 1

    # a second attempt (after a requeue) reuses the Service and the same hostnames
    cluster.stop("42", "preempted", grace_seconds=0)
    assert not [n for (_ns, n) in kube.services if n == svc_name]  # stop removes it
    cluster.bind(req)
    assert [n for (_ns, n) in kube.services if n == svc_name] == [svc_name]


def test_single_replica_job_has_no_service(kube, cluster, nodes):
    req = gang(job_id="7", nodes=("a100-0",))
    cluster.bind(req)
    assert kube.services == {}
    [pod] = kube.gpuq_pods()
    assert "hostname" not in pod["spec"] and env_of(pod)["WORLD_SIZE"] == "1"
    assert env_of(pod)["MASTER_ADDR"] == "localhost"


def test_one_failed_replica_stops_the_others_and_the_service_goes(kube, cluster, nodes):
    cluster.bind(gang(job_id="9", nodes=("a100-0", "a100-1", "a100-2")))
    pods = sorted(
        ((p["metadata"]["namespace"], p["metadata"]["name"]) for p in kube.gpuq_pods()),
        key=lambda x: x[1],
    )
    for ns, n in pods:
        kube.set_pod_phase(ns, n, "Running")
    kube.set_pod_phase(*pods[1], "Failed", terminated={"reason": "Error", "exitCode": 1})
    got = []
    wait_until(lambda: got.extend(cluster.poll_events()) or any(e.phase == "failed" for e in got))
    # the two healthy replicas were stopped at once; the failed one stays for its logs
    assert sorted(n for _ns, n, _g in kube.evictions) == [pods[0][1], pods[2][1]]
    assert [p["metadata"]["name"] for p in kube.gpuq_pods()] == [pods[1][1]]
    assert kube.services == {}
    wait_until(lambda: "9" not in cluster.running_job_ids())


def test_a_gang_that_succeeds_loses_its_service(kube, cluster, nodes):
    cluster.bind(gang(job_id="5"))
    assert len(kube.services) == 1
    for p in kube.gpuq_pods():
        kube.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Succeeded")
    got = []
    wait_until(
        lambda: got.extend(cluster.poll_events()) or any(e.phase == "succeeded" for e in got)
    )
    assert kube.services == {} and kube.evictions == []


__all__ = ["article_a100", "gfd_v100"]

"""The short variant of bench/throughput_kube.py (the long runs are ``make bench-kube`` and
``make bench-kube-large``, docs/benchmarks.md): on the tests' real control plane, a few
kwok Nodes labelled as GPU Feature Discovery labels them, kube-scheduler's default profile
binds a backlog of one-GPU Pods, then gpuq's dispatcher and Kubernetes backend (in a
process of their own, as the bench runs them) bind as many one-Pod jobs and a few 8-Pod
gangs. Each phase ends only when the bench's Pod watch has seen every Pod bound, and the
bench's cleanup leaves none behind, so this checks that the measurement itself works here.
It asserts no speed: a rate on a shared machine in a test says nothing."""

from __future__ import annotations

import pytest

from bench.throughput_kube import bench_gpuq, bench_kube_scheduler, gfd_node
from tests.pg_server import server_url
from tests.realkube.control_plane import REPO
from tests.realkube.fixtures import RealKube

NODES, GPUS = 4, 8
PODS, GANGS = 24, 2


def test_short_throughput_run_binds_every_pod(real_kube: RealKube,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    kube = real_kube
    # the gpuq phase's process uses this test session's database server
    monkeypatch.setenv("TEST_DATABASE_URL", server_url())
    for i in range(NODES):
        kube.add_node(gfd_node(f"tput-{i}", GPUS))

    rate, cost = bench_kube_scheduler(kube.s, kube, PODS)
    assert rate > 0 and "kube-apiserver" in cost and "kube-scheduler" in cost

    common = {"nodes": NODES, "gpus_per_node": GPUS, "workers": 16, "profile": 0}
    rate, cost = bench_gpuq(kube.s, kube, REPO, count=PODS, replicas=1, **common)
    assert rate > 0 and "gpuq" in cost
    rate, cost = bench_gpuq(kube.s, kube, REPO, count=GANGS, replicas=8, **common)
    assert rate > 0 and "gpuq" in cost
    assert not kube.gpuq_pods()  # every phase deleted its Pods

"""NodeUsage: per-node sums kept per event equal a recount over the Pods left."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.k8s_nodes import pod_holds_resources, pod_requests
from app.cluster.k8s_usage import NodeUsage, slim_pod
from tests.fakekube.objects import pod

NODES = ["n0", "n1", "n2"]
PHASES = ["Pending", "Running", "Succeeded", "Failed"]

change = st.tuples(
    st.integers(0, 5),  # which Pod
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    st.sampled_from([*NODES, None]),
    st.sampled_from(PHASES),
    st.sampled_from(["100m", "1", "2.5", "250m"]),
    st.integers(0, 3),  # GPUs
)


def _recount(pods: dict[str, dict]) -> dict[str, dict[str, Decimal]]:
    out: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for p in pods.values():
        if pod_holds_resources(p):
            for r, q in pod_requests(p).items():
                out[p["spec"]["nodeName"]][r] += q
    return {n: {r: q for r, q in t.items() if q} for n, t in out.items() if any(t.values())}


@settings(max_examples=200, deadline=None)
@given(st.lists(change, max_size=40))
def test_sums_equal_a_recount(changes):
    usage = NodeUsage()
    alive: dict[str, dict] = {}
    for i, type_, node, phase, cpu, gpus in changes:
        name = f"p{i}"
        full = pod(name, node, {"cpu": cpu, "memory": "1Gi",
                                **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
                   phase=phase)
        if type_ == "DELETED":
            if name not in alive:
                continue
            usage.on_event("DELETED", slim_pod(alive.pop(name)), None)
        else:
            alive[name] = full
            usage.on_event(type_, slim_pod(full), None)
    got = {n: {r: q for r, q in t.items() if q} for n, t in usage.by_node().items()}
    assert {n: t for n, t in got.items() if t} == _recount(alive)


def test_slim_pod_keeps_only_what_accounting_reads():
    full = pod("a", "n0", {"cpu": "2", "nvidia.com/gpu": "1"}, labels={"x": "y"})
    full["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    full["spec"]["containers"][0]["env"] = [{"name": "A", "value": "b" * 1000}]
    slim = slim_pod(full)
    assert slim["metadata"] == {"name": "a", "namespace": "default"}
    assert slim["requests"] == {"cpu": Decimal(2), "nvidia.com/gpu": Decimal(1)}
    assert slim_pod(slim) == slim  # a relisted slim Pod stays the same
    assert len(repr(slim)) < 300

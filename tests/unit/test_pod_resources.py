"""What a job's Pod really asks of its node (kube's PodRequests: containers, sidecars,
init containers, overhead) and the template fields refused at submit (pure)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.pod_resources import (
    booked,
    effective_requests,
    node_selection,
    quantity,
    selection_refuses,
    template_violations,
    tolerations,
)
from app.scheduling.filters import NO_NODE, labels_selected


def c(name, cpu=None, mem=None, **kw):
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    return {"name": name, "image": "x", "resources": {"requests": req}, **kw}


def test_quantities():
    assert quantity("500m") == Decimal("0.5") and quantity("8Gi") == 8 * 2**30
    assert quantity("1e3") == 1000 and quantity("2k") == 2000 and quantity(3) == 3
    assert quantity("bogus") == 0


def test_effective_requests_follow_component_helpers_pod_requests():
    # sidecar 1 CPU runs beside the containers (2+1) and beside the later init
    # container (4+1): the Pod asks max(2+1+1, 4+1) + overhead 0.25
    spec = {"containers": [c("main", "2"), c("log", "1")],
            "initContainers": [c("proxy", "1", restartPolicy="Always"), c("fetch", "4")],
            "overhead": {"cpu": "250m"}}
    assert effective_requests(spec)["cpu"] == Decimal("5.25")
    # an init container before the sidecar does not see it
    spec["initContainers"] = [c("fetch", "4"), c("proxy", "1", restartPolicy="Always")]
    assert effective_requests(spec)["cpu"] == Decimal("4.25")


def test_booked_adds_the_template_to_the_main_container():
    t = {"spec": {"containers": [c("main"), c("log", "500m", "1G")],
                  "initContainers": [c("proxy", "1", "2G", restartPolicy="Always")]}}
    assert booked(t, 4, 16) == (5.5, 19.0)
    assert booked({}, 4, 16) == (4, 16)  # gpuq's default container: nothing else


def test_main_container_request_must_match_and_limits_not_below():
    t = {"spec": {"containers": [{"name": "m", "image": "x", "resources": {
        "requests": {"cpu": "8"}, "limits": {"memory": "8Gi"}}}]}}
    got = dict(template_violations(t, 4, 64))
    assert "pod_template.spec.containers[0].resources.requests.cpu" in got
    # the old Pod asked 64 GB under an 8Gi limit: the apiserver's 422, after the wait
    lim = got["pod_template.spec.containers[0].resources.limits.memory"]
    assert "below resources.memory_gb (64 GB)" in lim
    ok = {"spec": {"containers": [{"name": "m", "image": "x", "resources": {
        "requests": {"cpu": "4", "memory": "16G"}, "limits": {"memory": "16Gi"}}}]}}
    assert template_violations(ok, 4, 16) == []
    side = {"containers": [c("m"), {"name": "s", "image": "x", "resources": {
        "requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}
    assert [p for p, _ in template_violations(side, 1, 1)] == [
        "pod_template.containers[1].resources.limits.cpu"]


def test_node_selection_gpuq_does_not_evaluate_is_refused():
    t = {"spec": {"containers": [c("m")],
                  "nodeSelector": {"disktype": "ssd", "nvidia.com/gpu.product": "A100"},
                  "affinity": {
                      "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                          "nodeSelectorTerms": [{"matchExpressions": [
                              {"key": "nvidia.com/gpu.product", "operator": "In",
                               "values": ["A100"]},
                              {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                      "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                          {"topologyKey": "kubernetes.io/hostname"}]}},
                  "topologySpreadConstraints": [
                      {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
                      {"maxSkew": 1, "topologyKey": "zone"}]}}
    paths = [p for p, _ in template_violations(t, 1, 1)]
    base = "pod_template.spec"
    req = (f"{base}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
           ".nodeSelectorTerms[0]")
    assert paths == [f"{base}.nodeSelector.disktype", f"{req}.matchExpressions[1]",
                     f"{base}.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuring"
                     "Execution", f"{base}.topologySpreadConstraints[1].whenUnsatisfiable"]


def test_a_selection_of_only_empty_terms_is_refused():
    """An empty node selector term matches no node (k8s.io/api core/v1 NodeSelectorTerm):
    a template whose every term is empty could never run; with a real term beside it the
    empty one is harmless (terms are ORed)."""
    def aff(*terms):
        return {"spec": {"containers": [c("m")], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": list(terms)}}}}}
    product = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                     "values": ["A100"]}]}
    [(path, why)] = template_violations(aff({}, {"matchExpressions": []}), 1, 1)
    assert path.endswith("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms")
    assert "matches no node" in why
    assert template_violations(aff({}, product), 1, 1) == []


def test_tolerations_become_the_cores():
    t = {"spec": {"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "p0", "effect": "NoSchedule"},
        {"key": "maintenance", "operator": "Exists"}, {"operator": "Exists"}]}}
    assert tolerations(t) == (("dedicated", "p0", "NoSchedule"), ("maintenance", "", ""),
                              ("", "", ""))


def test_selection_refuses_as_the_kubelet_does():
    """nodeSelector must match; of the required node affinity terms one must hold, with
    every expression of it (kubelet NodeAffinity): only product terms pass the policy."""
    key = "nvidia.com/gpu.product"
    sxm, pcie = "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIe-80GB"

    def terms(*values_per_term):
        return {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": "In", "values": list(v)}]}
                for v in values_per_term]}}}}}

    assert selection_refuses(None, {}) is None
    assert selection_refuses({"spec": {}}, {}) is None
    assert selection_refuses(terms([sxm]), {key: sxm}) is None
    assert selection_refuses(terms([sxm], [pcie]), {key: pcie}) is None  # terms are ORed
    why = selection_refuses(terms([sxm]), {key: pcie})
    assert why == f"node selection {key} in ({sxm}) (the node has {key}={pcie})"
    assert "(none)" in selection_refuses(terms([sxm]), {})
    sel = {"spec": {"nodeSelector": {key: sxm}}}
    assert selection_refuses(sel, {key: sxm}) is None
    assert selection_refuses(sel, {}) == (
        f"node selection {key} in ({sxm}) (the node has {key}=(none))")
    # the nodeSelector and the affinity both hold: it is folded into every term
    both = terms([sxm], [pcie])
    both["spec"]["nodeSelector"] = {key: sxm}
    assert selection_refuses(both, {key: sxm}) is None
    assert selection_refuses(both, {key: pcie}) is not None
    # an empty term matches no node (nodeaffinity.go); a non-empty one beside it still can
    empty = terms()
    empty["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [{}]
    assert selection_refuses(empty, {key: sxm}) is not None
    assert node_selection(empty) == NO_NODE


def test_node_selection_is_what_the_core_filters_by():
    key = "nvidia.com/gpu.product"
    t = {"spec": {"nodeSelector": {key: "A"}, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": ["B", "A"]}]},
            {"matchExpressions": [{"key": key, "operator": "In", "values": ["C"]}]}]}}}}}
    assert node_selection(t) == (((key, ("A",)), (key, ("A", "B"))),
                                 ((key, ("A",)), (key, ("C",))))
    assert node_selection({"spec": {"nodeSelector": {key: "A"}}}) == (((key, ("A",)),),)
    assert node_selection(None) == () and node_selection({"spec": {}}) == ()
    # an operator the policy refuses is never read looser than the kubelet would: as
    # matching no node (a NotIn read as In would pass exactly the nodes it excludes)
    not_in = {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "NotIn", "values": ["A"]}]}]}}}}}
    assert node_selection(not_in) == NO_NODE
    assert selection_refuses(not_in, {key: "A"}) is not None


PRODUCTS = ["A", "B", "C"]
_expr = st.fixed_dictionaries({
    "key": st.just("nvidia.com/gpu.product"), "operator": st.just("In"),
    "values": st.lists(st.sampled_from(PRODUCTS), max_size=2)})
_templates = st.fixed_dictionaries({}, optional={
    "nodeSelector": st.dictionaries(st.just("nvidia.com/gpu.product"),
                                    st.sampled_from(PRODUCTS), max_size=1),
    "affinity": st.builds(
        lambda terms: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}},
        st.lists(st.fixed_dictionaries({}, optional={
            "matchExpressions": st.lists(_expr, max_size=2)}), min_size=1, max_size=3)),
})


@settings(max_examples=300, deadline=None)
@given(_templates, st.dictionaries(st.just("nvidia.com/gpu.product"),
                                   st.sampled_from(PRODUCTS), max_size=1))
def test_the_selection_gpuq_places_by_is_what_the_kubelet_admits(spec, labels):
    """gpuq's reading of a template's node selection (placement's filter and the check at
    bind) admits exactly the nodes the fake kubelet's NodeAffinity admission does
    (tests/fakekube/kubelet.py, modelled on pkg/kubelet/lifecycle/predicate.go), for the
    selections the Pod policy lets through: product keys, ``In``."""
    from tests.fakekube.kubelet import _affinity_ok

    node = {"metadata": {"labels": labels}}
    ours = selection_refuses({"spec": spec}, labels) is None
    assert ours == _affinity_ok(node, spec), (spec, labels)
    assert ours == labels_selected(node_selection({"spec": spec}), labels)

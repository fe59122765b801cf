"""One node signature, derived from what the filters and scores declare they read.

Property: two nodes with equal signatures pass the same filters and get the
same score for any request (placement scores one node per signature and
caches by it). The second node is the first with its cards in another order,
its name, rack and NVLink domain changed, and every node aspect that is NOT
in the signature redrawn: a filter or score that reads something it did not
declare (or a declaration dropped) makes some pair here fit or score apart.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.capacity_index import measure
from app.scheduling.context import PlacementContext
from app.scheduling.filters import allowed_types, selects
from app.scheduling.model import Device, Node
from app.scheduling.modes import replica_options
from app.scheduling.node_reads import (
    ASPECTS,
    declared,
    node_signature,
    reads,
    signature_aspects,
    withdraw,
)
from app.scheduling.placement import fit_on_node
from app.scheduling.scores import score
from tests.unit.core_fixtures import TYPES, job, snap

MIG = ("3g.40gb", "2g.20gb", "1g.10gb")
PRODUCT = "nvidia.com/gpu.product"
TAINTS = ((), (("gpu", "true", "NoSchedule"),), (("x", "", "PreferNoSchedule"),))


@st.composite
def device(draw, gpu_type: str) -> Device:
    kind = draw(st.sampled_from(["free", "free", "whole", "share", "mig", "external"]))
    if kind == "mig" and gpu_type == "a100-80g":
        d = Device(0, mig_layout=MIG)
        d.slices_used = [draw(st.booleans()) for _ in MIG]
        return d
    if kind == "share" and gpu_type == "rtx4090-24g":
        used = draw(st.sampled_from([0.25, 0.5, 0.75]))
        return Device(0, share_used=used, share_memory_gb=24 * used)
    return Device(0, whole_used=kind == "whole", external=kind == "external")


@st.composite
def node_pair(draw) -> tuple[Node, Node]:
    gpu_type = draw(st.sampled_from([*TYPES, None]))
    devices = draw(st.lists(device(gpu_type), max_size=6)) if gpu_type else []
    cpu = draw(st.sampled_from([16.0, 64.0]))
    mem = draw(st.sampled_from([64.0, 512.0]))
    a = Node(
        "a", gpu_type, [replace(d, index=i) for i, d in enumerate(devices)], cpu=cpu,
        memory_gb=mem, cpu_used=draw(st.sampled_from([0.0, 4.0, cpu - 2.0, cpu])),
        memory_used_gb=draw(st.sampled_from([0.0, 16.0, mem - 8.0])),
        rack="r1", network=draw(st.sampled_from(["eth", "ib"])), nvlink_domain="n1",
        labels=draw(st.sampled_from([{}, {"zone": "a"}, {PRODUCT: "SXM"}, {PRODUCT: "PCIe"}])),
        taints=draw(st.sampled_from(TAINTS)),
        schedulable=draw(st.booleans()),
    )
    order = draw(st.permutations(range(len(devices))))
    b = replace(
        a, name="b", rack="r2", nvlink_domain=None,
        devices=[replace(devices[j], index=i, slices_used=list(devices[j].slices_used))
                 for i, j in enumerate(order)],
    )
    for aspect in set(ASPECTS) - set(signature_aspects()):  # what no one declares reading
        b = draw(REDRAW[aspect](b))
    return a, b


def _redraw_cards(n: Node):
    return st.lists(device(n.gpu_type), max_size=6).map(
        lambda ds: replace(n, devices=[replace(d, index=i) for i, d in enumerate(ds)])
    )


#: How to draw another value of each aspect (for the aspects outside the signature).
REDRAW = {
    "gpu_type": lambda n: st.sampled_from([*TYPES, None]).map(lambda t: replace(n, gpu_type=t)),
    "cards": _redraw_cards,
    "cpu": lambda n: st.sampled_from([0.0, 8.0, n.cpu]).map(lambda u: replace(n, cpu_used=u)),
    "memory": lambda n: st.sampled_from([0.0, 32.0, n.memory_gb]).map(
        lambda u: replace(n, memory_used_gb=u)),
    "network": lambda n: st.sampled_from(["eth", "ib", "roce"]).map(
        lambda x: replace(n, network=x)),
    "taints": lambda n: st.sampled_from(TAINTS).map(lambda x: replace(n, taints=x)),
    "schedulable": lambda n: st.booleans().map(lambda x: replace(n, schedulable=x)),
    "labels": lambda n: st.sampled_from([{}, {"zone": "b"}, {"zone": "a", "x": "1"}]).map(
        lambda x: replace(n, labels=x)),
}


requests = st.builds(
    lambda mode, n, share, mig, mem, cpu, gmem, tol, placement, selector: job(
        "r",
        **{"whole": {"gpus": n}, "cpu": {"gpus": 0}, "share": {"gpu_share": share},
           "mig": {"mig": mig}}[mode],
        min_gpu_memory_gb=gmem, cpu=cpu, memory_gb=mem, placement=placement,
        tolerations=(("gpu", "", ""),) if tol else (), node_selector=selector,
    ),
    st.sampled_from(["whole", "whole", "cpu", "share", "mig"]),
    st.integers(1, 4), st.sampled_from([0.25, 0.5]), st.sampled_from(["2g.20gb", "auto"]),
    st.sampled_from([8.0, 32.0]), st.sampled_from([1.0, 8.0]), st.sampled_from([0.0, 12.0, 30.0]),
    st.booleans(), st.sampled_from(["binpack", "spread"]),
    st.sampled_from([(), (((PRODUCT, ("SXM",)),),), (((PRODUCT, ("PCIe", "SXM")),),)]),
)


def _shape(p):
    """A placement without where it is (node name, card indices)."""
    if p is None:
        return None
    return (p.gpu_type, len(p.devices), tuple(prof for _, _, prof in p.mig), p.share,
            p.share_memory_gb, p.units, p.cpu, p.memory_gb)


@settings(max_examples=300, deadline=None)
@given(node_pair(), requests)
def test_equal_signatures_fit_and_score_alike(pair: tuple[Node, Node], request) -> None:
    a, b = pair
    assert node_signature(a) == node_signature(b)
    # a pending mix, so the fragmentation score is in play
    mix_jobs = [job("m1", gpus=1), job("m2", gpu_share=0.5), job("m3", gpus=2)]
    ctx = PlacementContext.from_snapshot(snap([a, b], mix_jobs))
    for d in replica_options(request, allowed_types(request, TYPES, ctx.pools)) or []:
        gt = TYPES.get(d.gpu_type) if d.gpu_type else None
        pa, pb = fit_on_node(request, d, a, gt, ctx), fit_on_node(request, d, b, gt, ctx)
        assert _shape(pa) == _shape(pb)
        if pa is None or pb is None:
            continue
        node_type = TYPES.get(a.gpu_type) if a.gpu_type else None
        sa = score(request, d, a, measure(a, node_type), pa, ctx, {}, set())
        sb = score(request, d, b, measure(b, node_type), pb, ctx, {}, set())
        # equal up to the order the cards' used fractions are added in (b's cards are a
        # permutation of a's): 0.25 + 1.0 + 0.5 and 1.0 + 0.5 + 0.25 may differ in the
        # last bit; a score cached for the wrong state differs by far more
        assert sa == pytest.approx(sb, rel=1e-12, abs=1e-12)


def test_the_signature_is_what_filters_and_scores_declare() -> None:
    names = declared()
    for fn in ("app.scheduling.filters.node_fits_host", "app.scheduling.filters.tolerates",
               "app.scheduling.filters.selects",
               "app.scheduling.filters.pick_whole", "app.scheduling.filters.pick_mig",
               "app.scheduling.filters.pick_share", "app.scheduling.placement.fit_on_node",
               "app.scheduling.scores.score", "app.scheduling.scores.headroom_penalty",
               "app.scheduling.fragmentation.fragmentation_delta"):
        assert fn in names, f"{fn} declares no node reads"
    assert set(signature_aspects()) == set().union(*names.values())
    assert "labels" in signature_aspects()  # filters.selects reads them


def test_a_declaration_is_what_puts_an_aspect_in_the_signature() -> None:
    """Labels split signatures because the node selection filter declares reading them;
    without the declaration they would not (and a cached score would serve a node the
    job does not select)."""
    a = Node("a", None, [], cpu=8, memory_gb=8, labels={PRODUCT: "SXM"})
    b = replace(a, name="b", labels={PRODUCT: "PCIe"})
    assert node_signature(a) != node_signature(b)
    withdraw(selects)
    try:
        assert "labels" not in signature_aspects()
        assert node_signature(a) == node_signature(b)
    finally:
        reads("labels")(selects)
    assert node_signature(a) != node_signature(b)
    assert set(ASPECTS) >= set(signature_aspects())


def test_every_aspect_can_be_redrawn() -> None:
    assert set(REDRAW) == set(ASPECTS)

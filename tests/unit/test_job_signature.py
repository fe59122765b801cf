"""One job signature, derived from what the admission gates declare they read.

Property: two requests with equal signatures get the same verdict from every gate
whose answer the cycle's memo keeps (never fits, cordoned, placement), on the same
cluster state. The second request is the first with every field that is NOT in the
signature redrawn (identity, team, priority, submit time, estimates, preemption
history ...): a gate that reads a field it did not declare (or a declaration
dropped) makes some pair here get different answers, and the memo would hand one
job the other's answer.
"""

from __future__ import annotations

from dataclasses import fields, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.engine import Cycle
from app.scheduling.gates import (
    GATES,
    REMEMBERED,
    Memo,
    NoFit,
    Placement,
    job_signature,
    signature_fields,
)
from app.scheduling.model import JobRequest, PoolInfo, RunningJob, TeamInfo
from app.scheduling.verdicts import FIT, Fit, Verdict
from tests.unit.core_fixtures import TYPES, job, node, snap, whole

#: How to draw another value of each request field outside the signature.
REDRAW = {
    "id": st.sampled_from(["b", "zz", "q-1"]),
    "name": st.sampled_from(["other", "x"]),
    "team": st.sampled_from(["t", "u"]),
    "priority": st.sampled_from(["P0", "P1", "P2"]),
    "priority_value": st.sampled_from([100, 500, 1000]),
    "preemptible": st.booleans(),
    "submitted_at": st.sampled_from([0.0, 50.0, 1e6]),
    "duration_estimate_s": st.sampled_from([None, 10.0, 1e5]),
    "preemption_count": st.integers(0, 3),
    "last_preempted_at": st.sampled_from([None, 5.0]),
    "last_preempted_by": st.sampled_from([None, "r0"]),
    "last_reclaimed_at": st.sampled_from([None, 5.0]),
    "longest_attempt_s": st.sampled_from([None, 100.0]),
    "predicted_s": st.sampled_from([None, 10.0, 1e5]),
}

requests = st.builds(
    lambda mode, n, share, mig, units, mem, cpu, gmem, tol, placement, topo, reps, types, pool,
    speed, avoid: job(
        "a",
        **{"whole": {"gpus": n}, "cpu": {"gpus": 0}, "share": {"gpu_share": share},
           "mig": {"mig": mig}, "units": {"gpu_units": units}}[mode],
        min_gpu_memory_gb=gmem, cpu=cpu, memory_gb=mem, placement=placement, topology=topo,
        replicas=reps if mode != "units" else 1, min_available=reps if mode != "units" else 1,
        tolerations=(("gpu", "", ""),) if tol else (), gpu_types=types, pool=pool,
        speed=speed, avoid_nodes=avoid,
    ),
    st.sampled_from(["whole", "whole", "cpu", "share", "mig", "units"]),
    st.integers(1, 8), st.sampled_from([0.25, 0.5]), st.sampled_from(["3g.40gb", "auto"]),
    st.sampled_from([4.0, 20.0]), st.sampled_from([8.0, 600.0]), st.sampled_from([1.0, 80.0]),
    st.sampled_from([0.0, 20.0, 60.0]), st.booleans(), st.sampled_from(["binpack", "spread"]),
    st.sampled_from(["none", "same_node", "same_rack"]), st.integers(1, 3),
    st.sampled_from([(), ("a100-80g",), ("v100-16g", "rtx4090-24g")]),
    st.sampled_from(["p", "q"]), st.sampled_from([(), (("v100-16g", 2.0),)]),
    st.sampled_from([frozenset(), frozenset({"a0"}), frozenset({"a0", "a1"})]),
)

SELECTORS = st.sampled_from([(), ((("gpu.product", ("SXM",)),),),
                             ((("gpu.product", ("PCIe",)),), (("zone", ("a",)),))])
requests = st.tuples(requests, SELECTORS).map(lambda t: replace(t[0], node_selector=t[1]))


@st.composite
def twins(draw) -> tuple[JobRequest, JobRequest]:
    a = draw(requests)
    changes = {f: draw(REDRAW[f]) for f in REDRAW if f not in signature_fields()}
    return a, replace(a, **changes)


@st.composite
def cycles(draw) -> Cycle:
    nodes = [
        node("a0", "a100-80g", 8, mig={0: ("3g.40gb", "3g.40gb")}, rack="r1"),
        node("a1", "a100-80g", 4, rack="r2", cpu=draw(st.sampled_from([8, 64]))),
        node("v0", "v100-16g", 4, rack="r1"),
        node("g0", "rtx4090-24g", 2, rack="r2"),
    ]
    nodes[3] = replace(nodes[3], schedulable=draw(st.booleans()))
    nodes[0] = replace(nodes[0], labels={"gpu.product": "SXM"})
    nodes[1] = replace(nodes[1], labels={"gpu.product": "PCIe", "zone": "a"})
    run = []
    for i in range(draw(st.integers(0, 3))):
        r = job(f"r{i}", gpus=2)
        run.append(RunningJob(r, (whole("a0" if i < 2 else "v0", "a100-80g" if i < 2 else
                                        "v100-16g", (2 * i + 2, 2 * i + 3) if i < 2 else (0, 1)),),
                              0.0))
    s = snap(nodes, [], running=run, now=1000.0,
             pools={"p": PoolInfo("p"), "q": PoolInfo("q", gpu_types=("v100-16g",))},
             teams={"t": TeamInfo("t", "p"), "u": TeamInfo("u", "p", quota_units=40)})
    c = Cycle(s)
    c.build()
    return c


def _same(x: Verdict, y: Verdict) -> bool:
    if isinstance(x, Fit) and isinstance(y, Fit):
        return [(p.node, p.devices, p.mig, p.share, p.units) for p in x.placements] == [
            (p.node, p.devices, p.mig, p.share, p.units) for p in y.placements]
    if isinstance(x, NoFit) and isinstance(y, NoFit):
        return (x.reason.code, x.reason.message) == (y.reason.code, y.reason.message)
    return type(x) is type(y)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles(), twins())
def test_equal_signatures_get_the_same_answers(c: Cycle, pair) -> None:
    a, b = pair
    assert job_signature(a) == job_signature(b)
    for gate in REMEMBERED:
        if not gate.applies(c):
            continue
        c.memo = Memo()  # each asked afresh: the property is about the answers, not the memo
        va = gate.check(c, a, c.memo.number(a), FIT)
        c.memo = Memo()
        vb = gate.check(c, b, c.memo.number(b), FIT)
        differ = {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in fields(JobRequest)
                  if getattr(a, f.name) != getattr(b, f.name)}
        assert _same(va, vb), (gate.name, differ, va, vb)


def test_the_signature_is_what_the_remembered_gates_declare() -> None:
    assert set(signature_fields()) == set().union(*(g.reads for g in REMEMBERED))
    assert [g.name for g in GATES] == ["never_fits", "cordoned", "admission_cap", "team_quota",
                                       "placement", "pool_charge"]
    names = {f.name for f in fields(JobRequest)}
    for g in GATES:
        assert g.reads <= names, g.name
    # identity and priority are never in it: a backlog of one shape shares one answer
    assert not {"id", "name", "team", "priority_value", "submitted_at"} & set(signature_fields())


def test_every_field_outside_the_signature_is_redrawn() -> None:
    outside = {f.name for f in fields(JobRequest)} - set(signature_fields())
    assert outside == set(REDRAW)


def test_a_new_read_joins_the_signature(monkeypatch) -> None:
    """A gate that starts reading a field declares it, and the signature splits on it."""
    assert "duration_estimate_s" not in signature_fields()
    monkeypatch.setattr(Placement, "reads", Placement.reads | {"duration_estimate_s"})
    assert "duration_estimate_s" in signature_fields()


SCORE_REDRAW = {
    **REDRAW,
    "replicas": st.integers(1, 3),
    "min_available": st.just(1),
    "allow_mixed_types": st.booleans(),
    "topology": st.sampled_from(["none", "same_node"]),
    "avoid_nodes": st.sampled_from([frozenset(), frozenset({"a0"})]),
    "node_selector": SELECTORS,
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles(), requests, st.data())
def test_equal_state_keys_fit_and_score_alike(c: Cycle, a: JobRequest, data) -> None:
    """Placement caches, per node state, whether a replica fits and its score, by what
    fit_on_node() and score() declare they read of the request (``placement.STATE_READS``;
    the node's name against ``avoid_nodes`` is checked by name): requests equal there fit
    alike and score alike on every node neither avoids."""
    from app.scheduling.capacity_index import measure
    from app.scheduling.filters import allowed_types
    from app.scheduling.modes import replica_options
    from app.scheduling.placement import STATE_READS, fit_on_node
    from app.scheduling.scores import score

    outside = {f.name for f in fields(JobRequest)} - _state_reads()
    b = replace(a, **{f: data.draw(SCORE_REDRAW[f]) for f in outside if f in SCORE_REDRAW})
    if b.min_available > b.replicas:
        b = replace(b, min_available=b.replicas)
    assert STATE_READS(a) == STATE_READS(b)
    ctx = c.ctx
    for d in replica_options(a, allowed_types(a, ctx.gpu_types, ctx.pools)) or []:
        gt = TYPES.get(d.gpu_type) if d.gpu_type else None
        for n in c.state.nodes.values():
            if n.name in a.avoid_nodes or n.name in b.avoid_nodes:
                continue
            pa, pb = fit_on_node(a, d, n, gt, ctx), fit_on_node(b, d, n, gt, ctx)
            assert (pa is None) == (pb is None)
            if pa is None or pb is None:
                continue
            cap = measure(n, TYPES.get(n.gpu_type) if n.gpu_type else None)
            assert score(a, d, n, cap, pa, ctx, {}, set()) == score(b, d, n, cap, pb, ctx, {},
                                                                     set())


def _state_reads() -> set[str]:
    from app.scheduling.placement import fit_on_node
    from app.scheduling.scores import score

    return set(score.job_reads) | set(fit_on_node.job_reads)  # type: ignore[attr-defined]


def test_every_field_outside_the_state_key_is_redrawn() -> None:
    outside = {f.name for f in fields(JobRequest)} - _state_reads()
    assert outside <= set(SCORE_REDRAW) | {"min_available"}

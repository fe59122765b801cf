"""The capacity index stays in step with the nodes through reserve/unreserve."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.context import PlacementContext
from app.scheduling.model import PoolInfo
from app.scheduling.placement import place_job
from app.scheduling.state import ClusterState
from tests.unit.core_fixtures import TYPES, job, node
from tests.unit.test_core_properties import clusters, jobs


def snapshot_of(idx: CapacityIndex) -> tuple:
    caps = {n: (c.free_whole, round(c.used_frac, 9), dict(c.mig_free), round(c.share_free, 9))
            for n, c in idx.caps.items()}
    per_node_whole = {(t, k, n) for t, bs in idx.whole.items() for k, b in enumerate(bs)
                      for n in b}
    mig = {(t, p, n, c) for t, ps in idx.mig.items() for p, d in ps.items() for n, c in d.items()}
    share = {(t, n, round(v, 9)) for t, d in idx.share.items() for n, v in d.items()}
    return caps, per_node_whole, mig, share


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_index_matches_a_fresh_build_after_every_change(data) -> None:
    nodes = data.draw(clusters())
    state = ClusterState(nodes, TYPES)
    ctx = PlacementContext(TYPES, {"p": PoolInfo("p"), "q": PoolInfo("q")})
    held = []
    for i in range(data.draw(st.integers(1, 25))):
        if held and data.draw(st.booleans()):
            for p in held.pop(data.draw(st.integers(0, len(held) - 1))):
                state.unapply(p)
        else:
            ps = place_job(data.draw(jobs(i)), state, ctx)
            if ps:
                for p in ps:
                    state.apply(p)
                held.append(ps)
        fresh = CapacityIndex(TYPES)
        for n in state.nodes.values():
            fresh.add(n)
        assert snapshot_of(state.index) == snapshot_of(fresh)


def test_state_copies_on_write_and_never_touches_callers_nodes() -> None:
    n = node("a", "a100-80g", 2)
    state = ClusterState([n], TYPES)
    ps = place_job(job("j", gpus=2), state, PlacementContext(TYPES))
    for p in ps:
        state.apply(p)
    assert state.nodes["a"] is not n
    assert not any(d.whole_used for d in n.devices)
    assert all(d.whole_used for d in state.nodes["a"].devices)


def test_index_rejects_without_scanning() -> None:
    nodes = [node(f"n{i}", "a100-80g", 8) for i in range(50)]
    state = ClusterState(nodes, TYPES)
    assert state.index.max_free_whole("a100-80g") == 8
    assert state.index.blocks_of("a100-80g", 3) == 100
    assert state.index.max_free_whole("v100-16g") == 0

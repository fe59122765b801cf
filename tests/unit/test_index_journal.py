"""Tentative changes leave the capacity index exactly as it was, its order included.

Placement takes the first of equally good nodes it meets, so the order of the
index's buckets and groups is part of the answer. A gang trial or a what-if
that reserved and then rolled back used to re-file the nodes it touched at the
end of their buckets: the same request asked twice on the same capacity got
two different placements (v100 once, a100 the next time), and the cycle's
memo, which keeps one job's answer for every job of its signature, could hand
out an answer the other job would not have got.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.books import Books
from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.engine import Cycle
from app.scheduling.model import PoolInfo, RunningJob, TeamInfo
from app.scheduling.placement import try_place
from app.scheduling.state import ClusterState
from tests.unit.core_fixtures import TYPES, job, node, snap, whole


def _cycle() -> Cycle:
    nodes = [
        node("a0", "a100-80g", 8, mig={0: ("3g.40gb", "3g.40gb")}, rack="r1"),
        node("a1", "a100-80g", 4, rack="r2", cpu=8),
        node("v0", "v100-16g", 4, rack="r1"),
        replace(node("g0", "rtx4090-24g", 2, rack="r2"), schedulable=False),
    ]
    run = [RunningJob(job("r0", gpus=2), (whole("a0", "a100-80g", (2, 3)),), 0.0)]
    s = snap(nodes, [], running=run, now=1000.0,
             pools={"p": PoolInfo("p"), "q": PoolInfo("q", gpu_types=("v100-16g",))},
             teams={"t": TeamInfo("t", "p"), "u": TeamInfo("u", "p", quota_units=40)})
    c = Cycle(s)
    c.build()
    return c


def test_the_same_gang_asked_twice_goes_to_the_same_place() -> None:
    """The case hypothesis found: two cards on each of two replicas, binpack; a100
    and v100 nodes score alike, and the trial of the first ask reordered a100's groups."""
    c = _cycle()
    gang = job("a", gpus=2, replicas=2, min_available=2, cpu=1.0, memory_gb=8.0)
    answers = set()
    for _ in range(4):
        placed = try_place(gang, c.state, c.ctx)
        assert placed is not None
        answers.add(tuple((p.node, p.devices) for p in placed.placements))
    assert len(answers) == 1, answers


def _order(idx: CapacityIndex) -> tuple:
    """Everything a query can see of the index, in the order it sees it."""
    out = []
    for t in idx.group_types():
        out.append(("groups", t, [(sig, list(names)) for sig, names in idx.groups_of(t)]))
        if t is None:
            continue
        out.append(("whole", t, list(idx.nodes_with_whole(t, 1)),
                    list(idx.nodes_with_whole(t, 1, largest_first=True)),
                    [idx.replica_slots(t, k) for k in range(1, 9)], idx.free_whole_total(t),
                    idx.max_free_whole(t)))
        out.append(("share", t, list(idx.nodes_with_share(t, 0.25)), idx.has_share(t, 0.5)))
        out.append(("mig", t, list(idx.nodes_with_mig(t, "3g.40gb")),
                    idx.mig_free_total(t, "3g.40gb")))
    return tuple(out)


def _nodes():
    return [node(f"n{i}", t, k, mig={0: ("3g.40gb", "3g.40gb")} if t == "a100-80g" else None)
            for i, (t, k) in enumerate([("a100-80g", 4), ("a100-80g", 4), ("v100-16g", 4),
                                        ("v100-16g", 2), ("rtx4090-24g", 2),
                                        ("rtx4090-24g", 2), ("v100-16g", 4)])]


requests = st.sampled_from([
    job("w1", gpus=1), job("w2", gpus=2), job("g", gpus=2, replicas=2, min_available=2),
    job("s", gpu_share=0.5), job("m", mig="3g.40gb"), job("u", gpu_units=12.0),
    job("sp", gpus=1, replicas=3, min_available=3, placement="spread"),
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requests, min_size=1, max_size=8), st.lists(requests, min_size=1, max_size=6),
       st.integers(0, 3))
def test_tentative_changes_leave_the_index_as_it_was(committed, tried, removed) -> None:
    """Commit some placements, then try others inside a what-if, a statement that is
    discarded and plain trials: afterwards every query sees the index as before."""
    ctx = _cycle().ctx
    ctx = replace(ctx, gpu_types=TYPES, pools={"p": PoolInfo("p")}, score_cache={})
    state, running = _committed(committed, ctx)
    before = _order(state.index)
    victims = running[:removed]
    with state.simulate_remove(victims):
        for j in tried:
            try_place(j, state, ctx)
    assert _order(state.index) == before
    for j in tried:
        try_place(j, state, ctx)
    assert _order(state.index) == before

    class _Ledger:
        def reserve(self, r: RunningJob) -> None: ...
        def release(self, r: RunningJob) -> None: ...

    books = Books(state, _Ledger(), _Ledger())  # type: ignore[arg-type]
    stmt = books.statement()
    for r in victims:
        stmt.release(r)
    for i, j in enumerate(tried):
        placed = try_place(j, state, ctx)
        if placed is not None:
            stmt.reserve(RunningJob(replace(j, id=f"t{i}"), tuple(placed.placements), 0.0))
    stmt.discard()
    assert _order(state.index) == before
    # and a committed change is a real one: the index agrees with one built afresh
    stmt = books.statement()
    for r in victims:
        stmt.release(r)
    stmt.commit()
    fresh = ClusterState([replace(n) for n in state.nodes.values()], TYPES)
    assert _as_sets(state.index) == _as_sets(fresh.index)


def _as_sets(idx: CapacityIndex) -> list:
    """What every query sees, order aside (a real change may reorder)."""
    out: list = []
    for row in _order(idx):
        if row[0] == "groups":
            out.append((row[1], {sig: sorted(names) for sig, names in row[2]}))
        else:
            out.append(tuple(sorted(x) if isinstance(x, list) and x and isinstance(x[0], str)
                             else x for x in row))
    return out


def _committed(committed, ctx) -> tuple[ClusterState, list[RunningJob]]:
    state = ClusterState(_nodes(), TYPES)
    running: list[RunningJob] = []
    for i, j in enumerate(committed):
        placed = try_place(replace(j, id=f"c{i}"), state, ctx)
        if placed is not None:
            for p in placed.placements:
                state.apply(p)
            running.append(RunningJob(replace(j, id=f"c{i}"), tuple(placed.placements), 0.0))
    return state, running


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requests, min_size=1, max_size=8), st.lists(requests, min_size=1, max_size=6),
       st.integers(1, 3))
def test_a_type_first_grouped_inside_a_what_if_is_grouped_as_it_was(committed, tried,
                                                                     removed) -> None:
    """A reservation's search frees running jobs (a what-if) and only then asks for the
    groups of a type nothing grouped yet (every card of it was taken, so no placement
    looked at its nodes). The grouping the what-if leaves behind is kept -- the next
    what-if does not group the type's nodes again -- and it is the one grouping the
    type afresh gives: same groups, same order, as on a twin state that never ran it."""
    ctx = replace(_cycle().ctx, gpu_types=TYPES, pools={"p": PoolInfo("p")}, score_cache={})
    state, running = _committed(committed, ctx)
    twin, _ = _committed(committed, ctx)
    assert state.index.caps  # built before the what-if, as a cycle builds it; nothing grouped
    victims = running[:removed]
    touched_types = {p.gpu_type for r in victims for p in r.placements}
    with state.simulate_remove(victims):
        for t in sorted(touched_types):  # as the search's placement asks for them
            list(state.index.groups_of(t))
        for j in tried:
            try_place(j, state, ctx)
    # the what-if's grouping of the types it freed cards of is kept (the old code dropped
    # it at the end, and the next what-if grouped every node of the type again)
    assert touched_types <= set(state.index._base.groups)
    assert _order(state.index) == _order(twin.index)


def _answer(placed) -> tuple | None:
    return None if placed is None else tuple(
        (p.node, p.devices, p.mig, p.share) for p in placed.placements)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requests, min_size=1, max_size=8), st.lists(requests, min_size=1, max_size=6),
       st.integers(0, 3))
def test_answers_do_not_depend_on_when_a_type_was_first_grouped(committed, tried,
                                                                removed) -> None:
    """Two equal states, one with every type grouped beforehand, the other grouping a type
    only when a query first needs it -- often inside a gang's trial or a what-if, after
    the journal changed some of its nodes. Every request gets the same answer from both.
    Grouping a type inside a journal used to leave its touched nodes out of the base
    grouping (the overlay's groups came after every base group), so equally good nodes
    were met in another order: a MIG gang of two replicas went to (n0, n3) on one and
    (n3, n0) on the other (bench/same_decisions.py, random snapshot 323)."""
    def ctx_():
        return replace(_cycle().ctx, gpu_types=TYPES, pools={"p": PoolInfo("p")},
                       score_cache={})
    early, running = _committed(committed, ctx_())
    late, _ = _committed(committed, ctx_())
    _order(early.index)  # every type grouped before anything below
    ca, cb = ctx_(), ctx_()
    for j in tried:  # gangs try inside a trial (a journal)
        assert _answer(try_place(j, early, ca)) == _answer(try_place(j, late, cb))
    victims = running[:removed]
    with early.simulate_remove(victims), late.simulate_remove(victims):
        for j in tried:
            assert _answer(try_place(j, early, ca)) == _answer(try_place(j, late, cb))
    assert _order(early.index) == _order(late.index)

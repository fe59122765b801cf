"""hold_releasing: releasing capacity is used, held by nobody the core can preempt."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import ReplicaPlacement, TeamInfo
from app.scheduling.reasons import StaticCapacity
from app.scheduling.releasing import hold_in_snapshot, hold_releasing
from tests.unit.core_fixtures import job, node, running, snap, whole


def test_marks_cards_cpu_memory_and_copies_the_node():
    n = node("a", "a100-80g", 8, cpu=64, mem=512)
    out = hold_releasing([n], [], [whole("a", "a100-80g", (0, 1, 2), cpu=8, mem=64)])
    (m,) = out
    assert m is not n and not any(d.whole_used for d in n.devices)  # the input is untouched
    assert [d.whole_used for d in m.devices] == [True] * 3 + [False] * 5
    assert (m.cpu_used, m.memory_used_gb) == (8, 64)
    # what could ever fit is unchanged: a held card is not an external one
    assert StaticCapacity.of(out).by_type["a100-80g"].cards == 8


def test_nodes_without_releasing_rows_are_passed_through():
    a, b = node("a", "a100-80g", 8), node("b", "a100-80g", 8)
    out = hold_releasing([a, b], [], [whole("a", "a100-80g", (0,))])
    assert out[1] is b


def test_a_card_a_live_allocation_holds_is_not_marked_twice():
    """A preemptor admitted onto its victim's cards already counts them."""
    n = node("a", "a100-80g", 8, cpu=10, mem=100)
    live = [whole("a", "a100-80g", (0, 1), cpu=8, mem=80)]
    (m,) = hold_releasing([n], [live], [whole("a", "a100-80g", (0, 1, 2), cpu=8, mem=80)])
    assert [d.whole_used for d in m.devices][:3] == [False, False, True]
    # cpu/memory capped at what the node has left beside the live allocation
    assert (m.cpu_used, m.memory_used_gb) == (2, 20)


def test_mig_slices_and_shares():
    n = node("a", "a100-80g", 2, mig={0: ("3g.40gb", "2g.20gb")})
    mig = ReplicaPlacement(0, "a", "a100-80g", (0,), mig=((0, 1, "2g.20gb"),), units=3)
    share = ReplicaPlacement(1, "a", "a100-80g", (1,), share=0.5, share_memory_gb=40, units=5)
    (m,) = hold_releasing([n], [], [mig, share])
    assert m.devices[0].slices_used == [False, True]
    assert m.devices[1].share_used == 0.5 and not m.devices[1].whole_used


def test_the_core_neither_uses_nor_preempts_releasing_capacity():
    """A P0 job that needs the held cards waits: it is not admitted onto them
    and nothing else is preempted for it beyond what frees a whole node."""
    nodes = [node("a", "a100-80g", 8)]
    p0 = job("p0", gpus=8, priority="P0", priority_value=1000, preemptible=False)
    s = snap(nodes, [p0], now=10_000)
    hold_in_snapshot(s, [whole("a", "a100-80g", tuple(range(8)))])
    result = schedule(s)
    assert result.admissions == [] and result.preemptions == []
    # the same cluster with a running preemptible job instead: preempted and replaced
    victim = job("v", gpus=8, priority="P2", priority_value=100)
    s2 = snap(nodes, [p0], now=10_000,
              running=[running(victim, whole("a", "a100-80g", tuple(range(8))))])
    r2 = schedule(s2)
    assert [p.job_id for p in r2.preemptions] == ["v"]


def test_releasing_capacity_counts_in_no_quota():
    """Held cards belong to no team: a team whose quota is exactly the free
    cards (4 x 10 CU) still gets them."""
    nodes = [node("a", "a100-80g", 8)]
    s = snap(nodes, [job("j", gpus=4)], now=100, teams={"t": TeamInfo("t", "p", quota_units=40)})
    hold_in_snapshot(s, [whole("a", "a100-80g", (0, 1, 2, 3))])
    (adm,) = schedule(s).admissions
    assert set(adm.placements[0].devices) == {4, 5, 6, 7}

"""Smoke rules of the core interface: memory fit, gangs, quota."""

from app.scheduling.engine import schedule
from app.scheduling.model import Snapshot, TeamInfo
from tests.unit.core_fixtures import TWO_TYPES, job, node
from tests.unit.core_fixtures import snap as core_snap


def snap(nodes, pending, quota=None) -> Snapshot:
    return core_snap(nodes, pending, types=TWO_TYPES,
                     teams={"t": TeamInfo("t", "p", quota_units=quota)})


def test_memory_fit_never_on_smaller_card() -> None:
    res = schedule(snap([node("v", "v100", 8)], [job("j", gpus=1, min_gpu_memory_gb=30)]))
    assert not res.admissions
    assert "j" in res.unschedulable


def test_gang_all_or_nothing() -> None:
    res = schedule(snap([node("a", "a100", 4)], [job("g", gpus=4, replicas=2, min_available=2)]))
    assert not res.admissions
    # one 4-card node can never hold two 4-card replicas at once: a true verdict
    assert res.unschedulable["g"].startswith("needs 2 replicas x 4 whole a100 GPU(s) at once")
    res = schedule(snap([node("a", "a100", 4), node("b", "a100", 2)],
                        [job("g", gpus=2, replicas=3, min_available=3)]))
    assert [len(a.placements) for a in res.admissions] == [3]


def test_team_quota_in_cu() -> None:
    res = schedule(snap([node("a", "a100", 8)], [job("x", gpus=2), job("y", gpus=2)], quota=30))
    assert [a.job_id for a in res.admissions] == ["x"]
    assert "quota" in res.reasons["y"]


def test_input_snapshot_not_mutated() -> None:
    n = node("a", "a100", 2)
    schedule(snap([n], [job("x", gpus=2)]))
    assert not any(d.whole_used for d in n.devices)


def test_cards_another_workload_holds_are_waited_for_not_unschedulable() -> None:
    """A card held by a Pod gpuq does not manage (``Device.external``) is freed when that
    Pod ends: an 8-card job on the only 8-card node, two of whose cards are held so, waits
    ``pending`` with the capacity it lacks. It was ``unschedulable``, and the re-check of
    such jobs runs only when the inventory changes, which usage does not."""
    n = node("a", "a100", 8)
    n.devices[6].external = n.devices[7].external = True
    res = schedule(snap([n], [job("big", gpus=8)]))
    assert not res.admissions and "big" not in res.unschedulable
    why = res.reasons["big"]
    assert "largest free block: a100 6" in why, why
    # and says how many of its type's cards other workloads hold
    assert why.endswith("; cards held by workloads gpuq did not start: a100 2"), why
    assert why.fields["foreign_cards"] == {"a100": 2}
    # a wait with no foreign cards says nothing of them
    busy = node("b", "a100", 8)
    res = schedule(snap([busy], [job("x", gpus=8), job("y", gpus=8)]))
    assert "held by workloads" not in res.reasons["y"], res.reasons["y"]
    res = schedule(snap([node("a", "a100", 8)], [job("big", gpus=8)]))
    assert [a.job_id for a in res.admissions] == ["big"]
    # a job that needs more cards than the node has at all is still a verdict
    res = schedule(snap([n], [job("huge", gpus=9)]))
    assert "huge" in res.unschedulable

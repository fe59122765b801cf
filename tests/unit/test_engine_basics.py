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

"""Smoke rules of the core interface: memory fit, gangs, quota."""

from gpuq.scheduling.engine import schedule
from gpuq.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    Node,
    PoolInfo,
    PriorityInfo,
    Snapshot,
    TeamInfo,
)

TYPES = {
    "a100": GpuType("a100", 80, 10),
    "v100": GpuType("v100", 16, 4),
}


def node(name: str, t: str, gpus: int) -> Node:
    return Node(name, t, [Device(i) for i in range(gpus)], cpu=64, memory_gb=512)


def job(id: str, **kw) -> JobRequest:
    base = dict(
        name=id,
        team="t",
        pool="p",
        priority="P1",
        priority_value=500,
        preemptible=True,
        submitted_at=0.0,
    )
    base.update(kw)
    return JobRequest(id=id, **base)


def snap(nodes, pending, quota=None) -> Snapshot:
    return Snapshot(
        now=0.0,
        gpu_types=TYPES,
        nodes=nodes,
        pools={"p": PoolInfo("p")},
        teams={"t": TeamInfo("t", "p", quota_units=quota)},
        priorities={"P1": PriorityInfo("P1", 500, True)},
        running=[],
        pending=pending,
    )


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

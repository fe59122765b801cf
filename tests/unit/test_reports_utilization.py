"""Per-type utilization from a hand-built snapshot, and DCGM averaging."""

from __future__ import annotations

import pytest

from app.reports.dcgm import util_by_type
from app.reports.utilization import (
    borrowed_units,
    pending_counts,
    utilization,
    utilization_report,
    wanted_type,
)
from app.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    LeaseInfo,
    MigProfile,
    Node,
    PoolInfo,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)

A100 = GpuType("a100", 80, 10, {"3g.40gb": MigProfile("3g.40gb", 40, 0.4286)})
V100 = GpuType("v100", 16, 4)


def job(i, **kw):
    base = dict(
        id=str(i),
        name=f"j{i}",
        team="nlp",
        pool="training",
        priority="P1",
        priority_value=500,
        preemptible=True,
        submitted_at=0.0,
        gpus=1,
    )
    base.update(kw)
    return JobRequest(**base)


def snapshot(pending=()):
    nodes = [
        Node(
            "a-0",
            "a100",
            [Device(0, ("3g.40gb", "3g.40gb")), *[Device(i) for i in (1, 2, 3)]],
            64,
            512,
        ),
        Node("v-0", "v100", [Device(i) for i in range(4)], 64, 512),
        Node("cpu-0", None, [], 64, 512),
    ]
    running = [
        RunningJob(
            job(1),
            (ReplicaPlacement(0, "a-0", "a100", devices=(1, 2), units=20),),
            0.0,
            leases=(LeaseInfo("l1", "inference", "training", "a100", 10, "1", 0, 1800),),
        ),
        RunningJob(
            job(2, mig="3g.40gb", gpus=None),
            (ReplicaPlacement(0, "a-0", "a100", mig=((0, 0, "3g.40gb"),), units=4.286),),
            0.0,
        ),
    ]
    pools = {
        "training": PoolInfo("training", ("a100", "v100")),
        "inference": PoolInfo("inference", ("v100",)),
    }
    return Snapshot(
        now=100.0,
        gpu_types={"a100": A100, "v100": V100},
        nodes=nodes,
        pools=pools,
        teams={},
        priorities={},
        running=running,
        pending=list(pending),
    )


def test_utilization_by_hand():
    pend = [job(10), job(11, gpu_types=("v100",)), job(12, pool="inference"), job(13, gpus=0)]
    rows = {r.gpu_type: r for r in utilization(snapshot(pend))}
    a, v = rows["a100"], rows["v100"]
    assert a.cards == 4 and a.capacity_cu == 40
    assert a.allocated_cu == pytest.approx(24.286)
    assert a.allocation_ratio == pytest.approx(24.286 / 40)
    assert a.idle_ratio == pytest.approx(1 - 24.286 / 40)
    assert a.free_cards == 1  # device 3 (0 is MIG, 1 and 2 taken)
    assert a.total_slices == 2 and a.free_slices == 1
    assert a.pending_jobs == 1  # job 10 via the pool's first type
    assert v.capacity_cu == 16 and v.allocated_cu == 0 and v.idle_ratio == 1.0
    assert v.free_cards == 4 and v.pending_jobs == 2
    assert a.gpu_util is None


def test_pending_borrowed_and_report():
    pend = [job(i, gpu_types=("a100",)) for i in range(11)]
    snap = snapshot(pend)
    assert pending_counts(snap) == {("training", "P1", "a100"): 11}
    assert borrowed_units(snap) == {("inference", "training", "a100"): 10}
    rep = utilization_report(snap)
    assert rep["gpu_util_note"] and "GPUQ_PROMETHEUS_URL" in rep["gpu_util_note"]
    assert [a["key"] for a in rep["alerts"]] == ["a100"]  # 11 queued, v100 100% idle
    rep2 = utilization_report(snap, {"a100": 0.5}, gpu_util_source="http://prom")
    assert rep2["gpu_util_note"] is None
    assert {r["gpu_type"]: r["gpu_util"] for r in rep2["gpu_types"]} == {"a100": 0.5, "v100": None}


def test_wanted_type_rules():
    pools = {"p": PoolInfo("p", ("v100", "a100")), "q": PoolInfo("q")}
    assert wanted_type(job(1, pool="p"), pools) == "v100"
    assert wanted_type(job(1, pool="p", gpu_types=("a100",)), pools) == "a100"
    assert wanted_type(job(1, pool="q"), pools) == "any"
    assert wanted_type(job(1, pool="q", gpus=0), pools) == "cpu"
    assert wanted_type(job(1, pool="q", gpus=None, gpu_units=20.0), pools) == "any"


def test_dcgm_average_by_type():
    result = [
        {"metric": {"Hostname": "a-0", "gpu": "0"}, "value": [0, "80"]},
        {"metric": {"Hostname": "a-0", "gpu": "1"}, "value": [0, "40"]},
        {"metric": {"instance": "v-0:9400", "gpu": "0"}, "value": [0, "10"]},
        {"metric": {"Hostname": "unknown", "gpu": "0"}, "value": [0, "99"]},
        {"metric": {"Hostname": "a-0"}, "value": [0, "NaNx"]},
    ]
    got = util_by_type(result, {"a-0": "a100", "v-0": "v100"})
    assert got == {"a100": pytest.approx(0.6), "v100": pytest.approx(0.1)}

"""Small builders for core tests (and bench/same_decisions.py): the demo cluster's three GPU
types, two plain ones, and node, job and snapshot factories."""

from __future__ import annotations

from app.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    MigProfile,
    Node,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)

A100 = GpuType(
    "a100-80g", 80, 10,
    mig_profiles={
        "3g.40gb": MigProfile("3g.40gb", 40, 0.4286),
        "2g.20gb": MigProfile("2g.20gb", 20, 0.2857),
        "1g.10gb": MigProfile("1g.10gb", 10, 0.1429),
    },
)
V100 = GpuType("v100-16g", 16, 4)
RTX = GpuType("rtx4090-24g", 24, 2, shareable=True)
TYPES = {t.name: t for t in (A100, V100, RTX)}
# two plain types, for tests and benches that need no MIG, sharing or long names
TWO_TYPES = {"a100": GpuType("a100", 80, 10), "v100": GpuType("v100", 16, 4)}
PRIOS = {
    "P0": PriorityInfo("P0", 1000, False),
    "P1": PriorityInfo("P1", 500, True),
    "P2": PriorityInfo("P2", 100, True),
}


def node(
    name: str, t: str | None, gpus: int, *, cpu: float = 64, mem: float = 512,
    network: str = "eth", rack: str | None = None, mig: dict[int, tuple[str, ...]] | None = None,
) -> Node:
    mig = mig or {}
    return Node(
        name, t, [Device(i, mig_layout=mig.get(i, ())) for i in range(gpus)], cpu=cpu,
        memory_gb=mem, network=network, rack=rack,
    )


def job(id: str, **kw) -> JobRequest:
    base: dict = dict(
        name=id, team="t", pool="p", priority="P1", priority_value=500, preemptible=True,
        submitted_at=0.0,
    )
    if not any(k in kw for k in ("gpus", "gpu_units", "mig", "gpu_share")):
        base["gpus"] = 1
    elif "gpus" not in kw:
        base["gpus"] = None
    base.update(kw)
    return JobRequest(id=id, **base)


def snap(
    nodes, pending, *, running=(), teams=None, pools=None, now: float = 0.0,
    config: SchedulerConfig | None = None, types=None, priorities=None,
) -> Snapshot:
    return Snapshot(
        now=now,
        gpu_types=types or TYPES,
        nodes=list(nodes),
        pools=pools or {"p": PoolInfo("p")},
        teams=teams or {"t": TeamInfo("t", "p")},
        priorities=priorities or PRIOS,
        running=list(running),
        pending=list(pending),
        config=config or SchedulerConfig(),
    )


def running(j: JobRequest, *placements: ReplicaPlacement, started_at: float = 0.0) -> RunningJob:
    return RunningJob(j, tuple(placements), started_at)


def whole(node: str, t: str, devs: tuple[int, ...], *, cpu: float = 1, mem: float = 1,
          replica: int = 0) -> ReplicaPlacement:
    return ReplicaPlacement(replica, node, t, devs, units=TYPES[t].weight * len(devs), cpu=cpu,
                            memory_gb=mem)

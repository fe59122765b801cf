"""Benchmark of the scheduling core against a naive first-fit scan, same run, same data.

Prints, for 1,000 and 10,000 nodes (8 GPUs each, three GPU types) and
10,000 and 100,000 pending jobs: placements per second, one cycle's time,
and a cycle's time when 100,000 pending jobs cannot fit. The naive
baseline is what a scheduler without an index does: for each job, scan
the nodes in order and take the first with enough free cards of an
allowed type with enough memory (no scoring). Where the naive scan would
take minutes it is measured on a prefix of the jobs and extrapolated
(marked "~").

Run: ``make bench`` or ``.venv/bin/python bench/core.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from app.scheduling.engine import schedule  # noqa: E402
from app.scheduling.model import (  # noqa: E402
    Device,
    GpuType,
    JobRequest,
    Node,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)

TYPES = {
    "a100-80g": GpuType("a100-80g", 80, 10),
    "v100-16g": GpuType("v100-16g", 16, 4),
    "rtx4090-24g": GpuType("rtx4090-24g", 24, 2, shareable=True),
}
NAMES = list(TYPES)
TEAMS = {f"team{i}": TeamInfo(f"team{i}", "p") for i in range(8)}
PRIOS = {"P1": PriorityInfo("P1", 500, True)}


def cluster(n: int) -> list[Node]:
    out = []
    for i in range(n):
        t = NAMES[i % 3]
        out.append(Node(f"n{i}", t, [Device(d) for d in range(8)], cpu=128, memory_gb=1024,
                        rack=f"r{i // 32}", network="ib" if t == "a100-80g" else "eth"))
    return out


def jobs(n: int, seed: int, *, gpus: tuple[int, ...] = (1, 1, 2, 4, 8), prefix: str = "j",
         min_mem: tuple[float, ...] = (0, 0, 12, 20, 40)) -> list[JobRequest]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        g = rnd.choice(gpus)
        out.append(JobRequest(
            id=f"{prefix}{i}", name=f"{prefix}{i}", team=f"team{rnd.randrange(8)}", pool="p",
            priority="P1", priority_value=500, preemptible=True, submitted_at=float(i),
            gpus=g, min_gpu_memory_gb=rnd.choice(min_mem), cpu=2.0 * g, memory_gb=16.0 * g,
            duration_estimate_s=3600.0,
        ))
    return out


def snapshot(nodes, pending, running=(), now: float = 0.0) -> Snapshot:
    return Snapshot(now, TYPES, nodes, {"p": PoolInfo("p")}, TEAMS, PRIOS, list(running),
                    list(pending), SchedulerConfig())


def full_cluster_running(nodes: list[Node]) -> list[RunningJob]:
    """Every card busy: one 8-card job per node."""
    out = []
    for n in nodes:
        r = JobRequest(id=f"run-{n.name}", name="r", team="team0", pool="p", priority="P1",
                       priority_value=500, preemptible=True, submitted_at=0.0, gpus=8, cpu=16,
                       memory_gb=64)
        p = ReplicaPlacement(0, n.name, n.gpu_type, tuple(range(8)),
                             units=TYPES[n.gpu_type].weight * 8, cpu=16, memory_gb=64)
        out.append(RunningJob(r, (p,), 0.0))
    return out


# -- naive first-fit baseline ---------------------------------------------------------
def naive_cycle(snap: Snapshot, limit: int | None = None) -> tuple[int, int, float]:
    """First fit by scanning nodes; returns (jobs looked at, admitted, seconds)."""
    t0 = time.perf_counter()
    free = {n.name: [True] * len(n.devices) for n in snap.nodes}
    cpu = {n.name: n.cpu for n in snap.nodes}
    for r in snap.running:
        for p in r.placements:
            for d in p.devices:
                free[p.node][d] = False
            cpu[p.node] -= p.cpu
    pending = sorted(snap.pending, key=lambda j: (-j.priority_value, j.submitted_at))
    if limit is not None:
        pending = pending[:limit]
    admitted = 0
    for j in pending:
        need = j.gpus or 0
        for n in snap.nodes:
            t = snap.gpu_types[n.gpu_type]
            if t.memory_gb < j.min_gpu_memory_gb or cpu[n.name] < j.cpu:
                continue
            f = free[n.name]
            idx = [i for i, x in enumerate(f) if x][:need]
            if len(idx) == need:
                for i in idx:
                    f[i] = False
                cpu[n.name] -= j.cpu
                admitted += 1
                break
    return len(pending), admitted, time.perf_counter() - t0


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,000 nodes only")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {load:.1f} at start")
    print("times are wall seconds (CPU seconds of this process in brackets: the machine is "
          "shared, so CPU time is the steadier figure)")
    sizes = [1000] if args.quick else [1000, 10_000]
    print("\n== one cycle on an empty cluster (jobs of 1-8 GPUs, mixed memory needs)")
    print(f"{'nodes':>6} {'pending':>7} | {'gpuq cycle s':>16} {'admitted':>8} "
          f"{'placements/s':>21} | {'naive cycle s':>13} {'admitted':>8} {'placements/s':>12}")
    for n_nodes in sizes:
        nodes = cluster(n_nodes)
        for n_jobs in (10_000, 100_000):
            pend = jobs(n_jobs, seed=n_nodes + n_jobs)
            res, dt, cpu = timed(lambda: schedule(snapshot(nodes, pend)))  # noqa: B023
            reps = sum(len(a.placements) for a in res.admissions)
            limit = None if n_nodes * n_jobs <= 1000 * 10_000 else 10_000
            looked, nadm, ndt = naive_cycle(snapshot(nodes, pend), limit)
            est = " " if looked == n_jobs else "~"
            print(f"{n_nodes:>6} {n_jobs:>7} | {dt:>7.3f} [{cpu:>6.3f}] {len(res.admissions):>8} "
                  f"{reps / dt:>12.0f} [{reps / cpu:>6.0f}] | {est}{ndt * n_jobs / looked:>12.3f} "
                  f"{nadm:>8} {nadm / ndt:>12.0f}")
    print("\n== one cycle when 100,000 pending jobs cannot fit (every card busy)")
    print(f"{'nodes':>6} {'pending':>7} | {'gpuq cycle s':>16} | {'naive cycle s':>13} | "
          f"{'gpuq, all jobs old':>18}")
    for n_nodes in sizes:
        nodes = cluster(n_nodes)
        run = full_cluster_running(nodes)
        pend = jobs(100_000, seed=7)
        res, dt, cpu = timed(lambda: schedule(snapshot(nodes, pend, run)))  # noqa: B023
        assert not res.admissions and len(res.reasons) == 100_000
        looked, _, ndt = naive_cycle(snapshot(nodes, pend, run), 200)
        # the same backlog, every job past the reservation threshold (reservations tried)
        res, odt, ocpu = timed(
            lambda: schedule(snapshot(nodes, pend, run, now=1e6))  # noqa: B023
        )
        assert not res.admissions
        print(f"{n_nodes:>6} {100_000:>7} | {dt:>7.3f} [{cpu:>6.3f}] | "
              f"~{ndt * 100_000 / looked:>12.1f} | {odt:>7.3f} [{ocpu:>6.3f}]")
    print("\n(~: the naive scan measured on a prefix of the jobs and scaled to all of them; "
          "placements/s counts replicas placed per second of the cycle)")


if __name__ == "__main__":
    main()

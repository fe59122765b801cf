"""Benchmark: the cost of preemption in a scheduling cycle, against a baseline
measured in the same run on the same data.

A full cluster (N nodes x 8 A100, every card held by a 1-card P2 job that
started an hour ago) and a backlog of pending jobs (1, 2, 4 or 8 cards).

- ``preempt``: the backlog is P0, so each job searches for victims (the
  cheapest minimal set) and is admitted in their place;
- ``baseline``: the same backlog at P2 (equal priority: nobody may be
  preempted), so every job is turned away by the O(1) pre-check -- the cost
  of a cycle with nothing to preempt.

Prints wall and CPU seconds per cycle, jobs admitted, victims, and the
machine. Run: ``.venv/bin/python bench/preemption.py [--quick]``.
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

TYPES = {"a100": GpuType("a100", 80, 10)}
PRIO = {"P0": PriorityInfo("P0", 1000, False), "P2": PriorityInfo("P2", 100, True)}


def build(nodes: int, pending: int, prio: str, seed: int = 42) -> Snapshot:
    rng = random.Random(seed)
    ns = [Node(f"n{i}", "a100", [Device(d) for d in range(8)], cpu=128, memory_gb=1024)
          for i in range(nodes)]
    running = []
    for n in ns:
        for d in range(8):
            req = JobRequest(id=f"r-{n.name}-{d}", name="r", team="t", pool="p", priority="P2",
                             priority_value=100, preemptible=True, submitted_at=0.0, gpus=1)
            p = ReplicaPlacement(0, n.name, "a100", (d,), units=10, cpu=1, memory_gb=1)
            running.append(RunningJob(req, (p,), rng.uniform(0, 3000)))
    pi = PRIO[prio]
    jobs = [JobRequest(id=f"j{i}", name="j", team="t", pool="p", priority=pi.name,
                       priority_value=pi.value, preemptible=pi.preemptible,
                       submitted_at=float(i), gpus=rng.choice([1, 2, 4, 8]))
            for i in range(pending)]
    return Snapshot(now=3600.0, gpu_types=TYPES, nodes=ns, pools={"p": PoolInfo("p")},
                    teams={"t": TeamInfo("t", "p")}, priorities=PRIO, running=running,
                    pending=jobs, config=SchedulerConfig())


def measure(snap: Snapshot) -> tuple[float, float, int, int]:
    w, c = time.perf_counter(), time.process_time()
    res = schedule(snap)
    return (time.perf_counter() - w, time.process_time() - c, len(res.admissions),
            len(res.preemptions))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    sizes = [(100, 100), (1000, 500)] if args.quick else [(100, 100), (1000, 500), (1000, 2000)]
    print(f"{'nodes':>6} {'pending':>8} {'case':>9} {'wall s':>8} {'cpu s':>8} "
          f"{'admitted':>9} {'victims':>8}")
    for nodes, pending in sizes:
        for case, prio in (("baseline", "P2"), ("preempt", "P0")):
            wall, cpu, adm, vic = measure(build(nodes, pending, prio))
            print(f"{nodes:>6} {pending:>8} {case:>9} {wall:>8.3f} {cpu:>8.3f} {adm:>9} {vic:>8}")


if __name__ == "__main__":
    main()

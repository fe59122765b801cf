"""Estimated start times: cost on a 10,000-job backlog and accuracy on a replayed trace.

Cost (pure core, no database): a cluster of 96 nodes x 8 GPUs, every card busy with jobs
ending over the next two hours, and 10,000 pending jobs. The baseline is ONE core cycle on
the same snapshot (what the dispatcher pays every second); the estimate is the forward
replay with its default bound (400 cycles) and a tighter one. Load average printed.

Accuracy (``--scenario FILE``): the scenario is replayed by the simulator; every
``--every`` seconds of virtual time the simulator's own snapshot is replayed forward by
the estimator (knowing nothing of later arrivals, running jobs' ends taken from their
``duration_estimate_s`` or an hour), and each prediction is compared with the job's
actual first start in the same simulation. Prints the median and P90 absolute error and
the share of predictions made.

Run: ``.venv/bin/python bench/estimate.py [--scenario eval/philly-day-estimates.yaml]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from core import TYPES, cluster, jobs, snapshot  # noqa: E402

from app.scheduling.engine import schedule  # noqa: E402
from app.scheduling.model import JobRequest, ReplicaPlacement, RunningJob  # noqa: E402
from app.scheduling.policies import get_policy  # noqa: E402
from app.simulate.estimate import MAX_CYCLES, estimate_starts  # noqa: E402
from app.simulate.replay import ScenarioModel, Simulator  # noqa: E402


def busy_cluster(nodes, seed: int = 7) -> list[RunningJob]:
    """Every card busy: two 4-card jobs per node ending within two hours."""
    rnd = random.Random(seed)
    out = []
    for n in nodes:
        for half in (0, 1):
            dur = rnd.uniform(600, 7200)
            r = JobRequest(id=f"run-{n.name}-{half}", name="r", team="team0", pool="p",
                           priority="P1", priority_value=500, preemptible=True,
                           submitted_at=0.0, gpus=4, cpu=8, memory_gb=64,
                           duration_estimate_s=dur)
            devs = tuple(range(4 * half, 4 * half + 4))
            p = ReplicaPlacement(0, n.name, n.gpu_type, devs,
                                 units=TYPES[n.gpu_type].weight * 4, cpu=8, memory_gb=64)
            out.append(RunningJob(r, (p,), 0.0))
    return out


def cost(backlog: int) -> None:
    nodes = cluster(96)
    snap = snapshot(nodes, jobs(backlog, seed=1), busy_cluster(nodes), now=10.0)
    t0 = time.perf_counter()
    schedule(snap)
    one = time.perf_counter() - t0
    print(f"backlog {backlog} pending, {len(snap.running)} running on {len(nodes)} nodes")
    print(f"  baseline: one core cycle           {one * 1000:8.0f} ms")
    for cycles in (100, MAX_CYCLES):
        t0 = time.perf_counter()
        est = estimate_starts(snap, get_policy("gpuq"), max_cycles=cycles)
        dt = time.perf_counter() - t0
        last = max(est.starts.values(), default=snap.now) - snap.now
        print(f"  estimate, max {cycles:4d} cycles: {dt * 1000:8.0f} ms = {dt / one:5.1f} cycles' "
              f"time; {est.cycles} cycles, {len(est.starts)} jobs estimated "
              f"(up to {last / 3600:.1f} h ahead)")


class Probe(Simulator):
    """The simulator, stopping every ``every`` seconds to estimate the pending jobs' starts."""

    def __init__(self, model, every: float) -> None:
        super().__init__(model, get_policy("gpuq"), "gpuq")
        self.every = every
        self.next_probe = every
        self.predictions: list[tuple[int, float, float]] = []  # (job, at, predicted start)

    def cycle(self) -> bool:
        if self.now >= self.next_probe and self.pending:
            self.next_probe = self.now + self.every
            est = estimate_starts(self.snapshot(), self.policy)
            for j in self.pending.values():
                self.predictions.append((j.index, self.now, est.get(j.request.id)))
        return super().cycle()


def accuracy(path: str, every: float) -> None:
    from pathlib import Path

    from app.domain.config import load_config
    from app.simulate.traces import scenario_from_trace

    cfg = load_config(Path(path))
    model = (scenario_from_trace(cfg, base=Path(path).parent) if cfg.trace is not None
             else ScenarioModel.from_config(cfg))
    t0 = time.perf_counter()
    sim = Probe(model, every)
    sim.run()
    errors, missing = [], 0
    for idx, _at, predicted in sim.predictions:
        actual = sim.jobs[idx].first_start_s
        if actual is None:
            continue
        if predicted is None:
            missing += 1
            continue
        errors.append(abs(predicted - actual))
    n = len(errors) + missing
    q = statistics.quantiles(errors, n=10, method="inclusive") if len(errors) > 1 else [0] * 9
    print(f"accuracy on {path}: {len(model.specs)} jobs, a probe every {every:.0f} s, "
          f"{n} predictions of jobs that later started ({time.perf_counter() - t0:.0f} s)")
    print(f"  median absolute error {statistics.median(errors) / 60:.1f} min, "
          f"P90 {q[8] / 60:.1f} min; {missing} ({missing / max(n, 1):.0%}) had no estimate")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--scenario")
    ap.add_argument("--every", type=float, default=3600.0)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared)")
    cost(a.backlog)
    if a.scenario:
        accuracy(a.scenario, a.every)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

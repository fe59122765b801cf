"""Estimated start times: cost on a 10,000-job backlog and accuracy on a replayed trace.

Cost (pure core, no database): a cluster of 96 nodes x 8 GPUs, every card busy with jobs
ending over the next two hours, and 10,000 pending jobs. The baseline is ONE core cycle on
the same snapshot (what the dispatcher pays every second); then the forward replay as it
was before end batching (one cycle per job end, 200 cycles; ``--no-previous`` skips it) and as it is
(ends batched, default bounds), same snapshot, same run. Load average printed.

Accuracy (``--scenario FILE``): the scenario is replayed by the simulator; every
``--every`` seconds of virtual time the simulator's own snapshot is replayed forward by
the estimator (knowing nothing of later arrivals, running jobs' ends taken from their
``duration_estimate_s`` or an hour), and each prediction is compared with the job's
actual first start in the same simulation. Prints the median and P90 absolute error and
the share of predictions made, for the previous and the current estimator on the same
probes (the simulation is run once; both estimate from the same snapshots).

Run: ``.venv/bin/python bench/estimate.py [--scenario eval/philly-day-estimates.yaml]
[--no-previous]``.
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
from app.simulate.all_policies import get_policy  # noqa: E402
from app.simulate.estimate import estimate_starts  # noqa: E402
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


#: the estimator before end batching: one core cycle per job end, at most 200 cycles
PREVIOUS = {"max_cycles": 200, "batch_min_s": 0.0, "batch_share": 0.0}
VARIANTS = {"previous": PREVIOUS, "current": {}}


def cost(backlog: int, previous: bool) -> None:
    nodes = cluster(96)
    snap = snapshot(nodes, jobs(backlog, seed=1), busy_cluster(nodes), now=10.0)
    t0 = time.perf_counter()
    schedule(snap)
    one = time.perf_counter() - t0
    print(f"backlog {backlog} pending, {len(snap.running)} running on {len(nodes)} nodes")
    print(f"  baseline: one core cycle           {one * 1000:8.0f} ms")
    for name, kw in VARIANTS.items():
        if name == "previous" and not previous:
            continue
        t0 = time.perf_counter()
        est = estimate_starts(snap, get_policy("gpuq"), **kw)
        dt = time.perf_counter() - t0
        last = max(est.starts.values(), default=snap.now) - snap.now
        print(f"  estimate, {name:8s}:              {dt * 1000:8.0f} ms = {dt / one:5.1f} cycles' "
              f"time; {est.cycles} cycles, {len(est.starts)} jobs estimated "
              f"(up to {last / 3600:.1f} h ahead)")


class Probe(Simulator):
    """The simulator, stopping every ``every`` seconds to estimate the pending jobs' starts."""

    def __init__(self, model, every: float, variants: dict) -> None:
        super().__init__(model, get_policy("gpuq"), "gpuq")
        self.every = every
        self.next_probe = every
        self.variants = variants
        # variant -> [(job, at, predicted start)]
        self.predictions: dict[str, list[tuple[int, float, float | None]]] = {
            v: [] for v in variants}
        self.cpu: dict[str, float] = dict.fromkeys(variants, 0.0)

    def cycle(self) -> bool:
        if self.now >= self.next_probe and self.pending:
            self.next_probe = self.now + self.every
            for name, kw in self.variants.items():
                t0 = time.process_time()
                est = estimate_starts(self.snapshot(), self.policy, **kw)
                self.cpu[name] += time.process_time() - t0
                for j in self.pending.values():
                    self.predictions[name].append((j.index, self.now, est.get(j.request.id)))
        return super().cycle()


def accuracy(path: str, every: float, previous: bool) -> None:
    from pathlib import Path

    from app.domain.config import load_config
    from app.simulate.traces import scenario_from_trace

    cfg = load_config(Path(path))
    model = (scenario_from_trace(cfg, base=Path(path).parent) if cfg.trace is not None
             else ScenarioModel.from_config(cfg))
    variants = {k: v for k, v in VARIANTS.items() if previous or k != "previous"}
    t0 = time.perf_counter()
    sim = Probe(model, every, variants)
    sim.run()
    print(f"accuracy on {path}: {len(model.specs)} jobs, a probe every {every:.0f} s "
          f"({time.perf_counter() - t0:.0f} s)")
    for name, preds in sim.predictions.items():
        errors, missing = [], 0
        for idx, _at, predicted in preds:
            actual = sim.jobs[idx].first_start_s
            if actual is None:
                continue
            if predicted is None:
                missing += 1
                continue
            errors.append(abs(predicted - actual))
        n = len(errors) + missing
        q = (statistics.quantiles(errors, n=10, method="inclusive") if len(errors) > 1
             else [0] * 9)
        print(f"  {name:8s}: {n} predictions of jobs that later started; median absolute "
              f"error {statistics.median(errors) / 60:.1f} min, P90 {q[8] / 3600:.1f} h; "
              f"{missing} ({missing / max(n, 1):.0%}) had no estimate; "
              f"{sim.cpu[name]:.1f} CPU s in the estimator")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--scenario")
    ap.add_argument("--every", type=float, default=3600.0)
    ap.add_argument("--no-previous", dest="previous", action="store_false",
                    help="skip the previous estimator (one cycle per end; slow)")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared), {os.cpu_count()} CPUs")
    cost(a.backlog, a.previous)
    if a.scenario:
        accuracy(a.scenario, a.every, a.previous)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
